#pragma once

// How the autograd device-logging patch takes the place of libtorch's
// Engine::compute_dependencies and Engine::ready_queue: the definitions it
// forwards to, found when the library is loaded, and the load-time checks that
// decide whether the classifier may run in this process (interposition.cpp),
// which library_load.cpp runs.

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace torch::autograd {
// Named only through pointers and references here; engine.h (which includes
// this header) declares them.
struct Engine;
struct GraphTask;
struct Node;
struct ReadyQueue;
} // namespace torch::autograd

namespace torch::autograd::device_logging {

// Signature of the member function Engine::compute_dependencies once `this`
// is passed explicitly (the Itanium C++ ABI passes it as the first argument).
using ComputeDependenciesFn =
    void (*)(Engine* engine, Node* root, GraphTask& task, uint64_t min_topo_nr);

// Engine::ready_queue, the protected member that picks the queue a ready node
// goes to. It returns a class by value, so it is called as a member function
// (Note [Finding libtorch's ready_queue], interposition.cpp).
using ReadyQueueFn = std::shared_ptr<ReadyQueue> (
    Engine::*)(std::shared_ptr<ReadyQueue> cpu_ready_queue, at::Device device);

namespace detail {

// libtorch's own Engine::compute_dependencies, the definition the patched one
// interposes on, resolved when the library is loaded (before any backward
// pass); nullptr only if it cannot be found.
extern ComputeDependenciesFn libtorch_compute_dependencies;

// libtorch's own Engine::ready_queue, likewise (Note [The calling thread from
// the root], calling_thread_policy.h).
extern ReadyQueueFn libtorch_ready_queue;

// "major.minor.patch" of the torch headers this library was compiled with.
const char* built_for_torch() noexcept;

// "major.minor.patch" of the libtorch running in this process, read once from
// its build options; empty if libtorch does not say.
const std::string& running_torch_version() noexcept;

// The path of this library's file as the dynamic linker loaded it.
const std::string& library_file() noexcept;

// Whether LD_PRELOAD named this library when it was loaded (it removes itself
// from LD_PRELOAD then, so the environment no longer says).
bool loaded_by_preload() noexcept;

// The load-time checks (Note [Which libtorch this library may inspect],
// interposition.cpp): caches the running torch's version, removes this
// library from LD_PRELOAD, finds libtorch's compute_dependencies and
// ready_queue, and
// disables the classifier, with one warning, where it must not run. Called
// once, by library_load.cpp.
void check_interposition_at_load() noexcept;

} // namespace detail
} // namespace torch::autograd::device_logging
