// When the process's outputs are written (Note [Every output is a sink of
// one writer], output_sinks.h): armed from the settings or the package, the
// hook's milestones, an explicit write, exit and fork.

#include <torch/csrc/autograd/process_record.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/process_identity.h>
#include <torch/csrc/autograd/output_sinks.h>
#include <torch/csrc/autograd/process_snapshot.h>
#include <torch/csrc/autograd/record_json.h>
#include <torch/csrc/autograd/record_writer.h>
#include <torch/csrc/autograd/settings.h>

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

// Some sink is armed: the hook's milestones ask the writer thread for a
// write (Note [The record is written off the backward path],
// record_writer.h).
std::atomic<bool> record_armed{false};

void write_at_exit() {
  if (!record_armed.load(std::memory_order_acquire)) {
    return;
  }
  if (write_record_and_wait(kRecordAtExit, kRecordWriteWaitLimit) ==
      RecordWait::kTimedOut) {
    stop_record_writer();
    warn_to_stderr(
        std::string("this process's ") +
        (record_sink_armed() ? "record" : "Prometheus textfile") +
        " was not written within " +
        std::to_string(kRecordWriteWaitLimit.count()) +
        " ms at exit (is its directory's storage hung?); exiting without it.");
  }
}

// Arms one sink into `dir` ("" disarms it), with the exit write and the
// fork handlers, and the milestones' writes while any sink is armed.
void arm(Sink sink, const std::string& dir) {
  static const bool registered =
      (std::atexit(&write_at_exit),
       pthread_atfork(
           &lock_sinks_for_fork,
           &unlock_sinks_after_fork,
           &unlock_sinks_after_fork),
       true);
  (void)registered;
  prepare_process_snapshot_for_fork();
  prepare_record_writer();
  record_armed.store(
      set_sink_destination(sink, dir), std::memory_order_release);
}

} // namespace

void arm_outputs_from_settings() noexcept {
  try {
    const Settings& s = settings();
    if (!s.report_dir.empty()) {
      arm(Sink::kRecord, s.report_dir);
    }
    if (!s.prometheus_dir.empty()) {
      arm(Sink::kPrometheusTextfile, s.prometheus_dir);
      set_textfile_refresh_interval(s.prometheus_interval);
    }
  } catch (...) {
  }
}

void set_report_dir(const char* dir) noexcept {
  try {
    arm(Sink::kRecord, dir != nullptr ? dir : "");
  } catch (...) {
  }
}

void follow_record_writes() noexcept {
  try {
    arm(Sink::kFollowers, "followed");
  } catch (...) {
  }
}

std::string write_for_followers() noexcept {
  try {
    follow_record_writes();
    if (write_record_and_wait(kRecordForFollowers, kRecordWriteWaitLimit) !=
        RecordWait::kWritten) {
      return "";
    }
    return followers_json();
  } catch (...) {
    return "";
  }
}

std::string last_followed_json() noexcept {
  try {
    return followers_json();
  } catch (...) {
    return "";
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
