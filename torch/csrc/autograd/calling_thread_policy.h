#pragma once

// The opt-in that runs single-device backward passes on the calling thread
// (Note [Single-device passes on the calling thread]).

namespace torch::autograd {
struct GraphTask;
struct ReadyQueue;
} // namespace torch::autograd

namespace torch::autograd::device_logging {

// Note [Single-device passes on the calling thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's PR #192004 keeps a backward pass on the thread that started it
// when its graph spans exactly one device, and leaves passes that span
// several (two accelerators, or an accelerator and CPU-routed nodes) to the
// device threads. With AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD=1, or
// set_calling_thread_backward(true), this library gives every release from
// 2.0 the same behaviour, without re-implementing any of the engine: every
// node of a single_accelerator pass, its root included, is queued on the
// calling thread's CPU ready queue, which that thread drains itself, as
// under torch.autograd.set_multithreading_enabled(False) for this pass
// alone; the caller never waits on a device thread during it (Note [The
// calling thread from the root]).
//
// Nothing else about the pass changes: gradients, errors, hooks, streams and
// the thread-local state every node runs with are stock torch's. In
// particular the caller's multithreading setting is never written, and
// torch.autograd.is_multithreading_enabled() reads the same before, during
// (from a hook of the pass) and after it. Passes of any other class are left
// exactly as they were. A release whose GraphTask has no id_ (none from 2.0
// to 2.15 lacks it) refuses the opt-in with one line, and the events keep
// working.

// Note [The calling thread from the root]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where a node runs is decided by Engine::ready_queue(cpu_ready_queue,
// device) when the node is queued: libtorch returns the pass's CPU queue
// (the calling thread's) for CPU-routed devices or when the reading thread's
// multithreading mode is off, and the device's queue otherwise. The library
// replaces ready_queue as it replaces compute_dependencies (engine.cpp) and
// answers "the CPU queue" itself for the nodes of a calling-thread pass,
// forwarding every other call to libtorch's definition unchanged. Each thread
// keeps, without locks or allocation:
//
// - the root about to be queued: compute_dependencies runs on the calling
//   thread right before Engine::execute_with_graph_task queues the root, so
//   it leaves {the pass's CPU queue, the pass running on this thread around
//   it (get_current_graph_task_id()), whether the pass runs here}, and the
//   next ready_queue call on this thread takes it. The root is queued while
//   the parent pass (or none) is current, which is why it cannot be looked
//   up like the later nodes;
// - the passes this thread started, by GraphTask::id_ (unique in the
//   process), innermost last: the later nodes are queued from inside the
//   running node, while GraphTaskGuard makes their pass current, so
//   ready_queue looks the current pass up. Passes a thread starts nest
//   (a backward inside a hook finishes before the hook returns), so when a
//   pass starts, every entry above its parent's has ended and is dropped;
//   a pass started with no parent drops them all. A device thread can start
//   passes under nodes of passes other threads started; its entries are
//   then kept (64 at most, the oldest dropped first), and ids are never
//   reused, so an entry that outlived its pass never matches. (Early 2.x
//   headers number GraphTasks per translation unit: distributed autograd's
//   own GraphTasks may then share a number with a pass here, and one of its
//   nodes queued on this thread would run here too: where, never what.)
//
// An earlier version turned multithreading off in the GraphTask's captured
// thread-local state instead. That left the root, queued by the caller's own
// mode, on the device thread (the caller slept once per pass waiting for
// it), and made is_multithreading_enabled() read False inside the pass's
// hooks.
//
// Compiled autograd computes dependencies and then runs the graph itself
// without queueing the root; the root left behind is dropped by the next
// queueing on that thread, and at worst, when compiled autograd ran inside a
// hook of another pass on the calling thread, one node of that other pass
// runs on the calling thread too (where, never what).

// Whether this torch has what the opt-in needs: GraphTask::id_ (with
// get_current_graph_task_id(), which came with it).
bool calling_thread_backward_supported() noexcept;

// Turns the opt-in on or off for every later pass of the process; false (and
// nothing changed) when this torch lacks the seam.
bool set_calling_thread_backward(bool enabled) noexcept;

bool calling_thread_backward() noexcept;

namespace detail {

// Reads AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD; called once at load.
void arm_calling_thread_from_settings() noexcept;

// The pass of `task`, whose dependencies were just computed on this thread,
// is about to queue its root; `on_calling_thread` says whether its nodes run
// on this thread. Only the engine seam calls it, and only while the opt-in
// is on.
void note_pass_starting(const GraphTask& task, bool on_calling_thread) noexcept;

// Whether the node being queued on this thread, for a pass whose CPU queue
// is `cpu_ready_queue`, goes to that queue because its pass runs on the
// calling thread. Only the engine seam's ready_queue calls it.
bool queue_on_calling_thread(const ReadyQueue* cpu_ready_queue) noexcept;

} // namespace detail

} // namespace torch::autograd::device_logging
