#pragma once

// The opt-in that runs single-device backward passes on the calling thread
// (Note [Single-device passes on the calling thread]).

namespace torch::autograd {
struct GraphTask;
} // namespace torch::autograd

namespace torch::autograd::device_logging {

// Note [Single-device passes on the calling thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch's PR #192004 keeps a backward pass on the thread that started it
// when its graph spans exactly one device, and leaves passes that span
// several (two accelerators, or an accelerator and CPU-routed nodes) to the
// device threads. With AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD=1, or
// set_calling_thread_backward(true), this library gives every release from
// 2.0 the same behaviour, through a seam libtorch already has and without
// re-implementing any of the engine:
//
// - Engine::execute builds the pass's GraphTask, which captures the calling
//   thread's thread-local state (thread_locals_, including the multithreading
//   mode that torch.autograd.set_multithreading_enabled sets), and then calls
//   compute_dependencies, which is ours.
// - After libtorch's walk, the pass is classified (it always is while the
//   opt-in is on: the state bit kStateCallingThread keeps it off the fast
//   path). A single_accelerator pass gets multithreading off in the GraphTask's
//   captured state, and nothing else changes: every worker that runs a node
//   of the pass installs that state first (ThreadLocalStateGuard), so
//   Engine::ready_queue sends each next node to the caller's CPU queue, which
//   the calling thread drains, as with set_multithreading_enabled(False) for
//   this pass alone. The caller's own setting is never written.
// - The one node already queued before compute_dependencies could decide is
//   the root, which Engine::execute_with_graph_task queues by the caller's
//   own setting: where the pass has one root edge and its gradient is on the
//   accelerator, that first node runs on the device thread, and every node
//   after it on the calling thread.
//
// What differs from a pass under set_multithreading_enabled(False): that
// first node, and `torch.autograd.is_multithreading_enabled()` read inside a
// hook of the pass says False (it reads the pass's state); gradients, errors
// and the caller's setting are those of stock torch. Passes of any other
// class are left exactly as they were. A release whose ThreadLocalState has
// no set_multithreading_enabled (none from 2.0 to 2.15 lacks it) refuses the
// opt-in with one line, and the events keep working.

// Whether this torch has the seam:
// ThreadLocalState::set_multithreading_enabled.
bool calling_thread_backward_supported() noexcept;

// Turns the opt-in on or off for every later pass of the process; false (and
// nothing changed) when this torch lacks the seam.
bool set_calling_thread_backward(bool enabled) noexcept;

bool calling_thread_backward() noexcept;

namespace detail {

// Reads AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD; called once at load.
void arm_calling_thread_from_environment() noexcept;

// Makes the pass of `task`, classified single_accelerator, run its nodes on
// the calling thread. Only the engine seam (engine.cpp) calls it.
void keep_pass_on_calling_thread(GraphTask& task) noexcept;

} // namespace detail

} // namespace torch::autograd::device_logging
