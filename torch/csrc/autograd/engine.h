#pragma once

// The autograd device-logging patch's additions to the engine header. The
// engine itself is the installed libtorch's: this header pulls in the
// installed engine.h (next in the include path) and declares only what the
// patched Engine::compute_dependencies calls.
#include_next <torch/csrc/autograd/engine.h>

#include <torch/csrc/autograd/device_logging.h>

#include <atomic>
#include <cstdint>

namespace torch::autograd::device_logging {

// Signature of the member function Engine::compute_dependencies once `this`
// is passed explicitly (the Itanium C++ ABI passes it as the first argument).
using ComputeDependenciesFn =
    void (*)(Engine* engine, Node* root, GraphTask& task, uint64_t min_topo_nr);

namespace detail {
// libtorch's own Engine::compute_dependencies, the definition the patched one
// interposes on, resolved when the library is loaded (before any backward
// pass); nullptr only if it cannot be found.
extern ComputeDependenciesFn libtorch_compute_dependencies;

// Note [Device logging state] (device_logging.cpp). Once it reads
// kNothingLeftToLog, a pass has nothing to do after libtorch's walk.
extern std::atomic<uint8_t> state;
constexpr uint8_t kStateMultiDeviceDone = 1u << 0;
constexpr uint8_t kStateGpuCpuDone = 1u << 1;
constexpr uint8_t kStateStatsEnabled = 1u << 2;
constexpr uint8_t kStateDisabled = 1u << 3;
constexpr uint8_t kStateHookHasRun = 1u << 4;
constexpr uint8_t kNothingLeftToLog =
    kStateMultiDeviceDone | kStateGpuCpuDone | kStateHookHasRun;
} // namespace detail

// Classifies the pass whose dependencies were just computed and emits the
// API-usage events it decides. Never throws and never allocates per node.
void log_backward_devices(const Node* root, const GraphTask& task) noexcept;

} // namespace torch::autograd::device_logging
