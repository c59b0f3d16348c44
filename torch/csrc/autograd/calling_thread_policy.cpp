// Single-device passes on the calling thread (Note [Single-device passes on
// the calling thread], calling_thread_policy.h).

#include <torch/csrc/autograd/calling_thread_policy.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/environment_flags.h>
#include <torch/csrc/autograd/graph_task.h>

#include <ATen/ThreadLocalState.h>

#include <type_traits>
#include <utility>

namespace torch::autograd::device_logging {

namespace {

// The seam, as a feature test rather than a version check: a release that
// renames or drops it refuses the opt-in instead of failing to build.
template <typename State, typename = void>
struct HasSetMultithreadingEnabled : std::false_type {};
template <typename State>
struct HasSetMultithreadingEnabled<
    State,
    std::void_t<decltype(std::declval<State&>().set_multithreading_enabled(
        false))>> : std::true_type {};

constexpr bool kHasSeam =
    HasSetMultithreadingEnabled<at::ThreadLocalState>::value;

// A template, so that a release without the seam never compiles the call.
template <typename State>
void turn_multithreading_off(State& thread_locals) {
  if constexpr (HasSetMultithreadingEnabled<State>::value) {
    thread_locals.set_multithreading_enabled(false);
  }
}

} // namespace

bool calling_thread_backward_supported() noexcept {
  return kHasSeam;
}

bool set_calling_thread_backward(bool enabled) noexcept {
  if (!enabled) {
    detail::state.fetch_and(
        ~detail::kStateCallingThread, std::memory_order_relaxed);
    return true;
  }
  if (!kHasSeam) {
    return false;
  }
  detail::state.fetch_or(
      detail::kStateCallingThread, std::memory_order_relaxed);
  return true;
}

bool calling_thread_backward() noexcept {
  return (detail::state.load(std::memory_order_relaxed) &
          detail::kStateCallingThread) != 0;
}

namespace detail {

void arm_calling_thread_from_environment() noexcept {
  if (env_flag("AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD", false) &&
      !set_calling_thread_backward(true)) {
    warn_to_stderr(
        "AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD=1 is ignored: this torch's "
        "at::ThreadLocalState has no set_multithreading_enabled, the seam the "
        "opt-in needs; backward passes keep the device threads, and the "
        "events are logged as before.");
  }
}

void keep_pass_on_calling_thread(GraphTask& task) noexcept {
  turn_multithreading_off(task.thread_locals_);
}

} // namespace detail

} // namespace torch::autograd::device_logging
