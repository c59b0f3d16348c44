#pragma once

// The calling thread's multithreading mode for backward passes
// (c10::AutogradState, what torch.autograd.set_multithreading_enabled sets),
// read and set on every release: the Python getter arrived only in 2.1. The
// engine reads the mode when a pass starts and its GraphTask keeps it for the
// whole pass; the threading-cost measurement
// (python/autograd_device_logging/threading_measurement.py) sets it around a
// sampled pass.

namespace torch::autograd::device_logging {

bool multithreading_enabled() noexcept;

// Sets the calling thread's mode; returns the mode it replaced.
bool set_multithreading_enabled(bool enabled) noexcept;

} // namespace torch::autograd::device_logging
