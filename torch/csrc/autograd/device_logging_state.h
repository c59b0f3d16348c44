#pragma once

// The process-wide state of the autograd device-logging patch: one state word
// that the engine seam reads after every walk, the reason the library
// disabled itself (if it did), and the counters the status API reports.
// Nothing here depends on libtorch's data structures.

#include <torch/csrc/autograd/device_logging.h>

#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace torch::autograd::device_logging::detail {

// Note [Where torch logs the events itself]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// From 2.14 on, libtorch's own compute_dependencies logs both events. A
// build against such a torch classifies every pass exactly as on earlier
// releases, with the same per-pass cost and the same once-per-process state,
// but does not log the events through C10_LOG_API_USAGE_ONCE: torch does, so
// each appears once per process, torch's. What the library decided is still
// its own to report: status().events_emitted and the per-process record say
// which events this process's passes raised, so that fleet data that mixes
// releases reads the same on both sides of 2.14. Only the overhead
// benchmark's comparison build
// (AUTOGRAD_DEVICE_LOGGING_BENCHMARK_ON_NATIVE_TORCH) logs them there too, on
// purpose.
// clang-format off
#if (TORCH_VERSION_MAJOR > 2 ||                                  \
     (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 14)) && \
    !defined(AUTOGRAD_DEVICE_LOGGING_BENCHMARK_ON_NATIVE_TORCH)
constexpr bool kTorchLogsTheEvents = true;
#else
constexpr bool kTorchLogsTheEvents = false;
#endif
// clang-format on

// Note [Device logging state]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// `state` holds one bit per BackwardDeviceEvent that needs no further
// inspection (the event was emitted, or the library is disabled), a bit for
// the opt-in statistics, one for "disabled", one for "the hook has run", one
// for "an accelerator device was seen" (Note [Skipping processes without
// accelerators], pass_logging.cpp), one for a test's injected fault and one
// for a pending census request (sampled_pass.h). After
// libtorch's walk, engine.cpp does one relaxed load of it; when it is exactly
// kNothingLeftToLog (both events done, which only a pass that saw an
// accelerator can do, the hook has run, statistics off, not disabled), the pass
// ends there. Relaxed ordering is enough: a pass that reads a stale value
// merely inspects nodes once more and then loses the fetch_or race, which still
// emits each event exactly once.
extern std::atomic<uint8_t> state;
constexpr uint8_t kStateMultiDeviceDone = 1u << 0;
constexpr uint8_t kStateGpuCpuDone = 1u << 1;
constexpr uint8_t kStateStatsEnabled = 1u << 2;
constexpr uint8_t kStateDisabled = 1u << 3;
constexpr uint8_t kStateHookHasRun = 1u << 4;
constexpr uint8_t kStateAcceleratorSeen = 1u << 5;
// A test installed a classifier fault (set_classifier_fault_for_testing), so
// passes take the slow path, which runs it.
constexpr uint8_t kStateFaultForTesting = 1u << 6;
// Some thread asked for the census of its next pass (sampled_pass.h),
// so passes take the slow path, which takes it.
constexpr uint8_t kStateCensusRequested = 1u << 7;
constexpr uint8_t kStateAllEventsDone =
    kStateMultiDeviceDone | kStateGpuCpuDone;
constexpr uint8_t kNothingLeftToLog =
    kStateAllEventsDone | kStateHookHasRun | kStateAcceleratorSeen;

// BackwardDeviceEvent bits this process's passes raised, which the library
// logged (torch logged them itself where kTorchLogsTheEvents); a subset of
// the done bits, which disabling sets too.
extern std::atomic<uint8_t> events_emitted;
// Nodes whose metadata the classifier read, summed over all passes.
extern std::atomic<uint64_t> nodes_inspected;
// Passes the classifier read (those skipped once both events fired are not
// counted), for the per-process record.
extern std::atomic<uint64_t> passes_classified;

// Turns the classifier off for the rest of the process: marks every event
// done and the library disabled, and prints one warning with `reason` (only
// the first reason is kept and printed). Never throws.
void disable(const std::string& reason) noexcept;

// The first reason passed to disable(), or nullptr while enabled. The string
// lives as long as the process.
const std::string* disabled_reason() noexcept;

// Prints `message` as a c10 warning through c10's stderr handler, even when a
// thread-local handler (Python's, which may turn warnings into errors) is
// installed: a message from this library must never fail a backward pass.
void warn_to_stderr(const std::string& message) noexcept;

} // namespace torch::autograd::device_logging::detail
