#pragma once

// The autograd device-logging patch's additions to the engine header. The
// engine itself is the installed libtorch's: this header pulls in the
// installed engine.h (next in the include path) and declares only what the
// patched Engine::compute_dependencies calls.
#include_next <torch/csrc/autograd/engine.h>

#include <torch/csrc/autograd/device_logging.h>

#include <cstdint>

namespace torch::autograd::device_logging {

// Signature of the member function Engine::compute_dependencies once `this`
// is passed explicitly (the Itanium C++ ABI passes it as the first argument).
using ComputeDependenciesFn =
    void (*)(Engine* engine, Node* root, GraphTask& task, uint64_t min_topo_nr);

// libtorch's own Engine::compute_dependencies, the definition the patched one
// interposes on; nullptr only if it cannot be found.
ComputeDependenciesFn libtorch_compute_dependencies() noexcept;

// Classifies the pass whose dependencies were just computed and emits the
// API-usage events it decides. Never throws and never allocates per node.
void log_backward_devices(const Node* root, const GraphTask& task) noexcept;

} // namespace torch::autograd::device_logging
