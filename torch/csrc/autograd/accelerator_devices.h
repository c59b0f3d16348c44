#pragma once

// The accelerator devices a process has, as the engine sees them: the device
// types whose registered device guard reports devices and whose nodes do not
// run on the CPU ready queue. The per-pass logging (pass_logging.cpp) and the
// per-process record (process_record.cpp) both count them.

#include <torch/csrc/autograd/backward_device_class.h>

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

} // namespace torch::autograd::device_logging
