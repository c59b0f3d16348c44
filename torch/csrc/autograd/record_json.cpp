// The per-process record's JSON (record_json.h).

#include <torch/csrc/autograd/record_json.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>

namespace torch::autograd::device_logging::detail {

// Note [One schema for the record]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// schema/process_record.schema.json is the record's one description, and the
// vocabulary of its enumerated fields. A new field, or a new value of an
// enumerated field, is a new minor version, which readers keep (Note [A newer
// minor version adds fields and values], record_fields.py); anything else (a
// field removed, renamed or given another meaning) is a new major one.
const char* const kRecordSchema = "2.3";

namespace {

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

nlohmann::json threading_cost_json(const ThreadingCostSnapshot& cost) {
  nlohmann::json by_class = nlohmann::json::object();
  for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
    if (!cost.pairs[i].empty()) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& [off, on] : cost.pairs[i]) {
        rows.push_back({off, on});
      }
      by_class[kBackwardDeviceClassNames[i]] = std::move(rows);
    }
  }
  nlohmann::json out = {
      {"pairs", std::move(by_class)},
      {"not_sampled", cost.not_sampled},
      {"discarded", cost.discarded},
      {"rate", cost.rate},
      {"warmup", cost.warmup},
      {"max_pairs", cost.max_pairs},
      {"washout", cost.washout}};
  if (!cost.placement.is_null()) {
    out["placement"] = cost.placement;
  }
  return out;
}

std::string dump(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace

std::string utc_text(int64_t ns) {
  const std::time_t seconds = static_cast<std::time_t>(ns / 1000000000LL);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::string valid_utf8(const std::string& text) {
  return nlohmann::json::parse(dump(nlohmann::json(text))).get<std::string>();
}

std::string encode_record_json(const ProcessSnapshot& s) {
  nlohmann::json r;
  r["schema"] = kRecordSchema;
  r["time"] = utc_text(s.time_ns);
  r["start_time"] = utc_text(s.start_ns);
  r["written_at"] = s.occasion;
  r["host"] = s.host;
  r["pid"] = static_cast<long long>(s.pid);
  r["program"] = s.program;
  r["job"] = s.job;
  r["job_source"] = s.job_source;
  r["role"] = s.role;
  r["rank"] = int_or_null(s.rank);
  r["local_rank"] = int_or_null(s.local_rank);
  r["world_size"] = int_or_null(s.world_size);
  r["parent"] = {
      {"pid", static_cast<long long>(s.parent_pid)},
      {"start_time",
       s.parent_start_ns != 0 ? nlohmann::json(utc_text(s.parent_start_ns))
                              : nlohmann::json(nullptr)}};
  r["torch"] = {{"built_for", s.torch_built_for}, {"running", s.torch_running}};
  r["library_version"] = s.library_version;
  r["activated_by"] = s.activation;
  r["accelerators"] = nlohmann::json::object();
  for (const auto& [type, count] : s.accelerators) {
    r["accelerators"][type] = count;
  }
  r["events"] = nlohmann::json::array();
  for (int i = 0; i < kNumBackwardDeviceEvents; ++i) {
    if (s.events & kBackwardDeviceEventBits[i]) {
      r["events"].push_back(kBackwardDeviceEventNames[i]);
    }
  }
  r["events_logged_by"] = s.torch_logs_events ? "torch" : "library";
  r["ran_backward"] = s.ran_backward;
  r["passes_classified"] = s.passes_classified;
  if (s.pass_classes) {
    r["pass_classes"] = nlohmann::json::object();
    for (int i = 0; i < kNumBackwardDeviceClasses; ++i) {
      r["pass_classes"][kBackwardDeviceClassNames[i]] = (*s.pass_classes)[i];
    }
  } else {
    r["pass_classes"] = nullptr;
  }
  r["threading_cost"] = s.threading_cost
      ? threading_cost_json(*s.threading_cost)
      : nlohmann::json(nullptr);
  r["calling_thread"] = s.calling_thread;
  r["disabled_reason"] = s.disabled_reason ? nlohmann::json(*s.disabled_reason)
                                           : nlohmann::json(nullptr);
  return dump(r) + "\n";
}

} // namespace torch::autograd::device_logging::detail
