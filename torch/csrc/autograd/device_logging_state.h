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
// its own to report: status().events_raised and the per-process record say
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
// `state` is one 32-bit word that every pass reads. Its bits:
//
//   bit  name                     set while
//   0    kStateMultiDeviceDone    multidevice_backward needs no further
//                                 inspection (raised, or the library is
//                                 disabled); the event's own
//                                 BackwardDeviceEvent bit, which
//                                 pass_logging.cpp asserts
//   1    kStateGpuCpuDone         likewise for gpu_cpu_backward
//   2    kStateStatsEnabled       the opt-in statistics are on
//   3    kStateDisabled           the library disabled itself
//   4    kStateActive             the hook has run: libtorch's
//                                 Engine::execute is bound to it
//   5    kStateAcceleratorSeen    an accelerator device was seen (Note
//                                 [Skipping processes without accelerators],
//                                 pass_logging.cpp)
//   6    kStateFaultForTesting    a test installed a classifier fault
//   7    kStateCensusRequested    some thread asked for the census of its
//                                 next pass (Note [A census on request])
//   8    kStateCallingThread      single-device passes run on the calling
//                                 thread (Note [Single-device passes on the
//                                 calling thread]), so every pass is
//                                 classified
//   9-31                          free
//
// After libtorch's walk, engine.cpp does one relaxed load of it; when it is
// exactly kNothingLeftToLog (both events done, which only a pass that saw an
// accelerator can do, the hook has run, statistics off, not disabled, no
// fault, no census asked for), the pass ends there. A new condition that must
// send passes to the slow path takes a free bit; the fast path's compare then
// covers it with no change. Relaxed ordering is enough: a pass that reads a
// stale value merely inspects nodes once more and then loses the fetch_or
// race, which still emits each event exactly once.
using StateWord = uint32_t;
extern std::atomic<StateWord> state;
constexpr StateWord kStateMultiDeviceDone = 1u << 0;
constexpr StateWord kStateGpuCpuDone = 1u << 1;
constexpr StateWord kStateStatsEnabled = 1u << 2;
constexpr StateWord kStateDisabled = 1u << 3;
constexpr StateWord kStateActive = 1u << 4;
constexpr StateWord kStateAcceleratorSeen = 1u << 5;
constexpr StateWord kStateFaultForTesting = 1u << 6;
constexpr StateWord kStateCensusRequested = 1u << 7;
constexpr StateWord kStateCallingThread = 1u << 8;
constexpr StateWord kStateAllEventsDone =
    kStateMultiDeviceDone | kStateGpuCpuDone;
constexpr StateWord kNothingLeftToLog =
    kStateAllEventsDone | kStateActive | kStateAcceleratorSeen;

// BackwardDeviceEvent bits this process's passes raised, which the library
// logged (torch logged them itself where kTorchLogsTheEvents); a subset of
// the done bits, which disabling sets too.
extern std::atomic<uint8_t> events_raised;
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

// Every warning line starts with this (Note [One warning style],
// python/autograd_device_logging/_user_warning.py).
constexpr const char* kWarningPrefix = "autograd_device_logging: ";

// Prints `message` as one line on stderr, after kWarningPrefix (unless it
// starts with it). Not through c10's warning handlers: Python's may turn a
// warning into an error, and a message from this library must never fail a
// backward pass.
void warn_to_stderr(const std::string& message) noexcept;

} // namespace torch::autograd::device_logging::detail
