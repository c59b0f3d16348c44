// The calling thread's multithreading mode (multithreading_mode.h).

#include <torch/csrc/autograd/multithreading_mode.h>

#include <c10/core/AutogradState.h>

namespace torch::autograd::device_logging {

bool multithreading_enabled() noexcept {
  return c10::AutogradState::get_tls_state().get_multithreading_enabled();
}

bool set_multithreading_enabled(bool enabled) noexcept {
  c10::AutogradState& autograd_state = c10::AutogradState::get_tls_state();
  const bool previous = autograd_state.get_multithreading_enabled();
  autograd_state.set_multithreading_enabled(enabled);
  return previous;
}

} // namespace torch::autograd::device_logging
