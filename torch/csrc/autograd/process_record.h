#pragma once

// When the process's outputs are written: the per-process record behind the
// fleet report (python -m autograd_device_logging report DIR), the
// Prometheus textfile and the followers (Note [Every output is a sink of one
// writer], output_sinks.h).

#include <cstddef>
#include <cstdint>
#include <string>

namespace torch::autograd::device_logging::detail {

// Note [The per-process record]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With a report directory (AUTOGRAD_DEVICE_LOGGING_REPORT_DIR at load, or
// set_report_dir, as the launcher's --report does), the library keeps one
// JSON record of this process there (schema/process_record.schema.json):
// who the process was, which torch and library, the devices it saw, the
// events its passes raised, the per-class counts and the threading cost
// where those were on. The library writes it, so C++ programs get records
// too. A record is evidence, and the largest jobs are the ones an OOM
// killer or SIGKILL ends without atexit: so it is written at the first
// backward pass, when an event is first raised, per measured pair, and at
// exit, each write replacing HOST-PID-STARTNS.json atomically on the writer
// thread (Note [The record is written off the backward path],
// record_writer.h), following no name another user could plant (Note
// [Writing into a directory that others can write], record_file.h). A
// directory that cannot be written costs one warning and nothing else.

// Arms the outputs the settings name (settings.h); called once at load.
void arm_outputs_from_settings() noexcept;

// Writes the record into `dir` from now on (nullptr or "" disarms it).
void set_report_dir(const char* dir) noexcept;

// Keeps a measured pair (start_recording_threading_cost and
// keep_measured_pair, process_snapshot.h) and asks for a write at once, so
// that it survives SIGKILL: 1 when asked, 0 when no sink is armed, -1
// (nothing kept) when keep_measured_pair refused it.
int record_measured_pair(
    int device_class,
    uint64_t off_ns,
    uint64_t on_ns) noexcept;

// The job's name where something job-wide names it (Note [Which job a
// process belongs to], process_identity.cpp), into `out` (truncated, NUL
// terminated): 1 then, else 0.
int job_wide_name(char* out, size_t size) noexcept;

// Writes every armed sink now and waits (at most kRecordWriteWaitLimit);
// false when none is armed, the wait ran out, or a write failed.
bool write_process_record() noexcept;

// Arms the followers' sink: every write point then encodes the snapshot for
// a follower in another thread (the Python package's OTLP export), which
// waits with wait_for_record_write (record_writer.h) and reads
// last_followed_json().
void follow_record_writes() noexcept;

// The JSON of the last write that served the followers ("" before one).
std::string last_followed_json() noexcept;

// A write for the followers alone, waited for; its JSON, "" on failure.
std::string write_for_followers() noexcept;

// The record as it stands, as JSON, taken on the calling thread; "" when it
// cannot be built.
std::string current_record_json() noexcept;

// The hook's milestones: the first backward pass, an event raised for the
// first time. Each asks for a write if a sink is armed; neither blocks, does
// I/O or throws.
void record_first_backward_pass() noexcept;
void record_event_raised() noexcept;

} // namespace torch::autograd::device_logging::detail
