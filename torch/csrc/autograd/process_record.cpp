// The per-process record (Note [The per-process record]).

#include <torch/csrc/autograd/process_record.h>

#include <torch/csrc/autograd/backward_device_classifier.h>
#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/device_stats.h>
#include <torch/csrc/autograd/interposition.h>
#include <torch/csrc/autograd/pass_logging.h>

#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>

#include <unistd.h>

namespace torch::autograd::device_logging::detail {

namespace {

constexpr int kRecordSchema = 1;

struct RecordSettings {
  std::mutex mutex;
  std::string dir;
  std::string program;
  std::string activation;
};

// Leaked: read by the atexit handler, after static destructors may have run.
RecordSettings& settings() {
  static auto* s = new RecordSettings();
  return *s;
}

void write_at_exit() {
  write_process_record();
}

void arm(const std::string& dir) {
  static const bool registered = (std::atexit(&write_at_exit), true);
  (void)registered;
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().dir = dir;
}

nlohmann::json env_int_or_null(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return nullptr;
  }
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  return *end == '\0' ? nlohmann::json(parsed) : nlohmann::json(value);
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
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
    const std::string& activation) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  nlohmann::json r;
  r["schema"] = kRecordSchema;
  r["time"] = utc_now();
  r["host"] = host;
  r["pid"] = static_cast<long long>(getpid());
  r["program"] = program;
  const char* job = std::getenv("AUTOGRAD_DEVICE_LOGGING_JOB");
  const char* run_id = std::getenv("TORCHELASTIC_RUN_ID");
  r["job"] = (job != nullptr && *job != '\0')  ? std::string(job)
      : (run_id != nullptr && *run_id != '\0') ? std::string(run_id)
                                               : program;
  r["rank"] = env_int_or_null("RANK");
  r["local_rank"] = env_int_or_null("LOCAL_RANK");
  r["world_size"] = env_int_or_null("WORLD_SIZE");
  r["torch"] = {
      {"built_for", built_for_torch()}, {"running", running_torch_version()}};
  r["library_version"] = AUTOGRAD_DEVICE_LOGGING_VERSION;
  r["activated_by"] = activation;
  r["accelerators"] = accelerators_seen();
  const uint8_t emitted = events_emitted.load(std::memory_order_relaxed);
  r["events"] = nlohmann::json::array();
  if (emitted & kMultiDeviceBackward) {
    r["events"].push_back(kMultiDeviceBackwardEventName);
  }
  if (emitted & kGpuCpuBackward) {
    r["events"].push_back(kGpuCpuBackwardEventName);
  }
  r["passes_classified"] = passes_classified.load(std::memory_order_relaxed);
  const BackwardDeviceStats stats = backward_device_stats();
  if (stats.enabled || stats.passes() > 0) {
    r["pass_classes"] = {
        {"cpu_only", stats.cpu_only},
        {"single_accelerator", stats.single_accelerator},
        {"accelerator_cpu", stats.accelerator_cpu},
        {"multi_accelerator", stats.multi_accelerator}};
  } else {
    r["pass_classes"] = nullptr;
  }
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

bool write_process_record() noexcept {
  std::string dir;
  try {
    std::string program;
    std::string activation;
    {
      std::lock_guard<std::mutex> lock(settings().mutex);
      dir = settings().dir;
      program = settings().program;
      activation = settings().activation;
    }
    if (dir.empty()) {
      return false;
    }
    if (program.empty()) {
      program = program_invocation_name;
    }
    if (activation.empty()) {
      activation = loaded_by_preload() ? "by preload" : "linked";
    }
    const std::string text =
        make_record(program, activation)
            .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
        "\n";
    std::error_code ignored;
    std::filesystem::create_directories(dir, ignored);
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    const std::string name = std::string(host) + "-" +
        std::to_string(getpid()) + "-" + std::to_string(ns) + ".json";
    const std::string final_path = dir + "/" + name;
    const std::string temporary = dir + "/." + name + ".tmp";
    std::FILE* f = std::fopen(temporary.c_str(), "w");
    if (f == nullptr) {
      throw std::runtime_error(std::strerror(errno));
    }
    const bool written =
        std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool closed = std::fclose(f) == 0;
    if (!written || !closed ||
        std::rename(temporary.c_str(), final_path.c_str()) != 0) {
      const std::string cause = std::strerror(errno);
      std::remove(temporary.c_str());
      throw std::runtime_error(cause);
    }
    // One record per process: a record written early (before os._exit, say)
    // is not written again at exit.
    std::lock_guard<std::mutex> lock(settings().mutex);
    settings().dir.clear();
    return true;
  } catch (const std::exception& e) {
    warn_to_stderr(
        "autograd_device_logging: could not write this process's record "
        "into " +
        dir + ": " + e.what());
  } catch (...) {
  }
  return false;
}

} // namespace torch::autograd::device_logging::detail
