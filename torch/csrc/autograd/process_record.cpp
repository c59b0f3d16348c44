// The process's outputs: the per-process record (Note [The per-process
// record], process_record.h) and the Prometheus textfile (Note [The
// Prometheus textfile], prometheus_text.h), armed, asked for and written.

#include <torch/csrc/autograd/process_record.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/process_identity.h>
#include <torch/csrc/autograd/process_snapshot.h>
#include <torch/csrc/autograd/prometheus_text.h>
#include <torch/csrc/autograd/record_file.h>
#include <torch/csrc/autograd/record_json.h>
#include <torch/csrc/autograd/record_writer.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include <pthread.h>
#include <unistd.h>

namespace torch::autograd::device_logging::detail {

namespace {

// Where each output goes; "" where it is not armed.
struct Outputs {
  std::mutex mutex;
  std::string record_dir;
  std::string prometheus_dir;
  bool followed = false;
};

// Leaked: read by the exit write, after static destructors may have run.
Outputs& outputs() {
  static auto* o = new Outputs();
  return *o;
}

// Some output is armed, or the writes are followed: the hook's milestones
// ask the writer thread for a write (Note [The record is written off the
// backward path]).
std::atomic<bool> record_armed{false};

void write_at_exit() {
  if (!record_armed.load(std::memory_order_acquire)) {
    return;
  }
  if (write_record_and_wait(kRecordAtExit, kRecordWriteWaitLimit) ==
      RecordWait::kTimedOut) {
    stop_record_writer();
    bool record = false;
    {
      std::lock_guard<std::mutex> lock(outputs().mutex);
      record = !outputs().record_dir.empty();
    }
    warn_to_stderr(
        std::string("autograd_device_logging: this process's ") +
        (record ? "record" : "Prometheus textfile") +
        " was not written within " +
        std::to_string(kRecordWriteWaitLimit.count()) +
        " ms at exit (is its directory's storage hung?); exiting without it.");
  }
}

void lock_outputs_for_fork() {
  outputs().mutex.lock();
}

void unlock_outputs_after_fork() {
  outputs().mutex.unlock();
}

// Sets one output's directory ("" disarms it) and arms the writes while any
// output is armed or followed.
void arm(std::string Outputs::*output, const std::string& dir) {
  static const bool registered =
      (std::atexit(&write_at_exit),
       pthread_atfork(
           &lock_outputs_for_fork,
           &unlock_outputs_after_fork,
           &unlock_outputs_after_fork),
       true);
  (void)registered;
  prepare_process_snapshot_for_fork();
  prepare_record_writer();
  Outputs& o = outputs();
  std::lock_guard<std::mutex> lock(o.mutex);
  if (output != nullptr) {
    o.*output = dir;
  }
  record_armed.store(
      !o.record_dir.empty() || !o.prometheus_dir.empty() || o.followed,
      std::memory_order_release);
}

// One warning per output and process, however many of its writes fail.
void warn_once(
    std::atomic<bool>& warned,
    const std::string& what,
    const std::string& dir,
    const char* cause) {
  if (!warned.exchange(true)) {
    warn_to_stderr(
        "autograd_device_logging: could not write " + what + " into " + dir +
        ": " + cause);
  }
}

// The record: HOST-PID-STARTNS.json, its temporaries in DIR/.tmp named
// after it, which a later writer on this host removes once PID is gone.
bool write_record_file(const std::string& dir, const ProcessSnapshot& s) {
  static std::atomic<bool> warned{false};
  try {
    const std::string name = s.host + "-" + std::to_string(s.pid) + "-" +
        std::to_string(s.start_ns) + ".json";
    replace_file_in_shared_directory(
        dir,
        name,
        encode_record_json(s),
        /*temporary_prefix=*/name,
        /*stale_prefix=*/s.host + "-");
    return true;
  } catch (const std::exception& e) {
    warn_once(warned, "this process's record", dir, e.what());
  } catch (...) {
  }
  return false;
}

// The textfile, once the process has run a backward pass (Note [The
// Prometheus textfile]); its temporaries beside it, hidden from the
// collector.
bool write_prometheus_file(const std::string& dir, const ProcessSnapshot& s) {
  if (!s.ran_backward) {
    return true;
  }
  static std::atomic<bool> warned{false};
  try {
    const std::string hidden = ".autograd_device_logging-" + s.host + "-";
    replace_file_in_shared_directory(
        dir,
        prometheus_file_name(s),
        encode_prometheus_text(s),
        /*temporary_prefix=*/hidden + std::to_string(s.pid),
        /*stale_prefix=*/hidden,
        TemporaryPlace::kBesideTheFile);
    return true;
  } catch (const std::exception& e) {
    warn_once(warned, "this process's Prometheus textfile", dir, e.what());
  } catch (...) {
  }
  return false;
}

// AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL, whole seconds (Note [The
// textfile is refreshed on an interval], record_writer.h); a value that is
// not one is one warning, and the default.
std::chrono::milliseconds textfile_refresh_interval_from_environment() {
  constexpr long kDefaultSeconds = 15;
  const char* text = std::getenv("AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL");
  if (text == nullptr || *text == '\0') {
    return std::chrono::seconds(kDefaultSeconds);
  }
  char* end = nullptr;
  errno = 0;
  const long seconds = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || seconds < 0 ||
      seconds > 86400) {
    warn_to_stderr(
        std::string("AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL=") + text +
        " is not a whole number of seconds from 0 to 86400; the textfile is "
        "refreshed every " +
        std::to_string(kDefaultSeconds) + " s.");
    return std::chrono::seconds(kDefaultSeconds);
  }
  return std::chrono::seconds(seconds);
}

} // namespace

void arm_process_record_from_environment() noexcept {
  try {
    const char* dir = std::getenv("AUTOGRAD_DEVICE_LOGGING_REPORT_DIR");
    if (dir != nullptr && *dir != '\0') {
      arm(&Outputs::record_dir, dir);
    }
  } catch (...) {
  }
}

void arm_prometheus_textfile_from_environment() noexcept {
  try {
    const char* dir = std::getenv("AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR");
    if (dir != nullptr && *dir != '\0') {
      arm(&Outputs::prometheus_dir, dir);
      set_textfile_refresh_interval(
          textfile_refresh_interval_from_environment());
    }
  } catch (...) {
  }
}

void set_report_dir(const char* dir) noexcept {
  try {
    arm(&Outputs::record_dir, dir != nullptr ? dir : "");
  } catch (...) {
  }
}

void follow_record_writes() noexcept {
  try {
    {
      std::lock_guard<std::mutex> lock(outputs().mutex);
      outputs().followed = true;
    }
    arm(nullptr, "");
  } catch (...) {
  }
}

int record_measured_pair(
    int device_class,
    uint64_t off_ns,
    uint64_t on_ns) noexcept {
  if (!keep_measured_pair(device_class, off_ns, on_ns)) {
    return -1;
  }
  if (!record_armed.load(std::memory_order_acquire)) {
    return 0;
  }
  request_record_write(kRecordAtMeasurement);
  return 1;
}

bool write_outputs_on_the_writer_thread(uint32_t occasions) noexcept {
  try {
    std::string record_dir;
    std::string prometheus_dir;
    {
      std::lock_guard<std::mutex> lock(outputs().mutex);
      record_dir = outputs().record_dir;
      prometheus_dir = outputs().prometheus_dir;
    }
    if (occasions == kRecordTextfileRefresh) {
      // Note [The textfile is refreshed on an interval] (record_writer.h).
      record_dir.clear();
    }
    if (record_dir.empty() && prometheus_dir.empty()) {
      return false;
    }
    // A refresh writes no record, so "interval" is no record's written_at.
    const ProcessSnapshot snapshot = take_process_snapshot(
        occasions == kRecordTextfileRefresh ? "interval"
                                            : record_occasion_name(occasions),
        /*sample_placement=*/!record_dir.empty());
    bool written = true;
    if (!record_dir.empty()) {
      written = write_record_file(record_dir, snapshot) && written;
    }
    if (!prometheus_dir.empty()) {
      written = write_prometheus_file(prometheus_dir, snapshot) && written;
    }
    return written;
  } catch (...) {
    return false;
  }
}

std::string current_record_json() noexcept {
  try {
    return encode_record_json(take_process_snapshot(
        record_occasion_name(kRecordExplicit), /*sample_placement=*/false));
  } catch (...) {
    return "";
  }
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
