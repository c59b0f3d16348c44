// The per-pass work of the autograd device-logging patch: decide whether a
// pass needs inspecting at all, classify it (backward_device_classifier.h),
// emit each event once, feed the opt-in statistics, and disable the library
// if classifying ever fails.

#include <torch/csrc/autograd/pass_logging.h>

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/device_stats_recording.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <atomic>
#include <exception>
#include <string>

namespace torch::autograd::device_logging {

namespace detail {
// The "done" bits of the state word are the events' own bits.
static_assert(kStateMultiDeviceDone == kMultiDeviceBackward);
static_assert(kStateGpuCpuDone == kGpuCpuBackward);
static_assert(kStateAllEventsDone == kAllBackwardDeviceEvents);
} // namespace detail

namespace {

using detail::state;

std::atomic<ClassifierFaultForTesting> classifier_fault_for_testing{nullptr};

// Note [Skipping processes without accelerators]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A node can only be routed to an accelerator's ready queue if a device guard
// implementation for that type reports at least one device: the engine sizes
// its device queues from exactly these counts and cannot run such a node
// otherwise. So when no registered non-CPU-queue device type reports a device,
// neither event can fire and the pass needs no inspection. The scan is a
// fixed number of atomic loads plus one virtual call per registered backend
// (CUDA's count is cached by c10), i.e. O(1) per pass, and it is not cached
// across passes because a backend may register itself later (a Python import
// or dlopen of an out-of-tree device).
bool process_has_accelerator_devices() noexcept {
  for (size_t i = 0; i < c10::impl::device_guard_impl_registry.size(); ++i) {
    const auto type = static_cast<c10::DeviceType>(i);
    if (runs_on_cpu_ready_queue(type)) {
      continue;
    }
    const c10::impl::DeviceGuardImplInterface* impl =
        c10::impl::device_guard_impl_registry[i].load(
            std::memory_order_relaxed);
    if (impl != nullptr && impl->deviceCount() > 0) {
      return true;
    }
  }
  return false;
}

// Emits the events in `decided` that no pass has emitted yet. The fetch_or on
// the state word makes each event this library's exactly once per process,
// whatever C10_LOG_API_USAGE_ONCE does with repeated calls.
void emit(uint8_t decided) {
  if (decided == kNoBackwardDeviceEvent) {
    return;
  }
  const uint8_t newly =
      decided & ~state.fetch_or(decided, std::memory_order_relaxed);
  if (newly == kNoBackwardDeviceEvent) {
    return;
  }
  detail::events_emitted.fetch_or(newly, std::memory_order_relaxed);
  if (newly & kMultiDeviceBackward) {
    C10_LOG_API_USAGE_ONCE(kMultiDeviceBackwardEventName);
  }
  if (newly & kGpuCpuBackward) {
    C10_LOG_API_USAGE_ONCE(kGpuCpuBackwardEventName);
  }
}

} // namespace

void log_backward_devices(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr) noexcept {
  uint8_t current = state.load(std::memory_order_relaxed);
  if (!(current & detail::kStateHookHasRun)) {
    current =
        state.fetch_or(detail::kStateHookHasRun, std::memory_order_relaxed) |
        detail::kStateHookHasRun;
  }
  if ((current & kAllBackwardDeviceEvents) == kAllBackwardDeviceEvents &&
      !(current & detail::kStateStatsEnabled)) {
    return;
  }
  if (current & detail::kStateDisabled) {
    return;
  }
  const uint8_t pending = kAllBackwardDeviceEvents & ~current;
  const bool stats = current & detail::kStateStatsEnabled;
  try {
    if (!process_has_accelerator_devices()) {
      if (stats) {
        detail::passes_classified.fetch_add(1, std::memory_order_relaxed);
        detail::record_backward_pass(BackwardDeviceClass::kCpuOnly, 0);
      }
      return;
    }
    detail::passes_classified.fetch_add(1, std::memory_order_relaxed);
    if (const ClassifierFaultForTesting fault =
            classifier_fault_for_testing.load(std::memory_order_relaxed)) {
      fault();
    }
    if (stats) {
      const PassDeviceCensus census =
          census_backward_pass(root, task.nodes_in_graph_, min_topo_nr);
      detail::nodes_inspected.fetch_add(
          census.nodes_inspected, std::memory_order_relaxed);
      detail::record_backward_pass(
          census.device_class(), census.num_accelerators);
      emit(census.events() & pending);
      return;
    }
    const PassDeviceSummary summary = classify_backward_pass(
        root, task.nodes_in_graph_, pending, min_topo_nr);
    detail::nodes_inspected.fetch_add(
        summary.nodes_inspected, std::memory_order_relaxed);
    emit(summary.events() & pending);
  } catch (const c10::Error& e) {
    // Without the C++ backtrace that what() appends: one line is enough.
    detail::disable(
        std::string("classifying a backward pass failed: ") +
        e.what_without_backtrace());
  } catch (const std::exception& e) {
    detail::disable(
        std::string("classifying a backward pass failed: ") + e.what());
  } catch (...) {
    detail::disable("classifying a backward pass failed.");
  }
}

void set_classifier_fault_for_testing(
    ClassifierFaultForTesting fault) noexcept {
  classifier_fault_for_testing.store(fault, std::memory_order_relaxed);
}

} // namespace torch::autograd::device_logging
