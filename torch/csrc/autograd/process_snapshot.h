#pragma once

// What the per-process record holds (Note [The per-process record],
// process_record.h), as one plain value that every encoding reads: the JSON
// record (record_json.h) and the Prometheus textfile (prometheus_text.h).

#include <torch/csrc/autograd/backward_device_class.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace torch::autograd::device_logging::detail {

// Note [One snapshot, several encodings]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A write of the process's outputs takes one snapshot of the library's state
// (take_process_snapshot) and hands the same value to each encoding, so the
// JSON record and the Prometheus file written by one write never disagree,
// and an encoding reads nothing global: it is a pure function of the
// snapshot, tested on its own. Only the writer thread, and the C API's
// record_json (on the caller's thread, never during a pass), take one.

// What the threading-cost measurement found (Note [Measuring the cost of
// single-threaded backward], threading_measurement.py): the record's
// `threading_cost`.
struct ThreadingCostSnapshot {
  double rate = 0;
  uint64_t warmup = 0;
  uint64_t max_pairs = 0;
  uint64_t washout = 0;
  // Per class, (off_ns, on_ns) pairs: the pass with multithreading off, then
  // the one with it on.
  std::array<
      std::vector<std::pair<uint64_t, uint64_t>>,
      kNumBackwardDeviceClasses>
      pairs;
  std::map<std::string, uint64_t> not_sampled;
  std::map<std::string, uint64_t> discarded;
  // Where the measured threads ran (Note [Where the measured threads ran],
  // thread_placement.h); null unless the writer thread sampled it.
  nlohmann::json placement;
};

struct ProcessSnapshot {
  // Nanoseconds since the epoch.
  int64_t time_ns = 0;
  int64_t start_ns = 0;
  // Why it was taken: the record's written_at.
  std::string occasion;
  std::string host;
  pid_t pid = 0;
  std::string program;
  std::string job;
  std::string job_source;
  std::string role;
  // As the environment set them; "" where unset.
  std::string rank;
  std::string local_rank;
  std::string world_size;
  pid_t parent_pid = 0;
  int64_t parent_start_ns = 0;
  std::string torch_built_for;
  std::string torch_running;
  std::string library_version;
  std::string activation;
  // Device type name (lower case) -> devices seen.
  std::vector<std::pair<std::string, int>> accelerators;
  // BackwardDeviceEvent bits.
  uint8_t events = 0;
  bool torch_logs_events = false;
  bool ran_backward = false;
  uint64_t passes_classified = 0;
  // Passes per BackwardDeviceClass, where the statistics were on.
  std::optional<std::array<uint64_t, kNumBackwardDeviceClasses>> pass_classes;
  std::optional<ThreadingCostSnapshot> threading_cost;
  bool calling_thread = false;
  std::optional<std::string> disabled_reason;
};

// What the Python package knows better than the C++ side: the program (the
// script or module rather than the interpreter) and how the library came in.
void set_record_program(const char* program) noexcept;
void set_record_activation(const char* how) noexcept;

// The threading-cost measurement's findings
// (python/autograd_device_logging/threading_measurement.py), handed over as
// they are measured, never during a pass: the start, with its settings
// (dropping what an earlier start kept), the calling thread (its kernel
// thread id, 0 when unknown) and the intra-op threads (-1 when unknown) for
// the placement (Note [Where the measured threads ran], thread_placement.h);
// each pair, which keep_measured_pair refuses (false) for an unknown class,
// a duration outside [1, 2^63), a class holding kMaxPairsPerClass pairs, or
// no measurement started; the counts by reason (0, or -1 likewise).
void start_recording_threading_cost(
    double rate,
    uint64_t warmup,
    uint64_t max_pairs,
    uint64_t washout,
    int64_t calling_thread,
    int intra_op_threads) noexcept;
bool keep_measured_pair(
    int device_class,
    uint64_t off_ns,
    uint64_t on_ns) noexcept;
enum class MeasurementCount : int { kNotSampled = 0, kDiscarded = 1 };
int record_measurement_count(
    MeasurementCount which,
    const char* reason,
    uint64_t count) noexcept;

// The schema's bound on one class's pairs.
constexpr size_t kMaxPairsPerClass = 10000;

// The state as it is now. `sample_placement` (the writer thread only, Note
// [Where the measured threads ran]) adds the threads' placement to a
// measurement's snapshot. Throws std::bad_alloc only.
ProcessSnapshot take_process_snapshot(
    const char* occasion,
    bool sample_placement);

// The process's start, in nanoseconds since the epoch; the time of the
// first call where /proc does not say.
int64_t process_start_ns();

// The snapshot's taking takes a lock that the measurement also takes; its
// fork handlers keep a child's copy unlocked. Arming an output installs
// them, once.
void prepare_process_snapshot_for_fork() noexcept;

} // namespace torch::autograd::device_logging::detail
