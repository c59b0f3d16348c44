#pragma once

// What the per-pass logging feeds into the opt-in statistics
// (device_stats.cpp). Internal to the library: the public API is
// device_stats.h.

#include <torch/csrc/autograd/backward_device_class.h>

namespace torch::autograd::device_logging::detail {

// Counts one pass of `device_class` that spanned `num_accelerators` distinct
// accelerator devices. Called only while the statistics are on.
void record_backward_pass(
    BackwardDeviceClass device_class,
    int num_accelerators) noexcept;

// Turns the statistics on where AUTOGRAD_DEVICE_LOGGING_STATS (or its old
// name, PYTORCH_AUTOGRAD_DEVICE_STATS) says so; called once, at load.
void arm_statistics_from_settings() noexcept;

} // namespace torch::autograd::device_logging::detail
