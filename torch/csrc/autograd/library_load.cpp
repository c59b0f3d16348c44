// What happens when the dynamic linker initializes the autograd
// device-logging library, in order: capturing who the process is (Note [A
// process's identity is decided once, at start-up], process_identity.h),
// the interposition's load-time checks
// (interposition.cpp), then arming the per-process record
// (process_record.cpp) and the statistics (device_stats.cpp) from the
// environment. Each step stands alone: a disabled classifier still keeps its
// record, which then says why it is disabled.

#include <torch/csrc/autograd/calling_thread_policy.h>
#include <torch/csrc/autograd/device_stats_recording.h>
#include <torch/csrc/autograd/interposition.h>
#include <torch/csrc/autograd/process_identity.h>
#include <torch/csrc/autograd/process_record.h>

namespace torch::autograd::device_logging::detail {

namespace {

void run_at_load() noexcept {
  (void)process_identity();
  check_interposition_at_load();
  arm_process_record_from_environment();
  arm_prometheus_textfile_from_environment();
  arm_statistics_from_environment();
  arm_calling_thread_from_environment();
}

// Runs when the dynamic linker initializes this library, i.e. after libtorch
// (a dependency) is initialized and before any backward pass in a program
// that links it. Every global these steps touch in other files is
// constant-initialized, so the order of initialization between this
// library's files does not matter.
[[maybe_unused]] const bool ran_at_load = (run_at_load(), true);

} // namespace

} // namespace torch::autograd::device_logging::detail
