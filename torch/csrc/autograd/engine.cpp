// The autograd device-logging patch's seam in the engine: a drop-in
// Engine::compute_dependencies that leaves the dependency computation to the
// installed libtorch and then classifies the pass by the devices it spans,
// and a drop-in Engine::ready_queue that leaves the choice of queue to
// libtorch except for the passes the calling-thread opt-in keeps on their
// caller (Note [The calling thread from the root], calling_thread_policy.h).
//
// Note [Replacing compute_dependencies by interposition]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Engine::execute, in libtorch_cpu, calls Engine::compute_dependencies through
// its PLT, so the dynamic linker binds the call to the first definition in
// lookup order. A library defining the same symbol that comes before
// libtorch_cpu in that order (linked ahead of torch, LD_PRELOADed, or dlopened
// with RTLD_GLOBAL before libtorch binds the call) therefore replaces it for
// every backward pass in the process, with no rebuild of libtorch. The
// replacement does not re-implement the walk: it calls libtorch's own
// definition, so dependencies_, nodes_in_graph_, stream stashing and whatever
// a release adds stay exactly the installed version's, and then reads what the
// walk built. Engine::ready_queue is called the same way (through the PLT,
// from Engine::execute_with_graph_task for the root and from
// Engine::evaluate_function for every later node) and is replaced the same
// way.

#include <torch/csrc/autograd/engine.h>

#include <torch/csrc/autograd/benchmark_switch.h>
#include <torch/csrc/autograd/calling_thread_policy.h>
#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/interposition.h>
#include <torch/csrc/autograd/pass_logging.h>
#include <torch/version.h>

#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace torch::autograd {

void Engine::compute_dependencies(
    Node* root,
    GraphTask& task,
    uint64_t min_topo_nr) {
  // The libtorch definition is found by its mangled name (interposition.cpp);
  // this pins the signature that name encodes.
  static_assert(
      std::is_same_v<
          decltype(&Engine::compute_dependencies),
          void (Engine::*)(Node*, GraphTask&, uint64_t)>,
      "Engine::compute_dependencies changed its signature");
  static_assert(std::is_same_v<uint64_t, unsigned long>);

  namespace detail = device_logging::detail;
  const device_logging::ComputeDependenciesFn libtorch_fn =
      detail::libtorch_compute_dependencies;
  // Note [When libtorch's compute_dependencies cannot be found]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // The load-time check then disables the library with one warning naming
  // the cause (status says why). A definition that is already bound cannot
  // be un-bound, and loading the library into a local scope would not help:
  // libtorch_cpu, loaded as its dependency, is relocated within that same
  // scope, where this definition comes first. In a real process the case
  // cannot arise, since libtorch calls this definition by the very name the
  // lookup searches for, and a library that links libtorch_cpu finds it
  // through its handle; only a test build that searches for another name
  // gets here. If it ever did, no dependency walk could run at all, and a
  // clear error beats running the backward with no dependencies.
  TORCH_CHECK(
      libtorch_fn != nullptr,
      "autograd_device_logging: libtorch's Engine::compute_dependencies "
      "could not be found; remove the library from this process.");
  libtorch_fn(this, root, task, min_topo_nr);
#ifdef AUTOGRAD_DEVICE_LOGGING_BENCHMARK_SWITCH
  if (!detail::classifying_for_benchmark.load(std::memory_order_relaxed)) {
    return;
  }
#endif
  // Once both events fired (and statistics are off), this load and compare
  // are all a pass costs; see Note [Device logging state]. The rest is out of
  // line, so nothing is kept across libtorch's walk but what the call takes
  // (docs/performance.md: "after both events fired"). With the calling-thread
  // opt-in on, the pass's class decides where its nodes run (Note
  // [Single-device passes on the calling thread]).
  if (C10_UNLIKELY(
          detail::state.load(std::memory_order_relaxed) !=
          detail::kNothingLeftToLog)) {
    device_logging::log_backward_devices(root, task, min_topo_nr);
  }
}

auto Engine::ready_queue(
    std::shared_ptr<ReadyQueue> cpu_ready_queue,
    at::Device device) -> std::shared_ptr<ReadyQueue> {
  // interposition.cpp finds libtorch's definition by the name this type
  // mangles to.
  static_assert(
      std::is_same_v<
          decltype(&Engine::ready_queue),
          device_logging::ReadyQueueFn>,
      "Engine::ready_queue changed its signature");

  namespace detail = device_logging::detail;
  if (C10_UNLIKELY(
          detail::state.load(std::memory_order_relaxed) &
          detail::kStateCallingThread) &&
      detail::queue_on_calling_thread(cpu_ready_queue.get())) {
    return cpu_ready_queue;
  }
  const device_logging::ReadyQueueFn libtorch_fn = detail::libtorch_ready_queue;
  // As for compute_dependencies (Note [When libtorch's compute_dependencies
  // cannot be found]): without libtorch's definition no node could be queued.
  TORCH_CHECK(
      libtorch_fn != nullptr,
      "autograd_device_logging: libtorch's Engine::ready_queue could not be "
      "found; remove the library from this process.");
  return (this->*libtorch_fn)(std::move(cpu_ready_queue), device);
}

} // namespace torch::autograd
