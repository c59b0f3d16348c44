// Single-device passes on the calling thread (Note [Single-device passes on
// the calling thread], calling_thread_policy.h).

#include <torch/csrc/autograd/calling_thread_policy.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/settings.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace torch::autograd::device_logging {

namespace {

// The seam, as a feature test rather than a version check: a release that
// renames or drops it refuses the opt-in instead of failing to build.
template <typename Task, typename = void>
struct HasId : std::false_type {};
template <typename Task>
struct HasId<Task, std::void_t<decltype(std::declval<const Task&>().id_)>>
    : std::true_type {};

constexpr bool kHasSeam = HasId<GraphTask>::value;

// get_current_graph_task_id()'s type; -1 when no pass is current.
using PassId = int;
constexpr PassId kNoPass = -1;

// A template, so that a release without the seam never compiles the read.
template <typename Task>
PassId id_of(const Task& task) {
  if constexpr (HasId<Task>::value) {
    return static_cast<PassId>(task.id_);
  } else {
    return kNoPass;
  }
}

PassId current_pass() {
  if constexpr (kHasSeam) {
    return static_cast<PassId>(get_current_graph_task_id());
  } else {
    return kNoPass;
  }
}

// What one thread knows of the passes it started (Note [The calling thread
// from the root]). Trivial, so the thread_local needs no guard or destructor.
struct PassesOfThisThread {
  static constexpr int kCapacity = 64;
  // The root about to be queued: its pass's CPU queue (nullptr: none), the
  // pass current around it, and whether it runs here.
  const ReadyQueue* root_queue;
  PassId root_parent;
  bool root_here;
  // The passes this thread started, innermost last.
  int depth;
  std::array<PassId, kCapacity> ids;
  std::array<bool, kCapacity> here;
};
static_assert(std::is_trivial_v<PassesOfThisThread>);

thread_local PassesOfThisThread passes_of_this_thread;

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

void arm_calling_thread_from_settings() noexcept {
  if (settings().calling_thread && !set_calling_thread_backward(true)) {
    warn_to_stderr(
        "AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD=1 is ignored: this torch's "
        "GraphTask has no id_, which the opt-in needs to tell passes apart; "
        "backward passes keep the device threads, and the events are logged "
        "as before.");
  }
}

void note_pass_starting(
    const GraphTask& task,
    bool on_calling_thread) noexcept {
  PassesOfThisThread& passes = passes_of_this_thread;
  const PassId parent = current_pass();
  // Every pass this thread started above the parent has ended.
  int depth = passes.depth;
  while (depth > 0 && passes.ids[depth - 1] != parent) {
    --depth;
  }
  if (depth > 0 || parent == kNoPass) {
    passes.depth = depth;
  }
  if (passes.depth == PassesOfThisThread::kCapacity) {
    std::move(passes.ids.begin() + 1, passes.ids.end(), passes.ids.begin());
    std::move(passes.here.begin() + 1, passes.here.end(), passes.here.begin());
    --passes.depth;
  }
  passes.ids[passes.depth] = id_of(task);
  passes.here[passes.depth] = on_calling_thread;
  ++passes.depth;
  passes.root_queue = task.cpu_ready_queue_.get();
  passes.root_parent = parent;
  passes.root_here = on_calling_thread;
}

bool queue_on_calling_thread(const ReadyQueue* cpu_ready_queue) noexcept {
  if (cpu_ready_queue == nullptr) {
    return false;
  }
  PassesOfThisThread& passes = passes_of_this_thread;
  const PassId current = current_pass();
  if (passes.root_queue != nullptr) {
    const bool is_the_root =
        passes.root_queue == cpu_ready_queue && passes.root_parent == current;
    passes.root_queue = nullptr;
    if (is_the_root) {
      return passes.root_here;
    }
  }
  for (int i = passes.depth - 1; i >= 0; --i) {
    if (passes.ids[i] == current) {
      return passes.here[i];
    }
  }
  return false;
}

} // namespace detail

} // namespace torch::autograd::device_logging
