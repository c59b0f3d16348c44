// The process's outputs as sinks of one writer (Note [Every output is a sink
// of one writer], output_sinks.h).

#include <torch/csrc/autograd/output_sinks.h>

#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/process_snapshot.h>
#include <torch/csrc/autograd/prometheus_text.h>
#include <torch/csrc/autograd/record_file.h>
#include <torch/csrc/autograd/record_json.h>

#include <array>
#include <atomic>
#include <exception>
#include <mutex>

namespace torch::autograd::device_logging::detail {

namespace {

std::string record_file_name(const ProcessSnapshot& s) {
  return s.host + "-" + std::to_string(s.pid) + "-" +
      std::to_string(s.start_ns) + ".json";
}

// The record's temporaries in DIR/.tmp named after it, which a later writer
// on this host removes once PID is gone; the textfile's beside it, hidden
// from the collector.
std::string record_stale(const ProcessSnapshot& s) {
  return s.host + "-";
}
std::string textfile_stale(const ProcessSnapshot& s) {
  return ".autograd_device_logging-" + s.host + "-";
}
std::string textfile_temporary(const ProcessSnapshot& s) {
  return textfile_stale(s) + std::to_string(s.pid);
}

struct SinkSpec {
  const char* what;                                 // for its one warning
  std::string (*file_name)(const ProcessSnapshot&); // nullptr: in memory
  std::string (*encode)(const ProcessSnapshot&);
  std::string (*temporary_prefix)(const ProcessSnapshot&);
  std::string (*stale_prefix)(const ProcessSnapshot&);
  TemporaryPlace temporaries;
  // Written only once the process has run a backward pass (Note [The
  // Prometheus textfile], prometheus_text.h).
  bool after_a_pass;
  // The RecordOccasion bits that serve this sink alone.
  uint32_t own_occasion;
};

constexpr size_t kSinkCount = 3;
const std::array<SinkSpec, kSinkCount> kSinks = {{
    {"this process's record",
     &record_file_name,
     &encode_record_json,
     &record_file_name,
     &record_stale,
     TemporaryPlace::kTmpSubdirectory,
     false,
     0},
    {"this process's Prometheus textfile",
     &prometheus_file_name,
     &encode_prometheus_text,
     &textfile_temporary,
     &textfile_stale,
     TemporaryPlace::kBesideTheFile,
     true,
     kRecordTextfileRefresh},
    {"the followers' snapshot",
     nullptr,
     &encode_record_json,
     nullptr,
     nullptr,
     TemporaryPlace::kTmpSubdirectory,
     false,
     kRecordForFollowers},
}};

struct Destinations {
  std::mutex mutex;
  // Per sink: where it goes; "" where it is not armed.
  std::array<std::string, kSinkCount> dir;
  std::string followers_json;
};

// Leaked: the exit write reads it after static destructors may have run.
Destinations& destinations() {
  static auto* d = new Destinations();
  return *d;
}

std::array<std::atomic<bool>, kSinkCount> warned{};

// An occasion of a sink's own serves that sink alone; any other every sink.
constexpr uint32_t kOwnOccasions = kRecordTextfileRefresh | kRecordForFollowers;

bool serves(const SinkSpec& sink, uint32_t occasions) {
  return (occasions & ~kOwnOccasions) != 0 ||
      (occasions & sink.own_occasion) != 0;
}

} // namespace

const char* record_occasion_name(uint32_t occasions) noexcept {
  if (occasions & kRecordAtExit) {
    return "exit";
  }
  if (occasions & kRecordExplicit) {
    return "explicit";
  }
  if (occasions & kRecordAtEvent) {
    return "event";
  }
  if (occasions & kRecordAtMeasurement) {
    return "measurement";
  }
  if (occasions & kRecordForFollowers) {
    return "explicit";
  }
  return "first_pass";
}

bool set_sink_destination(Sink sink, const std::string& dir) {
  Destinations& d = destinations();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.dir[static_cast<size_t>(sink)] = dir;
  for (const std::string& armed : d.dir) {
    if (!armed.empty()) {
      return true;
    }
  }
  return false;
}

bool record_sink_armed() {
  Destinations& d = destinations();
  std::lock_guard<std::mutex> lock(d.mutex);
  return !d.dir[static_cast<size_t>(Sink::kRecord)].empty();
}

bool write_sinks(uint32_t occasions) noexcept {
  try {
    std::array<std::string, kSinkCount> dir;
    {
      std::lock_guard<std::mutex> lock(destinations().mutex);
      dir = destinations().dir;
    }
    bool any = false;
    for (size_t i = 0; i < kSinkCount; ++i) {
      if (dir[i].empty() || !serves(kSinks[i], occasions)) {
        dir[i].clear();
      }
      any = any || !dir[i].empty();
    }
    if (!any) {
      return false;
    }
    // A refresh writes no record, so "interval" is no record's written_at.
    const ProcessSnapshot snapshot = take_process_snapshot(
        occasions == kRecordTextfileRefresh ? "interval"
                                            : record_occasion_name(occasions),
        /*sample_placement=*/!dir[static_cast<size_t>(Sink::kRecord)].empty());
    bool written = true;
    for (size_t i = 0; i < kSinkCount; ++i) {
      const SinkSpec& sink = kSinks[i];
      if (dir[i].empty() || (sink.after_a_pass && !snapshot.ran_backward)) {
        continue;
      }
      try {
        std::string text = sink.encode(snapshot);
        if (sink.file_name == nullptr) {
          std::lock_guard<std::mutex> lock(destinations().mutex);
          destinations().followers_json = std::move(text);
          continue;
        }
        replace_file_in_shared_directory(
            dir[i],
            sink.file_name(snapshot),
            text,
            sink.temporary_prefix(snapshot),
            sink.stale_prefix(snapshot),
            sink.temporaries);
      } catch (const std::exception& e) {
        written = false;
        if (!warned[i].exchange(true)) {
          warn_to_stderr(
              std::string("could not write ") + sink.what + " into " + dir[i] +
              ": " + e.what());
        }
      }
    }
    return written;
  } catch (...) {
    return false;
  }
}

std::string followers_json() {
  std::lock_guard<std::mutex> lock(destinations().mutex);
  return destinations().followers_json;
}

void lock_sinks_for_fork() {
  destinations().mutex.lock();
}

void unlock_sinks_after_fork() {
  destinations().mutex.unlock();
}

} // namespace torch::autograd::device_logging::detail
