#pragma once

// What the user asked the library for: every switch and directory, read
// once from the environment when the library loads.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace torch::autograd::device_logging::detail {

// Note [The library's settings are read once, at load]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Like the process's identity (process_identity.h), the settings are read
// from the environment once, when the library loads (library_load.cpp), into
// one const struct: every other file reads a field, never the environment.
// A new switch is one field, one line in read_settings() and one row of
// docs/usage.md's table. A switch takes 1/true/yes/on or 0/false/no/off in
// any case (kOnWords/kOffWords; vocabulary.py spells the same words for the
// Python package, and test_record_vocabulary.py holds the two equal); unset
// or empty leaves the default; any other value is one line on stderr,
// worded one way: "ignoring NAME=VALUE: <what it takes>; using the default,
// <default>." A variable renamed to the AUTOGRAD_DEVICE_LOGGING_ prefix keeps
// working under its old name with one deprecation line; where both are set
// the new one wins.
struct Settings {
  // AUTOGRAD_DEVICE_LOGGING_STATS (formerly PYTORCH_AUTOGRAD_DEVICE_STATS).
  bool statistics = false;
  // AUTOGRAD_DEVICE_LOGGING_CALLING_THREAD.
  bool calling_thread = false;
  // AUTOGRAD_DEVICE_LOGGING_REPORT_DIR: where the record goes ("" for none).
  std::string report_dir;
  // AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR: where the textfile goes.
  std::string prometheus_dir;
  // AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL, whole seconds, 0 for none
  // (Note [The textfile is refreshed on an interval], record_writer.h).
  std::chrono::seconds prometheus_interval{15};
  // LD_PRELOAD as the process started (Note [The preload ends with the
  // process that asked for it], interposition.cpp).
  std::string ld_preload;
};

// Read at the first call, which the library's load makes.
const Settings& settings() noexcept;

// The one on/off parser: true/false for a switch word, nullopt otherwise.
std::optional<bool> parse_switch(std::string_view value) noexcept;

} // namespace torch::autograd::device_logging::detail
