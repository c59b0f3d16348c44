// The per-process record (Note [The per-process record]).

#include <torch/csrc/autograd/process_record.h>

#include <torch/csrc/autograd/accelerator_devices.h>
#include <torch/csrc/autograd/backward_device_class.h>
#include <torch/csrc/autograd/calling_thread_policy.h>
#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/device_stats.h>
#include <torch/csrc/autograd/interposition.h>
#include <torch/csrc/autograd/process_identity.h>
#include <torch/csrc/autograd/record_file.h>
#include <torch/csrc/autograd/record_writer.h>
#include <torch/csrc/autograd/thread_placement.h>

#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <pthread.h>
#include <unistd.h>

namespace torch::autograd::device_logging::detail {

namespace {

// Note [One schema for the record]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// schema/process_record.schema.json is the record's one description, and the
// vocabulary of its enumerated fields. A new field, or a new value of an
// enumerated field, is a new minor version, which readers keep (Note [A newer
// minor version adds fields and values], record_fields.py); anything else (a
// field removed, renamed or given another meaning) is a new major one.
constexpr const char* kRecordSchema = "2.3";

// The record's names of the BackwardDeviceClass values, in their order.
constexpr std::array<const char*, kNumBackwardDeviceClasses> kClassNames = {
    "cpu_only",
    "single_accelerator",
    "accelerator_cpu",
    "multi_accelerator"};

// What the threading-cost measurement found (Note [Measuring the cost of
// single-threaded backward], threading_measurement.py), as the measurement
// handed it over: the record's `threading_cost`.
struct MeasuredThreadingCost {
  bool measuring = false;
  // Which start this is, and what it said of the threads (Note [Where the
  // measured threads ran], thread_placement.h).
  unsigned start = 0;
  pid_t calling_thread = 0;
  int intra_op_threads = -1;
  double rate = 0;
  uint64_t warmup = 0;
  uint64_t max_pairs = 0;
  uint64_t washout = 0;
  // Per class, (off_ns, on_ns) pairs, at most kMaxPairsPerClass each.
  std::array<
      std::vector<std::pair<uint64_t, uint64_t>>,
      kNumBackwardDeviceClasses>
      pairs;
  std::map<std::string, uint64_t> not_sampled;
  std::map<std::string, uint64_t> discarded;

  nlohmann::json to_json() const {
    if (!measuring) {
      return nullptr;
    }
    nlohmann::json by_class = nlohmann::json::object();
    for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
      if (!pairs[i].empty()) {
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& [off, on] : pairs[i]) {
          rows.push_back({off, on});
        }
        by_class[kClassNames[i]] = std::move(rows);
      }
    }
    return {
        {"pairs", std::move(by_class)},
        {"not_sampled", not_sampled},
        {"discarded", discarded},
        {"rate", rate},
        {"warmup", warmup},
        {"max_pairs", max_pairs},
        {"washout", washout}};
  }
};
// The schema's bound on one class's pairs.
constexpr size_t kMaxPairsPerClass = 10000;

struct RecordSettings {
  std::mutex mutex;
  std::string dir;
  std::string program;
  std::string activation;
  MeasuredThreadingCost threading_cost;
  // The record's file name, fixed per process (recomputed after fork()).
  std::string file_name;
  pid_t file_pid = 0;
};

// Leaked: read by the atexit handler, after static destructors may have run.
RecordSettings& settings() {
  static auto* s = new RecordSettings();
  return *s;
}

// A directory is set: the hook's milestones ask the writer thread for a
// write (Note [The record is written off the backward path]).
std::atomic<bool> record_armed{false};

void write_at_exit() {
  if (!record_armed.load(std::memory_order_acquire)) {
    return;
  }
  if (write_record_and_wait(kRecordAtExit, kRecordWriteWaitLimit) ==
      RecordWait::kTimedOut) {
    stop_record_writer();
    warn_to_stderr(
        "autograd_device_logging: this process's record was not written "
        "within " +
        std::to_string(kRecordWriteWaitLimit.count()) +
        " ms at exit (is the report directory's storage hung?); exiting "
        "without it.");
  }
}

// The writer thread takes settings().mutex for a copy; a fork() in another
// thread meanwhile must not leave the child's copy locked.
void lock_settings_for_fork() {
  settings().mutex.lock();
}

void unlock_settings_after_fork() {
  settings().mutex.unlock();
}

void arm(const std::string& dir) {
  static const bool registered =
      (std::atexit(&write_at_exit),
       pthread_atfork(
           &lock_settings_for_fork,
           &unlock_settings_after_fork,
           &unlock_settings_after_fork),
       true);
  (void)registered;
  prepare_record_writer();
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().dir = dir;
  record_armed.store(!dir.empty(), std::memory_order_release);
}

// The process's start, in nanoseconds since the epoch; the time of the
// first call where /proc does not say.
int64_t process_start_ns() {
  static const int64_t start = []() -> int64_t {
    const int64_t started = process_start_ns_of(getpid());
    return started != 0
        ? started
        : std::chrono::duration_cast<std::chrono::nanoseconds>(
              std::chrono::system_clock::now().time_since_epoch())
              .count();
  }();
  return start;
}

std::string utc(int64_t ns) {
  const std::time_t seconds = static_cast<std::time_t>(ns / 1000000000LL);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

// An environment variable's value as the process started: null where it
// was unset, a number where it is one, the text otherwise.
nlohmann::json int_or_null(const std::string& value) {
  if (value.empty()) {
    return nullptr;
  }
  char* end = nullptr;
  const long long parsed = std::strtoll(value.c_str(), &end, 10);
  return *end == '\0' ? nlohmann::json(parsed) : nlohmann::json(value);
}

nlohmann::json accelerators_seen() {
  nlohmann::json seen = nlohmann::json::object();
  for (size_t i = 0; i < kNumDeviceTypeSlots; ++i) {
    const auto type = static_cast<c10::DeviceType>(i);
    const c10::DeviceIndex count = accelerator_device_count(type);
    if (count > 0) {
      seen[c10::DeviceTypeName(type, /*lower_case=*/true)] = count;
    }
  }
  return seen;
}

nlohmann::json make_record(
    const std::string& program,
    const std::string& activation,
    const nlohmann::json& threading_cost,
    const char* occasion) {
  nlohmann::json r;
  r["schema"] = kRecordSchema;
  r["time"] = utc(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
  r["start_time"] = utc(process_start_ns());
  r["written_at"] = occasion;
  const ProcessIdentity& identity = process_identity();
  r["host"] = identity.host;
  r["pid"] = static_cast<long long>(getpid());
  r["program"] = program;
  const auto [job, source] = job_and_source(identity, program);
  r["job"] = job;
  r["job_source"] = source;
  r["role"] = identity.role;
  r["rank"] = int_or_null(identity.rank);
  r["local_rank"] = int_or_null(identity.local_rank);
  r["world_size"] = int_or_null(identity.world_size);
  r["parent"] = {
      {"pid", static_cast<long long>(identity.parent_pid)},
      {"start_time",
       identity.parent_start_ns != 0
           ? nlohmann::json(utc(identity.parent_start_ns))
           : nlohmann::json(nullptr)}};
  r["torch"] = {
      {"built_for", built_for_torch()}, {"running", running_torch_version()}};
  r["library_version"] = AUTOGRAD_DEVICE_LOGGING_VERSION;
  r["activated_by"] = activation;
  r["accelerators"] = accelerators_seen();
  const uint8_t emitted = events_raised.load(std::memory_order_relaxed);
  r["events"] = nlohmann::json::array();
  if (emitted & kMultiDeviceBackward) {
    r["events"].push_back(kMultiDeviceBackwardEventName);
  }
  if (emitted & kGpuCpuBackward) {
    r["events"].push_back(kGpuCpuBackwardEventName);
  }
  r["events_logged_by"] = kTorchLogsTheEvents ? "torch" : "library";
  r["ran_backward"] =
      (state.load(std::memory_order_relaxed) & kStateActive) != 0;
  r["passes_classified"] = passes_classified.load(std::memory_order_relaxed);
  const BackwardDeviceStats stats = backward_device_stats();
  if (stats.enabled || stats.passes() > 0) {
    r["pass_classes"] = {
        {kClassNames[0], stats.cpu_only},
        {kClassNames[1], stats.single_accelerator},
        {kClassNames[2], stats.accelerator_cpu},
        {kClassNames[3], stats.multi_accelerator}};
  } else {
    r["pass_classes"] = nullptr;
  }
  r["threading_cost"] = threading_cost;
  r["calling_thread"] = calling_thread_backward();
  const std::string* reason = disabled_reason();
  r["disabled_reason"] =
      reason != nullptr ? nlohmann::json(*reason) : nlohmann::json(nullptr);
  return r;
}

} // namespace

void arm_process_record_from_environment() noexcept {
  try {
    const char* dir = std::getenv("AUTOGRAD_DEVICE_LOGGING_REPORT_DIR");
    if (dir != nullptr && *dir != '\0') {
      arm(dir);
    }
  } catch (...) {
  }
}

void set_report_dir(const char* dir) noexcept {
  try {
    arm(dir != nullptr ? dir : "");
  } catch (...) {
  }
}

void set_record_program(const char* program) noexcept {
  try {
    std::lock_guard<std::mutex> lock(settings().mutex);
    settings().program = program != nullptr ? program : "";
  } catch (...) {
  }
}

void set_record_activation(const char* how) noexcept {
  try {
    std::lock_guard<std::mutex> lock(settings().mutex);
    settings().activation = how != nullptr ? how : "";
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
    std::lock_guard<std::mutex> lock(settings().mutex);
    MeasuredThreadingCost& cost = settings().threading_cost;
    const unsigned start = cost.start + 1;
    cost = MeasuredThreadingCost();
    cost.measuring = true;
    cost.start = start;
    cost.calling_thread = calling_thread > 0 && calling_thread <= INT32_MAX
        ? static_cast<pid_t>(calling_thread)
        : 0;
    cost.intra_op_threads = intra_op_threads;
    cost.rate = rate;
    cost.warmup = warmup;
    cost.max_pairs = max_pairs;
    cost.washout = washout;
  } catch (...) {
  }
}

int record_measured_pair(
    int device_class,
    uint64_t off_ns,
    uint64_t on_ns) noexcept {
  if (device_class < 0 || device_class >= kNumBackwardDeviceClasses ||
      off_ns == 0 || on_ns == 0 || off_ns > uint64_t{INT64_MAX} ||
      on_ns > uint64_t{INT64_MAX}) {
    return -1;
  }
  try {
    {
      std::lock_guard<std::mutex> lock(settings().mutex);
      MeasuredThreadingCost& cost = settings().threading_cost;
      if (!cost.measuring ||
          cost.pairs[device_class].size() >= kMaxPairsPerClass) {
        return -1;
      }
      cost.pairs[device_class].emplace_back(off_ns, on_ns);
    }
    if (!record_armed.load(std::memory_order_acquire)) {
      return 0;
    }
    request_record_write(kRecordAtMeasurement);
    return 1;
  } catch (...) {
    return -1;
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
    std::lock_guard<std::mutex> lock(settings().mutex);
    MeasuredThreadingCost& cost = settings().threading_cost;
    if (!cost.measuring) {
      return -1;
    }
    (which == MeasurementCount::kNotSampled ? cost.not_sampled
                                            : cost.discarded)[reason] = count;
    return 0;
  } catch (...) {
    return -1;
  }
}

bool write_record_on_the_writer_thread(const char* occasion) noexcept {
  std::string dir;
  try {
    std::string program;
    std::string activation;
    nlohmann::json threading_cost;
    std::string name;
    unsigned measurement_start = 0;
    pid_t calling_thread = 0;
    int intra_op_threads = -1;
    {
      std::lock_guard<std::mutex> lock(settings().mutex);
      dir = settings().dir;
      if (dir.empty()) {
        return false;
      }
      program = settings().program;
      activation = settings().activation;
      threading_cost = settings().threading_cost.to_json();
      measurement_start = settings().threading_cost.start;
      calling_thread = settings().threading_cost.calling_thread;
      intra_op_threads = settings().threading_cost.intra_op_threads;
      if (settings().file_pid != getpid()) {
        settings().file_pid = getpid();
        settings().file_name = process_identity().host + "-" +
            std::to_string(getpid()) + "-" +
            std::to_string(process_start_ns()) + ".json";
      }
      name = settings().file_name;
    }
    if (threading_cost.is_object()) {
      // Only this thread samples, outside the lock that the measurement
      // takes between passes (Note [Where the measured threads ran]).
      static auto* samples = new PlacementSamples();
      samples->restart_if_new(measurement_start, calling_thread);
      samples->sample();
      threading_cost["placement"] = samples->to_json(intra_op_threads);
    }
    if (program.empty()) {
      program = program_invocation_name;
    }
    if (activation.empty()) {
      activation = loaded_by_preload() ? "by preload" : "linked";
    }
    const std::string text =
        make_record(program, activation, threading_cost, occasion)
            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
        "\n";
    // The temporary is HOST-PID-STARTNS.json.RANDOM.tmp: a later writer on
    // this host removes it once PID is gone.
    replace_file_in_shared_directory(
        dir,
        name,
        text,
        /*temporary_prefix=*/name,
        /*stale_prefix=*/process_identity().host + "-");
    return true;
  } catch (const std::exception& e) {
    // One warning per process, however many of its writes fail.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      warn_to_stderr(
          "autograd_device_logging: could not write this process's record "
          "into " +
          dir + ": " + e.what());
    }
  } catch (...) {
  }
  return false;
}

int job_wide_name(char* out, size_t size) noexcept {
  try {
    const ProcessIdentity& identity = process_identity();
    if (identity.job.empty()) {
      return 0;
    }
    const std::string& job = identity.job;
    if (out != nullptr && size > 0) {
      const size_t n = std::min(job.size(), size - 1);
      std::memcpy(out, job.data(), n);
      out[n] = '\0';
    }
    return 1;
  } catch (...) {
    return 0;
  }
}

bool write_process_record() noexcept {
  return record_armed.load(std::memory_order_acquire) &&
      write_record_and_wait(kRecordExplicit, kRecordWriteWaitLimit) ==
      RecordWait::kWritten;
}

void record_first_backward_pass() noexcept {
  if (record_armed.load(std::memory_order_acquire)) {
    request_record_write(kRecordAtFirstPass);
  }
}

void record_event_raised() noexcept {
  if (record_armed.load(std::memory_order_acquire)) {
    request_record_write(kRecordAtEvent);
  }
}

} // namespace torch::autograd::device_logging::detail
