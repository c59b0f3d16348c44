#pragma once

// Opt-in per-pass statistics of the autograd device-logging patch: how many
// backward passes were CPU-only, on one accelerator, on an accelerator plus
// the CPU, or on several accelerators, and the most distinct accelerators one
// pass spanned. Off by default (the default path then pays one compare);
// AUTOGRAD_DEVICE_LOGGING_STATS=1 at load, or enable_backward_device_stats(),
// turns them on, and then a one-line summary is printed to stderr at exit.
// Counters are process-wide and thread-safe.

#include <torch/csrc/autograd/device_logging.h>

#include <cstdint>
#include <string>

namespace torch::autograd::device_logging {

struct BackwardDeviceStats {
  bool enabled = false;
  uint64_t cpu_only = 0;
  uint64_t single_accelerator = 0;
  uint64_t accelerator_cpu = 0;
  uint64_t multi_accelerator = 0;
  // Saturates at PassDeviceCensus::kMaxCountedAccelerators.
  int64_t max_accelerators_in_one_pass = 0;

  // The passes of one class, by its BackwardDeviceClass value.
  uint64_t of_class(int device_class) const {
    switch (device_class) {
      case 0:
        return cpu_only;
      case 1:
        return single_accelerator;
      case 2:
        return accelerator_cpu;
      case 3:
        return multi_accelerator;
      default:
        return 0;
    }
  }

  uint64_t passes() const {
    return cpu_only + single_accelerator + accelerator_cpu + multi_accelerator;
  }
};

AUTOGRAD_DEVICE_LOGGING_API void enable_backward_device_stats(
    bool enabled = true);
AUTOGRAD_DEVICE_LOGGING_API BackwardDeviceStats backward_device_stats();
AUTOGRAD_DEVICE_LOGGING_API void reset_backward_device_stats();
// The exit summary's text, e.g. "autograd device stats: 12 passes:
// cpu_only=..."
AUTOGRAD_DEVICE_LOGGING_API std::string format_backward_device_stats(
    const BackwardDeviceStats& stats);

} // namespace torch::autograd::device_logging
