#pragma once

// The per-process record behind the fleet report
// (python -m autograd_device_logging report DIR).

#include <torch/csrc/autograd/process_snapshot.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace torch::autograd::device_logging::detail {

// Note [The per-process record]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With AUTOGRAD_DEVICE_LOGGING_REPORT_DIR set when the library loads (or a
// directory set later through set_report_dir, as the launcher's --report
// does), the library keeps one JSON record of this process in that
// directory: who the process was (host, pid, start time, program, job and
// where the job's name came from, role, rank), which torch and library, how
// the library came in, the accelerator devices it saw, whether it ran a
// backward pass, the events its passes raised, the per-class pass counts
// when the statistics were on, and what the threading-cost measurement found
// when it was on. Its format is schema/process_record.schema.json
// (Note [One schema for the record]). The library writes it, not the Python
// package, so C++ programs get records too.
//
// A record is evidence, and the processes that matter most (the largest
// multi-GPU jobs) are the ones an OOM killer, a preemption or SIGKILL ends
// without atexit handlers. So the record is written when the process's first
// backward pass reaches the hook, again when an event is first raised, and
// at exit; each write replaces the process's one file
// (HOST-PID-STARTNS.json) atomically, and none happens on the thread that
// asked for it: the library's writer thread does the I/O (Note [The record
// is written off the backward path], record_writer.h), and the file is
// replaced without following any name that another user of the directory
// could have planted (Note [Writing into a directory that others can
// write], record_file.h). A process killed more than a second after an
// event fired leaves a record that holds the event. At most three writes
// happen during a run (and one per measured pair while the threading-cost
// measurement is on), none per pass after them, none by throwing; a
// directory that cannot be written costs one warning and leaves the process
// and its exit status alone. Temporary files that a killed writer of this
// user left in DIR/.tmp are removed by later writers on the same host (its
// process is gone) or on any host (a day old). When the library creates DIR
// or DIR/.tmp it makes them writable for every user, sticky like /tmp
// (mode 1777), so that several users' jobs can share one directory.
// Strings such as argv are arbitrary bytes; the JSON is produced by
// nlohmann/json (third_party/), invalid UTF-8 replaced.

// Reads AUTOGRAD_DEVICE_LOGGING_REPORT_DIR; called once at load.
void arm_process_record_from_environment() noexcept;

// Writes the record into `dir` at exit (nullptr or "" disarms it).
void set_report_dir(const char* dir) noexcept;

// Reads AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR; called once at load (Note
// [The Prometheus textfile], prometheus_text.h). Its writes are the record's
// (the milestones below, each pair, exit), into its own directory.
void arm_prometheus_textfile_from_environment() noexcept;

// What the threading-cost measurement
// (python/autograd_device_logging/threading_measurement.py) found, handed
// over as it is measured: the record's `threading_cost`, which the library
// writes like every other field (one writer). The measurement starts it with
// its settings (which drops what an earlier start recorded), adds each pair
// as it is measured, and sets its counts by reason. A pair asks the writer
// thread for a write at once, so that it survives SIGKILL; the measurement
// adds it after the pair, never during a pass. record_measured_pair returns 1
// when the write was asked for, 0 when no directory is set, and -1 (nothing
// kept) for an unknown class, a duration outside [1, 2^63), a class already
// holding the schema's 10,000 pairs, or no measurement started;
// record_measurement_count 0, or -1 likewise.
// The start also names the calling thread (its kernel thread id; 0 when
// unknown) and the intra-op thread count (-1 when unknown), for the record's
// placement (Note [Where the measured threads ran], thread_placement.h).
// The start and the counts only keep what they are given
// (start_recording_threading_cost and record_measurement_count,
// process_snapshot.h); a pair also asks for a write, here.
int record_measured_pair(
    int device_class,
    uint64_t off_ns,
    uint64_t on_ns) noexcept;

// The job's name as the record gives it (Note [Which job a process belongs
// to], process_identity.cpp), into `out` (truncated to `size` bytes, NUL
// terminated), when something job-wide names it: 1 then, 0 when only the
// program and host would (each host would name the job differently).
int job_wide_name(char* out, size_t size) noexcept;

// Has the writer thread write the record now and waits for it (at most
// kRecordWriteWaitLimit, record_writer.h); false when no directory is set,
// when the wait ran out, or, after one warning, when it cannot be written.
bool write_process_record() noexcept;

// Takes one snapshot for `occasions` (RecordOccasion bits) and replaces
// each armed output's file (the record, the Prometheus textfile; the
// textfile alone for kRecordTextfileRefresh); only the writer thread calls
// it (record_writer.cpp). False when no output is armed or, after one
// warning per output and process, when one cannot be written.
bool write_outputs_on_the_writer_thread(uint32_t occasions) noexcept;

// Has the writer thread serve the write points even with no output armed,
// for a follower in another thread (the Python package's OTLP export):
// wait_for_record_write (record_writer.h) then returns after each write.
void follow_record_writes() noexcept;

// The record as it stands, as JSON (record_json.h), taken on the calling
// thread; "" when it cannot be built.
std::string current_record_json() noexcept;

// The hook's milestones (Note [The per-process record]): the process's first
// backward pass, and an event raised for the first time. Each asks the
// writer thread for a write if a directory is set; neither blocks, does I/O
// or throws.
void record_first_backward_pass() noexcept;
void record_event_raised() noexcept;

} // namespace torch::autograd::device_logging::detail
