// What the per-process record holds (Note [One snapshot, several
// encodings], process_snapshot.h).

#include <torch/csrc/autograd/process_snapshot.h>

#include <torch/csrc/autograd/accelerator_devices.h>
#include <torch/csrc/autograd/calling_thread_policy.h>
#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/device_stats.h>
#include <torch/csrc/autograd/interposition.h>
#include <torch/csrc/autograd/process_identity.h>
#include <torch/csrc/autograd/thread_placement.h>

#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#include <pthread.h>
#include <unistd.h>

namespace torch::autograd::device_logging::detail {

namespace {

// What the threading-cost measurement handed over, as it handed it over.
struct KeptThreadingCost {
  bool measuring = false;
  // Which start this is, and what it said of the threads (Note [Where the
  // measured threads ran], thread_placement.h).
  unsigned start = 0;
  pid_t calling_thread = 0;
  int intra_op_threads = -1;
  ThreadingCostSnapshot found;
};

struct KeptState {
  std::mutex mutex;
  std::string program;
  std::string activation;
  KeptThreadingCost threading_cost;
};

// Leaked: read by the exit write, after static destructors may have run.
KeptState& kept() {
  static auto* s = new KeptState();
  return *s;
}

// The writer thread takes kept().mutex for a copy; a fork() in another
// thread meanwhile must not leave the child's copy locked.
void lock_for_fork() {
  kept().mutex.lock();
}

void unlock_after_fork() {
  kept().mutex.unlock();
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::pair<std::string, int>> accelerators_seen() {
  std::vector<std::pair<std::string, int>> seen;
  for (size_t i = 0; i < kNumDeviceTypeSlots; ++i) {
    const auto type = static_cast<c10::DeviceType>(i);
    const c10::DeviceIndex count = accelerator_device_count(type);
    if (count > 0) {
      seen.emplace_back(c10::DeviceTypeName(type, /*lower_case=*/true), count);
    }
  }
  return seen;
}

} // namespace

void prepare_process_snapshot_for_fork() noexcept {
  static const bool registered =
      (pthread_atfork(&lock_for_fork, &unlock_after_fork, &unlock_after_fork),
       true);
  (void)registered;
}

int64_t process_start_ns() {
  static const int64_t start = []() -> int64_t {
    const int64_t started = process_start_ns_of(getpid());
    return started != 0 ? started : now_ns();
  }();
  return start;
}

void set_record_program(const char* program) noexcept {
  try {
    std::lock_guard<std::mutex> lock(kept().mutex);
    kept().program = program != nullptr ? program : "";
  } catch (...) {
  }
}

void set_record_activation(const char* how) noexcept {
  try {
    std::lock_guard<std::mutex> lock(kept().mutex);
    kept().activation = how != nullptr ? how : "";
  } catch (...) {
  }
}

void start_recording_threading_cost(
    double rate,
    uint64_t warmup,
    uint64_t max_pairs,
    uint64_t washout,
    int64_t calling_thread,
    int intra_op_threads) noexcept {
  try {
    std::lock_guard<std::mutex> lock(kept().mutex);
    KeptThreadingCost& cost = kept().threading_cost;
    const unsigned start = cost.start + 1;
    cost = KeptThreadingCost();
    cost.measuring = true;
    cost.start = start;
    cost.calling_thread = calling_thread > 0 && calling_thread <= INT32_MAX
        ? static_cast<pid_t>(calling_thread)
        : 0;
    cost.intra_op_threads = intra_op_threads;
    cost.found.rate = rate;
    cost.found.warmup = warmup;
    cost.found.max_pairs = max_pairs;
    cost.found.washout = washout;
  } catch (...) {
  }
}

bool keep_measured_pair(
    int device_class,
    uint64_t off_ns,
    uint64_t on_ns) noexcept {
  if (device_class < 0 || device_class >= kNumBackwardDeviceClasses ||
      off_ns == 0 || on_ns == 0 || off_ns > uint64_t{INT64_MAX} ||
      on_ns > uint64_t{INT64_MAX}) {
    return false;
  }
  try {
    std::lock_guard<std::mutex> lock(kept().mutex);
    KeptThreadingCost& cost = kept().threading_cost;
    auto& pairs = cost.found.pairs[device_class];
    if (!cost.measuring || pairs.size() >= kMaxPairsPerClass) {
      return false;
    }
    pairs.emplace_back(off_ns, on_ns);
    return true;
  } catch (...) {
    return false;
  }
}

int record_measurement_count(
    MeasurementCount which,
    const char* reason,
    uint64_t count) noexcept {
  if (reason == nullptr || count > uint64_t{INT64_MAX}) {
    return -1;
  }
  try {
    std::lock_guard<std::mutex> lock(kept().mutex);
    KeptThreadingCost& cost = kept().threading_cost;
    if (!cost.measuring) {
      return -1;
    }
    (which == MeasurementCount::kNotSampled ? cost.found.not_sampled
                                            : cost.found.discarded)[reason] =
        count;
    return 0;
  } catch (...) {
    return -1;
  }
}

ProcessSnapshot take_process_snapshot(
    const char* occasion,
    bool sample_placement) {
  ProcessSnapshot s;
  unsigned measurement_start = 0;
  pid_t calling_thread = 0;
  int intra_op_threads = -1;
  {
    std::lock_guard<std::mutex> lock(kept().mutex);
    s.program = kept().program;
    s.activation = kept().activation;
    const KeptThreadingCost& cost = kept().threading_cost;
    if (cost.measuring) {
      s.threading_cost = cost.found;
      measurement_start = cost.start;
      calling_thread = cost.calling_thread;
      intra_op_threads = cost.intra_op_threads;
    }
  }
  if (s.threading_cost && sample_placement) {
    // Only the writer thread samples, outside the lock that the measurement
    // takes between passes (Note [Where the measured threads ran]).
    static auto* samples = new PlacementSamples();
    samples->restart_if_new(measurement_start, calling_thread);
    samples->sample();
    s.threading_cost->placement = samples->to_json(intra_op_threads);
  }
  if (s.program.empty()) {
    s.program = program_invocation_name;
  }
  if (s.activation.empty()) {
    s.activation = loaded_by_preload() ? "by preload" : "linked";
  }
  s.time_ns = now_ns();
  s.start_ns = process_start_ns();
  s.occasion = occasion;
  const ProcessIdentity& identity = process_identity();
  s.host = identity.host;
  s.pid = getpid();
  std::tie(s.job, s.job_source) = job_and_source(identity, s.program);
  s.role = identity.role;
  s.rank = identity.rank;
  s.local_rank = identity.local_rank;
  s.world_size = identity.world_size;
  s.parent_pid = identity.parent_pid;
  s.parent_start_ns = identity.parent_start_ns;
  s.torch_built_for = built_for_torch();
  s.torch_running = running_torch_version();
  s.library_version = AUTOGRAD_DEVICE_LOGGING_VERSION;
  s.accelerators = accelerators_seen();
  s.events = events_raised.load(std::memory_order_relaxed);
  s.torch_logs_events = kTorchLogsTheEvents;
  s.ran_backward = (state.load(std::memory_order_relaxed) & kStateActive) != 0;
  s.passes_classified = passes_classified.load(std::memory_order_relaxed);
  const BackwardDeviceStats stats = backward_device_stats();
  if (stats.enabled || stats.passes() > 0) {
    s.pass_classes.emplace();
    for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
      (*s.pass_classes)[i] = stats.of_class(i);
    }
  }
  s.calling_thread = calling_thread_backward();
  if (const std::string* reason = disabled_reason()) {
    s.disabled_reason = *reason;
  }
  return s;
}

} // namespace torch::autograd::device_logging::detail
