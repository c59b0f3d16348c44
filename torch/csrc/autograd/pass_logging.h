#pragma once

// The per-pass work of the autograd device-logging patch, which the engine
// seam (engine.cpp) calls after libtorch's dependency walk: classify the pass
// and emit the API-usage events it decides (pass_logging.cpp).

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/graph_task.h>

#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstddef>
#include <iterator>

namespace torch::autograd::device_logging {

// One past the largest device type a device guard can be registered for. The
// registry is a C array in older releases (2.4) and a std::array in newer
// ones: std::size takes both.
constexpr size_t kNumDeviceTypeSlots =
    std::size(c10::impl::device_guard_impl_registry);

// How many devices of `type` the engine could run nodes on: what its
// registered device guard reports, and 0 for a type without one or one the
// engine keeps on the CPU ready queue (Note [Skipping processes without
// accelerators]).
// Inline: the scan of a CPU-only process calls it for every type, every pass.
inline c10::DeviceIndex accelerator_device_count(
    c10::DeviceType type) noexcept {
  if (runs_on_cpu_ready_queue(type)) {
    return 0;
  }
  const c10::impl::DeviceGuardImplInterface* impl =
      c10::impl::device_guard_impl_registry[static_cast<size_t>(type)].load(
          std::memory_order_relaxed);
  return impl != nullptr ? impl->deviceCount() : 0;
}

// Classifies the pass whose dependencies were just computed (with
// `min_topo_nr`, as the walk got it) and emits the API-usage events it
// decides. Never throws and never allocates per node.
void log_backward_devices(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr) noexcept;

} // namespace torch::autograd::device_logging
