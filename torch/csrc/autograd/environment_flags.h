#pragma once

// Boolean environment variables of the autograd device-logging patch.

#include <optional>
#include <string_view>

namespace torch::autograd::device_logging::detail {

// Note [Boolean environment variables]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A switch takes the values people type: 1/true/yes/on and 0/false/no/off, in
// any case. Unset or empty leaves the default. Any other value is a typo that
// must not pass silently (AUTOGRAD_DEVICE_LOGGING_STATS=ye would leave the
// statistics off without a word): it gets one warning naming the variable and
// the accepted values, and the default.

// true/false for an accepted value, nullopt for anything else.
std::optional<bool> parse_flag(std::string_view value) noexcept;

// The value of the switch `name`, `default_value` when it is unset or empty,
// and `default_value` with one warning on stderr when it is not a switch
// value.
bool env_flag(const char* name, bool default_value) noexcept;

// Note [Renamed environment variables]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every variable of the library starts with AUTOGRAD_DEVICE_LOGGING_. A name
// that did not keeps working: set, it costs one deprecation warning naming
// the new one, and where both are set the new one wins.

// env_flag of `name`, or of `old_name` (with one warning) where only that
// one is set.
bool renamed_env_flag(
    const char* name,
    const char* old_name,
    bool default_value) noexcept;

} // namespace torch::autograd::device_logging::detail
