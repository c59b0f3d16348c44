// The status API (device_logging.h): the state word and what the
// interposition found at load.

#include <torch/csrc/autograd/device_logging.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/interposition.h>

namespace torch::autograd::device_logging {

DeviceLoggingStatus device_logging_status() {
  DeviceLoggingStatus status;
  status.active =
      detail::state.load(std::memory_order_relaxed) & detail::kStateActive;
  status.events_raised = detail::events_raised.load(std::memory_order_relaxed);
  status.nodes_inspected =
      detail::nodes_inspected.load(std::memory_order_relaxed);
  if (const std::string* reason = detail::disabled_reason()) {
    status.disabled_reason = *reason;
  }
  status.built_for_torch = detail::built_for_torch();
  status.running_torch = detail::running_torch_version();
  status.torch_logs_events = detail::kTorchLogsTheEvents;
  return status;
}

} // namespace torch::autograd::device_logging
