// The process's counts as Prometheus text (Note [The Prometheus textfile],
// prometheus_text.h).

#include <torch/csrc/autograd/prometheus_text.h>

#include <torch/csrc/autograd/record_json.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace torch::autograd::device_logging::detail {

namespace {

// The families' names, HELP and TYPE (metric_families.py spells the same
// ones for Python; test/test_prometheus.py holds the two together).
struct Family {
  const char* name;
  const char* type;
  const char* help;
};
constexpr Family kInfo = {
    "autograd_device_logging_info",
    "gauge",
    "The torch release and the library's state (value 1)."};
constexpr Family kLastUpdate = {
    "autograd_device_logging_last_update_timestamp_seconds",
    "gauge",
    "When the process last wrote this file (Unix time, whole seconds)."};
constexpr Family kPasses = {
    "autograd_device_logging_backward_passes_total",
    "counter",
    "Backward passes, by the devices their graph spans "
    "(AUTOGRAD_DEVICE_LOGGING_STATS=1)."};
constexpr Family kEvents = {
    "autograd_device_logging_events_total",
    "counter",
    "Processes that raised each once-per-process API-usage event."};
constexpr Family kPairs = {
    "autograd_device_logging_threading_cost_pairs_total",
    "counter",
    "Pairs of passes the threading-cost measurement timed, by device class."};
constexpr Family kMultithreadedSeconds = {
    "autograd_device_logging_threading_cost_multithreaded_seconds_total",
    "counter",
    "Time of the measured passes run multithreaded, by device class."};
constexpr Family kSingleThreadedSeconds = {
    "autograd_device_logging_threading_cost_single_threaded_seconds_total",
    "counter",
    "Time of the measured passes run on the calling thread, by device class."};

using Labels = std::vector<std::pair<const char*, std::string>>;

// A label value as the format wants it: UTF-8, with \, " and newline
// escaped.
std::string escaped(const std::string& value) {
  std::string out;
  for (const char c : valid_utf8(value)) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Exposition {
 public:
  explicit Exposition(Labels process) : process_(std::move(process)) {}

  void family(const Family& f) {
    text_ += std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " +
        f.name + " " + f.type + "\n";
    name_ = f.name;
  }

  void sample(const Labels& own, const std::string& value) {
    text_ += name_;
    char separator = '{';
    for (const Labels* labels : std::array<const Labels*, 2>{&process_, &own}) {
      for (const auto& [label, label_value] : *labels) {
        if (label_value.empty()) {
          continue; // an empty value is the label's absence
        }
        text_ += separator;
        text_ += std::string(label) + "=\"" + escaped(label_value) + "\"";
        separator = ',';
      }
    }
    if (separator == ',') {
      text_ += '}';
    }
    text_ += " " + value + "\n";
  }

  const std::string& text() const {
    return text_;
  }

 private:
  Labels process_;
  std::string text_;
  const char* name_ = "";
};

std::string seconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9f", static_cast<double>(ns) / 1e9);
  return text;
}

const char* on_off(bool on) {
  return on ? "on" : "off";
}

std::string reduced(const std::string& text) {
  std::string out;
  for (const char c : text.substr(0, 64)) {
    const bool kept = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
        (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    out += kept ? c : '_';
  }
  return out;
}

// FNV-1a, 64 bits: the same name for the same (job, rank) in every process
// and release.
uint64_t fnv1a(const std::string& bytes) {
  uint64_t hash = 14695981039346656037ULL;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

} // namespace

std::string encode_prometheus_text(const ProcessSnapshot& s) {
  Exposition out({{"training_job", s.job}, {"rank", s.rank}});
  out.family(kInfo);
  out.sample(
      {{"torch", s.torch_running},
       {"torch_built_for", s.torch_built_for},
       {"library_version", s.library_version},
       {"events_logged_by", s.torch_logs_events ? "torch" : "library"},
       {"state",
        s.disabled_reason          ? "disabled"
            : s.occasion == "exit" ? "exited"
            : s.ran_backward       ? "active"
                                   : "idle"},
       {"statistics", on_off(s.pass_classes.has_value())},
       {"threading_cost", on_off(s.threading_cost.has_value())},
       {"calling_thread", on_off(s.calling_thread)}},
      "1");
  out.family(kLastUpdate);
  out.sample({}, std::to_string(s.time_ns / 1000000000));
  if (s.pass_classes) {
    out.family(kPasses);
    for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
      out.sample(
          {{"class", kBackwardDeviceClassNames[i]}},
          std::to_string((*s.pass_classes)[i]));
    }
  }
  out.family(kEvents);
  for (int i = 0; i < kNumBackwardDeviceEvents; ++i) {
    out.sample(
        {{"event", kBackwardDeviceEventNames[i]}},
        (s.events & kBackwardDeviceEventBits[i]) ? "1" : "0");
  }
  if (s.threading_cost) {
    const auto& pairs = s.threading_cost->pairs;
    std::array<uint64_t, kNumBackwardDeviceClasses> off_ns{};
    std::array<uint64_t, kNumBackwardDeviceClasses> on_ns{};
    for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
      for (const auto& [off, on] : pairs[i]) {
        off_ns[i] += off;
        on_ns[i] += on;
      }
    }
    out.family(kPairs);
    for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
      out.sample(
          {{"class", kBackwardDeviceClassNames[i]}},
          std::to_string(pairs[i].size()));
    }
    out.family(kMultithreadedSeconds);
    for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
      out.sample({{"class", kBackwardDeviceClassNames[i]}}, seconds(on_ns[i]));
    }
    out.family(kSingleThreadedSeconds);
    for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
      out.sample({{"class", kBackwardDeviceClassNames[i]}}, seconds(off_ns[i]));
    }
  }
  return out.text();
}

std::string prometheus_file_name(const ProcessSnapshot& s) {
  char hash[17];
  std::snprintf(
      hash,
      sizeof(hash),
      "%016llx",
      static_cast<unsigned long long>(
          fnv1a(s.job + std::string(1, '\0') + s.rank)));
  return "autograd_device_logging-" + reduced(s.job) +
      (s.rank.empty() ? "" : "-rank" + reduced(s.rank)) + "-" + hash + ".prom";
}

} // namespace torch::autograd::device_logging::detail
