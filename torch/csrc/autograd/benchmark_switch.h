#pragma once

// A switch that exists only in benchmark builds of the autograd
// device-logging patch (CMake option AUTOGRAD_DEVICE_LOGGING_BENCHMARK_SWITCH):
// it makes the patched compute_dependencies forward to libtorch's without
// classifying, so that one process can time classified and unclassified
// passes of the same model, interleaved (Note [Timing both in one process]).

#ifdef AUTOGRAD_DEVICE_LOGGING_BENCHMARK_SWITCH

#include <torch/csrc/autograd/device_logging.h>

#include <atomic>

namespace torch::autograd::device_logging::detail {

// Whether passes are classified; true unless a benchmark turned it off.
extern std::atomic<bool> classifying_for_benchmark;

} // namespace torch::autograd::device_logging::detail

extern "C" {
// 0: forward to libtorch without classifying; anything else: classify.
AUTOGRAD_DEVICE_LOGGING_API void
autograd_device_logging_set_classifying_for_benchmark(int classifying);
}

#endif // AUTOGRAD_DEVICE_LOGGING_BENCHMARK_SWITCH
