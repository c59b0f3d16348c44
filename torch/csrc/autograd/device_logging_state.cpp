// The process-wide state of the autograd device-logging patch (the state
// word, the raised events, the first disabled reason) and its one warning
// style.

#include <torch/csrc/autograd/device_logging_state.h>

#include <unistd.h>

namespace torch::autograd::device_logging {

namespace detail {

std::atomic<StateWord> state{0};
std::atomic<uint8_t> events_raised{0};
std::atomic<uint64_t> nodes_inspected{0};
std::atomic<uint64_t> passes_classified{0};

namespace {
// Set once, before disable() marks the state disabled; never freed.
std::atomic<const std::string*> first_disabled_reason{nullptr};
} // namespace

// Each caller runs at most once per process (the load-time checks, and
// disable(), which only the first reason gets through), so every distinct
// message is printed once; a once-per-call-site warning would print only the
// first of them, since they would share its one call site.
void warn_to_stderr(const std::string& message) noexcept {
  try {
    const std::string line =
        (message.rfind(kWarningPrefix, 0) == 0 ? message
                                               : kWarningPrefix + message) +
        "\n";
    // One write(2) per line, so that lines of concurrent writers never mix.
    [[maybe_unused]] const ssize_t written =
        ::write(STDERR_FILENO, line.data(), line.size());
  } catch (...) {
  }
}

void disable(const std::string& reason) noexcept {
  constexpr StateWord kDisabledBits = kStateAllEventsDone | kStateDisabled;
  try {
    const std::string* owned = new std::string(reason);
    const std::string* expected = nullptr;
    if (!first_disabled_reason.compare_exchange_strong(expected, owned)) {
      delete owned;
      return;
    }
    state.fetch_or(kDisabledBits, std::memory_order_release);
    warn_to_stderr(
        "disabled: " + reason +
        " Backward passes are unaffected; only the device logging is off.");
  } catch (...) {
    state.fetch_or(kDisabledBits, std::memory_order_release);
  }
}

const std::string* disabled_reason() noexcept {
  return first_disabled_reason.load(std::memory_order_acquire);
}

} // namespace detail

void reset_raised_events_for_testing(uint8_t events_already_raised) noexcept {
  const detail::StateWord done =
      events_already_raised & detail::kStateAllEventsDone;
  detail::StateWord current = detail::state.load(std::memory_order_relaxed);
  detail::StateWord next = 0;
  do {
    if (current & detail::kStateDisabled) {
      return;
    }
    next = (current & ~detail::kStateAllEventsDone) | done;
  } while (!detail::state.compare_exchange_weak(
      current, next, std::memory_order_relaxed));
  detail::events_raised.store(
      static_cast<uint8_t>(done), std::memory_order_relaxed);
}

} // namespace torch::autograd::device_logging
