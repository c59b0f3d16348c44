// What happens when the dynamic linker initializes the autograd
// device-logging library, in order: reading the settings (Note [The
// library's settings are read once, at load], settings.h), capturing who the
// process is (Note [A process's identity is decided once, at start-up],
// process_identity.h), the interposition's load-time checks
// (interposition.cpp), then arming the outputs (process_record.cpp), the
// statistics (device_stats.cpp) and the calling-thread opt-in from the
// settings. Each step stands alone: a disabled classifier still keeps its
// record, which then says why it is disabled.

#include <torch/csrc/autograd/calling_thread_policy.h>
#include <torch/csrc/autograd/device_stats_recording.h>
#include <torch/csrc/autograd/interposition.h>
#include <torch/csrc/autograd/process_identity.h>
#include <torch/csrc/autograd/process_record.h>
#include <torch/csrc/autograd/settings.h>

namespace torch::autograd::device_logging::detail {

namespace {

void run_at_load() noexcept {
  (void)settings();
  (void)process_identity();
  check_interposition_at_load();
  arm_outputs_from_settings();
  arm_statistics_from_settings();
  arm_calling_thread_from_settings();
}

// Runs when the dynamic linker initializes this library, i.e. after libtorch
// (a dependency) is initialized and before any backward pass in a program
// that links it. Every global these steps touch in other files is
// constant-initialized, so the order of initialization between this
// library's files does not matter.
[[maybe_unused]] const bool ran_at_load = (run_at_load(), true);

} // namespace

} // namespace torch::autograd::device_logging::detail
