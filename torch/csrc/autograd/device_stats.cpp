// The opt-in per-pass statistics of the autograd device-logging patch
// (device_stats.h): process-wide relaxed counters, exact under concurrent
// passes, and the summary line printed at exit while they are on.

#include <torch/csrc/autograd/device_stats.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/device_stats_recording.h>
#include <torch/csrc/autograd/settings.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace torch::autograd::device_logging {

namespace {

std::array<std::atomic<uint64_t>, kNumBackwardDeviceClasses> passes_by_class{};
std::atomic<int64_t> max_accelerators_in_one_pass{0};

void print_stats_at_exit() {
  const BackwardDeviceStats stats = backward_device_stats();
  if (stats.enabled) {
    std::fprintf(stderr, "%s\n", format_backward_device_stats(stats).c_str());
  }
}

} // namespace

namespace detail {

void record_backward_pass(
    BackwardDeviceClass device_class,
    int num_accelerators) noexcept {
  passes_by_class[static_cast<size_t>(device_class)].fetch_add(
      1, std::memory_order_relaxed);
  int64_t seen = max_accelerators_in_one_pass.load(std::memory_order_relaxed);
  while (num_accelerators > seen &&
         !max_accelerators_in_one_pass.compare_exchange_weak(
             seen, num_accelerators, std::memory_order_relaxed)) {
  }
}

void arm_statistics_from_settings() noexcept {
  if (settings().statistics) {
    try {
      enable_backward_device_stats(true);
    } catch (...) {
    }
  }
}

} // namespace detail

void enable_backward_device_stats(bool enabled) {
  if (enabled) {
    static const bool registered = (std::atexit(&print_stats_at_exit), true);
    (void)registered;
    detail::state.fetch_or(
        detail::kStateStatsEnabled, std::memory_order_relaxed);
  } else {
    detail::state.fetch_and(
        ~detail::kStateStatsEnabled, std::memory_order_relaxed);
  }
}

BackwardDeviceStats backward_device_stats() {
  BackwardDeviceStats stats;
  stats.enabled = detail::state.load(std::memory_order_relaxed) &
      detail::kStateStatsEnabled;
  const auto count = [](BackwardDeviceClass c) {
    return passes_by_class[static_cast<size_t>(c)].load(
        std::memory_order_relaxed);
  };
  stats.cpu_only = count(BackwardDeviceClass::kCpuOnly);
  stats.single_accelerator = count(BackwardDeviceClass::kSingleAccelerator);
  stats.accelerator_cpu = count(BackwardDeviceClass::kAcceleratorCpu);
  stats.multi_accelerator = count(BackwardDeviceClass::kMultiAccelerator);
  stats.max_accelerators_in_one_pass =
      max_accelerators_in_one_pass.load(std::memory_order_relaxed);
  return stats;
}

void reset_backward_device_stats() {
  for (auto& counter : passes_by_class) {
    counter.store(0, std::memory_order_relaxed);
  }
  max_accelerators_in_one_pass.store(0, std::memory_order_relaxed);
}

std::string format_backward_device_stats(const BackwardDeviceStats& stats) {
  std::string text =
      "autograd device stats: " + std::to_string(stats.passes()) +
      " backward passes:";
  for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
    text += std::string(" ") + kBackwardDeviceClassNames[i] + "=" +
        std::to_string(stats.of_class(i));
  }
  return text + " max_accelerators_in_one_pass=" +
      std::to_string(stats.max_accelerators_in_one_pass);
}

} // namespace torch::autograd::device_logging
