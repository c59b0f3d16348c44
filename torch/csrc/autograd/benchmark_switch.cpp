// The benchmark-only switch of the autograd device-logging patch
// (benchmark_switch.h), and its C ABI for benchmarks driven from Python.
// Compiled only into benchmark builds.
//
// Note [Timing both in one process]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The wall-clock cost of classifying is a few microseconds per backward on a
// graph of hundreds of nodes, well below the spread between two processes
// running the same model on a GPU (allocator state, clocks, where the
// caching allocator put things). Timing it therefore needs one process that
// runs the same model with and without classification, alternating pass by
// pass, so that both see the same state. A released library must not carry a
// switch that turns the logging off, so only builds with
// AUTOGRAD_DEVICE_LOGGING_BENCHMARK_SWITCH have it.

#include <torch/csrc/autograd/benchmark_switch.h>

namespace torch::autograd::device_logging::detail {

std::atomic<bool> classifying_for_benchmark{true};

} // namespace torch::autograd::device_logging::detail

extern "C" {

void autograd_device_logging_set_classifying_for_benchmark(int classifying) {
  torch::autograd::device_logging::detail::classifying_for_benchmark.store(
      classifying != 0, std::memory_order_relaxed);
}

} // extern "C"
