#pragma once

// The per-process record behind the fleet report
// (python -m autograd_device_logging report DIR).

namespace torch::autograd::device_logging::detail {

// Note [The per-process record]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With AUTOGRAD_DEVICE_LOGGING_REPORT_DIR set when the library loads (or a
// directory set later through set_report_dir, as the launcher's --report
// does), the library writes one JSON record of this process into that
// directory at exit: who the process was (host, pid, program, job, rank),
// which torch and library, how the library came in, the accelerator devices
// it saw, the events it emitted, and the per-class pass counts when the
// statistics were on. The library writes it, not the Python package, so
// C++ programs get records too. It is written atomically (a temporary name,
// then rename) from an atexit handler: never during a backward pass, never
// by throwing, and a directory that cannot be written costs one warning and
// leaves the process and its exit status alone. Processes that end without
// running atexit handlers (os._exit, a fatal signal) write no record.
// Strings such as argv are arbitrary bytes; the JSON is produced by
// nlohmann/json (third_party/), invalid UTF-8 replaced.

// Reads AUTOGRAD_DEVICE_LOGGING_REPORT_DIR; called once at load.
void arm_process_record_from_environment() noexcept;

// Writes the record into `dir` at exit (nullptr or "" disarms it).
void set_report_dir(const char* dir) noexcept;

// What the Python package knows better than the C++ side: the program (the
// script or module rather than the interpreter) and how the library came in.
void set_record_program(const char* program) noexcept;
void set_record_activation(const char* how) noexcept;

// Writes the record now (then not again at exit); false when no directory is
// set, or, after one warning, when it cannot be written.
bool write_process_record() noexcept;

} // namespace torch::autograd::device_logging::detail
