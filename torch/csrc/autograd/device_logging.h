#pragma once

// Introspection API of the autograd device-logging patch: whether the patched
// Engine::compute_dependencies is the one libtorch runs, what it has logged,
// and why it is disabled if it is. The C ABI that Python's ctypes calls is
// private to the library (device_logging_c_api.h).

#include <cstddef>
#include <cstdint>
#include <string>

// The library is built with hidden visibility; this marks its public API.
#define AUTOGRAD_DEVICE_LOGGING_API __attribute__((visibility("default")))

namespace torch::autograd::device_logging {

struct DeviceLoggingStatus {
  // The patched compute_dependencies has run at least once in this process,
  // i.e. libtorch's Engine::execute is bound to it.
  bool active = false;
  // BackwardDeviceEvent bits this process's passes raised: the library
  // logged them, or torch did where it logs the events itself.
  uint8_t events_raised = 0;
  // Nodes whose metadata the classifier has read, summed over all passes.
  uint64_t nodes_inspected = 0;
  // Empty while the classifier is enabled.
  std::string disabled_reason;
  // "major.minor.patch" of the torch headers the library was compiled with.
  std::string built_for_torch;
  // "major.minor.patch" of the libtorch running in this process, or empty if
  // libtorch does not say.
  std::string running_torch;
  // Built against a torch that emits both events itself (2.14 and later):
  // this library then classifies as on earlier releases but logs nothing;
  // events_raised says which events this process's passes raised.
  bool torch_logs_events = false;
};

AUTOGRAD_DEVICE_LOGGING_API DeviceLoggingStatus device_logging_status();

// Test seam. While set, `fault` is called inside the classifier's error guard
// just before each pass is classified, so a test can make classification fail
// (throw anything) and check that the library disables itself with one
// warning and leaves the backward pass alone. nullptr removes it. Costs one
// relaxed load per classified pass; not meant for production code.
using ClassifierFaultForTesting = void (*)();
AUTOGRAD_DEVICE_LOGGING_API void set_classifier_fault_for_testing(
    ClassifierFaultForTesting fault) noexcept;

// Test seam. Puts the once-per-process logic back to a process in which
// exactly the events in `events_already_raised` (BackwardDeviceEvent bits)
// have been raised, so that one process can run the hook on many graphs with
// fresh, or partly fired, state. C10_LOG_API_USAGE_ONCE still logs each event
// only once per process, so such tests read events_raised. Does nothing once
// the library is disabled. Not meant for production code.
AUTOGRAD_DEVICE_LOGGING_API void reset_raised_events_for_testing(
    uint8_t events_already_raised) noexcept;

} // namespace torch::autograd::device_logging
