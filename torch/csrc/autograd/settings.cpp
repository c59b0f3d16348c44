// The library's settings (Note [The library's settings are read once, at
// load], settings.h).

#include <torch/csrc/autograd/settings.h>

#include <torch/csrc/autograd/device_logging_state.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <new>

namespace torch::autograd::device_logging::detail {

namespace {

constexpr std::array<std::string_view, 4> kOnWords = {"1", "true", "yes", "on"};
constexpr std::array<std::string_view, 4> kOffWords = {
    "0",
    "false",
    "no",
    "off"};

bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = (a[i] >= 'A' && a[i] <= 'Z') ? a[i] - 'A' + 'a' : a[i];
    if (c != b[i]) {
      return false;
    }
  }
  return true;
}

const char* set_value(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

void ignoring(
    const char* name,
    const char* value,
    const std::string& takes,
    const std::string& default_value) {
  warn_to_stderr(
      std::string("ignoring ") + name + "=" + value + ": " + takes +
      "; using the default, " + default_value + ".");
}

bool read_switch(const char* name, bool default_value) {
  const char* value = set_value(name);
  if (value == nullptr) {
    return default_value;
  }
  if (const std::optional<bool> parsed = parse_switch(value)) {
    return *parsed;
  }
  ignoring(
      name,
      value,
      "use 1, true, yes or on, or 0, false, no or off (any case)",
      default_value ? "on" : "off");
  return default_value;
}

// A switch that had another name: the old one works, with one line.
bool read_renamed_switch(
    const char* name,
    const char* old_name,
    bool default_value) {
  if (set_value(old_name) == nullptr) {
    return read_switch(name, default_value);
  }
  const bool new_one_set = set_value(name) != nullptr;
  warn_to_stderr(
      std::string(old_name) + " is deprecated: use " + name +
      (new_one_set ? ", which is set too and wins." : " (the same values)."));
  return read_switch(new_one_set ? name : old_name, default_value);
}

std::chrono::seconds
read_seconds(const char* name, std::chrono::seconds default_value, long most) {
  const char* value = set_value(name);
  if (value == nullptr) {
    return default_value;
  }
  char* end = nullptr;
  errno = 0;
  const long seconds = std::strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || seconds < 0 ||
      seconds > most) {
    ignoring(
        name,
        value,
        "use a whole number of seconds from 0 to " + std::to_string(most),
        std::to_string(default_value.count()));
    return default_value;
  }
  return std::chrono::seconds(seconds);
}

std::string read_text(const char* name) {
  const char* value = set_value(name);
  return value != nullptr ? value : "";
}

Settings read_settings() {
  Settings s;
  s.statistics = read_renamed_switch(
      "AUTOGRAD_DEVICE_LOGGING_STATS", "PYTORCH_AUTOGRAD_DEVICE_STATS", false);
  s.calling_thread =
      read_switch("AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD", false);
  s.report_dir = read_text("AUTOGRAD_DEVICE_LOGGING_REPORT_DIR");
  s.prometheus_dir = read_text("AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR");
  if (!s.prometheus_dir.empty()) {
    s.prometheus_interval = read_seconds(
        "AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL",
        s.prometheus_interval,
        86400);
  }
  s.ld_preload = read_text("LD_PRELOAD");
  return s;
}

} // namespace

std::optional<bool> parse_switch(std::string_view value) noexcept {
  for (const std::string_view word : kOnWords) {
    if (equals_ignoring_case(value, word)) {
      return true;
    }
  }
  for (const std::string_view word : kOffWords) {
    if (equals_ignoring_case(value, word)) {
      return false;
    }
  }
  return std::nullopt;
}

const Settings& settings() noexcept {
  static const Settings* read = []() -> const Settings* {
    try {
      return new Settings(read_settings());
    } catch (...) {
      return new (std::nothrow) Settings();
    }
  }();
  static const Settings defaults;
  return read != nullptr ? *read : defaults;
}

} // namespace torch::autograd::device_logging::detail
