// The per-pass work of the autograd device-logging patch: decide whether a
// pass needs inspecting at all, classify it (backward_device_classifier.h),
// emit each event once, feed the opt-in statistics, and disable the library
// if classifying ever fails.

#include <torch/csrc/autograd/pass_logging.h>

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/calling_thread_policy.h>
#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/device_stats_recording.h>
#include <torch/csrc/autograd/pass_census.h>
#include <torch/csrc/autograd/process_record.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/macros/Macros.h>
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
// (CUDA's count is cached by c10), i.e. O(1) per pass. A "no" is not kept
// across passes, because a backend may register itself later (a Python
// import or dlopen of an out-of-tree device). A "yes" is kept, as
// kStateAcceleratorSeen: device guard implementations are never unregistered
// and device counts do not shrink in a running process, so once a pass could
// run on an accelerator every later one can, and the scan (about 270
// instructions) leaves the per-pass cost of every pass after the first.
bool process_has_accelerator_devices() noexcept {
  for (size_t i = 0; i < kNumDeviceTypeSlots; ++i) {
    if (accelerator_device_count(static_cast<c10::DeviceType>(i)) > 0) {
      return true;
    }
  }
  return false;
}

// Emits the events in `decided` that no pass has emitted yet. The fetch_or on
// the state word makes each event this library's exactly once per process,
// whatever C10_LOG_API_USAGE_ONCE does with repeated calls. Where torch logs
// the events itself, they are only marked raised (Note [Where torch logs the
// events itself]).
void emit(uint8_t decided) {
  const uint8_t newly = static_cast<uint8_t>(
      decided & ~state.fetch_or(decided, std::memory_order_relaxed));
  if (newly == kNoBackwardDeviceEvent) {
    return;
  }
  detail::events_raised.fetch_or(newly, std::memory_order_relaxed);
  if constexpr (!detail::kTorchLogsTheEvents) {
    if (newly & kMultiDeviceBackward) {
      C10_LOG_API_USAGE_ONCE(kMultiDeviceBackwardEventName);
    }
    if (newly & kGpuCpuBackward) {
      C10_LOG_API_USAGE_ONCE(kGpuCpuBackwardEventName);
    }
  }
  detail::record_event_raised();
}

void disable_after(const char* what) noexcept {
  detail::disable(std::string("classifying a backward pass failed") + what);
}

// Runs `fn`; any exception it throws disables the library instead of
// reaching the engine.
template <typename Fn>
void or_disable(const Fn& fn) noexcept {
  try {
    fn();
  } catch (const c10::Error& e) {
    // Without the C++ backtrace that what() appends: one line is enough.
    disable_after((std::string(": ") + e.what_without_backtrace()).c_str());
  } catch (const std::exception& e) {
    disable_after((std::string(": ") + e.what()).c_str());
  } catch (...) {
    disable_after(".");
  }
}

// Emits the events in `decided`, out of the per-pass path: it runs about
// once per event per process.
C10_NOINLINE void emit_or_disable(uint8_t decided) noexcept {
  or_disable([decided] { emit(decided); });
}

// Counts the nodes a classified pass read and emits the events of `pending`
// it decided. The classifier cannot throw (it is noexcept), so only emitting
// is guarded.
C10_ALWAYS_INLINE void count_and_emit(
    const PassDeviceSummary& summary,
    uint8_t pending) noexcept {
  detail::nodes_inspected.fetch_add(
      summary.nodes_inspected, std::memory_order_relaxed);
  const uint8_t decided = summary.events() & pending;
  if (decided != kNoBackwardDeviceEvent) {
    emit_or_disable(decided);
  }
}

// A pass off the fast path in a process with an accelerator: with `stats`,
// reads the whole pass for the statistics as well; runs a test's injected
// fault first. Never throws: any failure disables the library.
void classify_off_the_fast_path(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr,
    uint8_t pending,
    bool stats,
    bool fault_injected) noexcept {
  detail::passes_classified.fetch_add(1, std::memory_order_relaxed);
  or_disable([&] {
    if (C10_UNLIKELY(fault_injected)) {
      if (const ClassifierFaultForTesting fault =
              classifier_fault_for_testing.load(std::memory_order_relaxed)) {
        fault();
      }
    }
    if (!stats) {
      count_and_emit(
          classify_backward_pass(
              root, task.nodes_in_graph_, pending, min_topo_nr),
          pending);
      return;
    }
    const PassDeviceCensus census =
        census_backward_pass(root, task.nodes_in_graph_, min_topo_nr);
    detail::nodes_inspected.fetch_add(
        census.nodes_inspected, std::memory_order_relaxed);
    detail::record_backward_pass(
        census.device_class(), census.num_accelerators);
    const uint8_t decided = census.events() & pending;
    if (decided != kNoBackwardDeviceEvent) {
      emit(decided);
    }
  });
}

// Reads the whole pass (its census), after a test's injected fault where one
// is installed; feeds the statistics where they are on and emits the events
// it decides that no pass raised yet. May throw: its callers disable the
// library instead.
PassDeviceCensus take_census_and_feed(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr,
    detail::StateWord current) {
  if (C10_UNLIKELY(current & detail::kStateFaultForTesting)) {
    if (const ClassifierFaultForTesting fault =
            classifier_fault_for_testing.load(std::memory_order_relaxed)) {
      fault();
    }
  }
  const PassDeviceCensus census =
      census_backward_pass(root, task.nodes_in_graph_, min_topo_nr);
  detail::nodes_inspected.fetch_add(
      census.nodes_inspected, std::memory_order_relaxed);
  if (current & detail::kStateStatsEnabled) {
    detail::record_backward_pass(
        census.device_class(), census.num_accelerators);
  }
  const uint8_t decided = static_cast<uint8_t>(
      census.events() & kAllBackwardDeviceEvents & ~current);
  if (decided != kNoBackwardDeviceEvent) {
    emit(decided);
  }
  return census;
}

// A pass whose thread asked for its census (Note [A census on request]):
// the whole pass is read, whatever the once-per-process state says, and the
// census kept for the thread; the events and statistics are fed as on any
// other pass. Never throws: any failure disables the library.
C10_NOINLINE void take_requested_census(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr,
    detail::StateWord current) noexcept {
  detail::passes_classified.fetch_add(1, std::memory_order_relaxed);
  or_disable([&] {
    detail::keep_census_on_this_thread(
        take_census_and_feed(root, task, min_topo_nr, current));
  });
}

// A pass while single-device passes run on the calling thread, in a process
// with an accelerator: the whole pass is read, since its class decides where
// it runs; events and statistics are fed as on any other pass. True when it
// is single_accelerator. Never throws: any failure disables the library, and
// the pass keeps the device threads.
C10_NOINLINE bool classify_for_calling_thread(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr,
    detail::StateWord current) noexcept {
  detail::passes_classified.fetch_add(1, std::memory_order_relaxed);
  bool single_accelerator = false;
  or_disable([&] {
    single_accelerator =
        take_census_and_feed(root, task, min_topo_nr, current).device_class() ==
        BackwardDeviceClass::kSingleAccelerator;
  });
  return single_accelerator;
}

// Every pass that is not the common one (Note [The per-pass fast path]): the
// first pass, passes with statistics on, passes of a disabled library,
// passes of a process where no accelerator was seen yet, passes under a
// test's injected fault, passes while some thread requested a census, and
// passes while single-device passes run on the calling thread.
bool classify_off_the_common_path(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr,
    detail::StateWord current) noexcept {
  if (!(current & detail::kStateActive)) {
    const detail::StateWord before =
        state.fetch_or(detail::kStateActive, std::memory_order_relaxed);
    current = before | detail::kStateActive;
    if (!(before & detail::kStateActive)) {
      // The process's first backward pass (Note [The per-process record]).
      detail::record_first_backward_pass();
    }
  }
  if (C10_UNLIKELY(current & detail::kStateCensusRequested) &&
      !(current & detail::kStateDisabled) &&
      detail::census_requested_on_this_thread()) {
    take_requested_census(root, task, min_topo_nr, current);
    return false;
  }
  if (C10_UNLIKELY(current & detail::kStateCallingThread) &&
      !(current & detail::kStateDisabled) &&
      ((current & detail::kStateAcceleratorSeen) ||
       process_has_accelerator_devices())) {
    current |= state.fetch_or(
        detail::kStateAcceleratorSeen, std::memory_order_relaxed);
    return classify_for_calling_thread(root, task, min_topo_nr, current);
  }
  const bool stats = current & detail::kStateStatsEnabled;
  if (((current & kAllBackwardDeviceEvents) == kAllBackwardDeviceEvents &&
       !stats) ||
      (current & detail::kStateDisabled)) {
    return false;
  }
  if (!(current & detail::kStateAcceleratorSeen)) {
    if (!process_has_accelerator_devices()) {
      if (stats) {
        detail::passes_classified.fetch_add(1, std::memory_order_relaxed);
        detail::record_backward_pass(BackwardDeviceClass::kCpuOnly, 0);
      }
      return false;
    }
    current = state.fetch_or(
                  detail::kStateAcceleratorSeen, std::memory_order_relaxed) |
        detail::kStateAcceleratorSeen;
  }
  classify_off_the_fast_path(
      root,
      task,
      min_topo_nr,
      static_cast<uint8_t>(kAllBackwardDeviceEvents & ~current),
      stats,
      current & detail::kStateFaultForTesting);
  return false;
}

// The slow path; while the calling-thread opt-in is on (then every pass takes
// it), the pass is noted before its root is queued, with where its nodes run
// (Note [The calling thread from the root], calling_thread_policy.h). Kept off
// the common path, so that the opt-in costs that path nothing.
C10_NOINLINE void log_backward_devices_slow(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr,
    detail::StateWord current) noexcept {
  const bool on_calling_thread =
      classify_off_the_common_path(root, task, min_topo_nr, current);
  if (state.load(std::memory_order_relaxed) & detail::kStateCallingThread) {
    detail::note_pass_starting(task, on_calling_thread);
  }
}

using NodeSet = decltype(GraphTask::nodes_in_graph_);

// The rest of a fast-path pass whose settled prefix ended at `stop`, out of
// line (Note [A pass that stays on its root's device]): classifies it and
// emits the events of `pending` it decides.
template <bool kSkipBelowMinTopoNr>
C10_NOINLINE void classify_after_prefix_and_emit(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr,
    uint8_t pending,
    NodeSet::const_iterator stop,
    uint64_t skipped) noexcept {
  count_and_emit(
      detail::classify_after_prefix<kSkipBelowMinTopoNr>(
          root, task.nodes_in_graph_, stop, skipped, pending, min_topo_nr),
      pending);
}

// A fast-path pass: one whose settled prefix is the whole pass is done here,
// with a frameless loop; any other hands over where the prefix stopped.
template <bool kSkipBelowMinTopoNr>
C10_ALWAYS_INLINE void classify_on_the_fast_path(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr,
    uint8_t pending) noexcept {
  const NodeSet& nodes = task.nodes_in_graph_;
  const auto prefix = detail::read_settled_prefix<kSkipBelowMinTopoNr>(
      root, nodes, pending, min_topo_nr);
  if (C10_UNLIKELY(!prefix.whole_pass)) {
    classify_after_prefix_and_emit<kSkipBelowMinTopoNr>(
        root, task, min_topo_nr, pending, prefix.stop, prefix.skipped);
    return;
  }
  // The root alone decides no event, and nothing after it changed the
  // summary.
  detail::nodes_inspected.fetch_add(
      detail::nodes_in_pass(root, nodes, prefix.skipped),
      std::memory_order_relaxed);
}

} // namespace

// Note [The per-pass fast path]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// In a process with an accelerator and the statistics off, every pass until
// both events fired takes the same way: one load of the state word, one
// compare under a mask, and the classifier. Everything else (marking that
// the hook ran, the accelerator scan, the statistics, a disabled library, a
// test's injected fault, a requested census) sits behind that one compare in a
// function of its own, and a pass that leaves its root's device continues in
// another (Note [A pass that stays on its root's device]). Every call this
// function makes is a tail call, so the common pass (one device) runs with no
// stack frame at all; this is what keeps a 10-node pass under upstream's own
// per-pass cost.
void log_backward_devices(
    const Node* root,
    const GraphTask& task,
    uint64_t min_topo_nr) noexcept {
  // Every bit but the events' (Note [Device logging state]): a bit added
  // later sends passes to the slow path with no change here.
  constexpr detail::StateWord kFastPathMask = ~detail::kStateAllEventsDone;
  constexpr detail::StateWord kFastPath =
      detail::kStateActive | detail::kStateAcceleratorSeen;
  const detail::StateWord current = state.load(std::memory_order_relaxed);
  if ((current & kFastPathMask) != kFastPath) {
    log_backward_devices_slow(root, task, min_topo_nr, current);
    return;
  }
  detail::passes_classified.fetch_add(1, std::memory_order_relaxed);
  const uint8_t pending =
      static_cast<uint8_t>(kAllBackwardDeviceEvents & ~current);
  if (min_topo_nr == 0) {
    classify_on_the_fast_path<false>(root, task, 0, pending);
  } else {
    classify_on_the_fast_path<true>(root, task, min_topo_nr, pending);
  }
}

void set_classifier_fault_for_testing(
    ClassifierFaultForTesting fault) noexcept {
  classifier_fault_for_testing.store(fault, std::memory_order_relaxed);
  if (fault != nullptr) {
    state.fetch_or(detail::kStateFaultForTesting, std::memory_order_relaxed);
  } else {
    state.fetch_and(~detail::kStateFaultForTesting, std::memory_order_relaxed);
  }
}

} // namespace torch::autograd::device_logging
