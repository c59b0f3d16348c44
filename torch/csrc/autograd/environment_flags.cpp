// Boolean environment variables (Note [Boolean environment variables]).

#include <torch/csrc/autograd/environment_flags.h>

#include <torch/csrc/autograd/device_logging_state.h>

#include <array>
#include <cstdlib>
#include <string>

namespace torch::autograd::device_logging::detail {

namespace {

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

} // namespace

std::optional<bool> parse_flag(std::string_view value) noexcept {
  constexpr std::array<std::string_view, 4> kTrue = {"1", "true", "yes", "on"};
  constexpr std::array<std::string_view, 4> kFalse = {
      "0", "false", "no", "off"};
  for (const std::string_view accepted : kTrue) {
    if (equals_ignoring_case(value, accepted)) {
      return true;
    }
  }
  for (const std::string_view accepted : kFalse) {
    if (equals_ignoring_case(value, accepted)) {
      return false;
    }
  }
  return std::nullopt;
}

bool env_flag(const char* name, bool default_value) noexcept {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return default_value;
  }
  if (const std::optional<bool> parsed = parse_flag(value)) {
    return *parsed;
  }
  try {
    warn_to_stderr(
        std::string("autograd_device_logging: ignoring ") + name + "=" + value +
        ": use 1, true, yes or on, or 0, false, no or off (any case); " +
        "using the default, " + (default_value ? "on" : "off") + ".");
  } catch (...) {
  }
  return default_value;
}

bool renamed_env_flag(
    const char* name,
    const char* old_name,
    bool default_value) noexcept {
  const char* old_value = std::getenv(old_name);
  if (old_value == nullptr || *old_value == '\0') {
    return env_flag(name, default_value);
  }
  const char* value = std::getenv(name);
  const bool new_one_set = value != nullptr && *value != '\0';
  try {
    warn_to_stderr(
        std::string("autograd_device_logging: ") + old_name +
        " is deprecated: use " + name +
        (new_one_set ? std::string(", which is set too and wins.")
                     : std::string(" (the same values).")));
  } catch (...) {
  }
  return env_flag(new_one_set ? name : old_name, default_value);
}

} // namespace torch::autograd::device_logging::detail
