#pragma once

// The library's own thread that writes the process's outputs (Note [Every
// output is a sink of one writer], output_sinks.h), so that no thread that
// runs a backward pass ever touches the file system for them.

#include <torch/csrc/autograd/output_sinks.h>

#include <chrono>
#include <cstdint>

namespace torch::autograd::device_logging::detail {

// Note [The record is written off the backward path]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A fleet's record directory lives on shared storage (NFS, Lustre, a
// FUSE-mounted bucket), where one fsync can take tens of milliseconds, a
// thousand ranks reach their first backward pass in the same second, and a
// hung mount blocks forever. So the hook never writes: the first pass and
// the first raising of an event only ask for a write, which costs two atomic
// read-modify-writes and a sem_post (which never blocks), and the first ask
// in a process also starts the writer thread (pthread_create, once per
// process; again in a child after fork(), whose copy of the thread is gone).
// The writer thread, with every signal blocked, builds the record and
// replaces the file (Note [Writing into a directory that others can
// write], record_file.h). Requests that arrive while it writes are folded
// into one more write, which reads the state as it is then, so no write is
// lost and none is repeated for nothing.
//
// The bounds, on storage that answers: a record is on disk within 1 s
// (kRecordOnDiskWithin) of the first pass and of the first raising of an
// event, so a process killed with SIGKILL after that leaves its events. The
// measurement's pairs (record_measured_pair) reach the record the same
// way. At exit, and for an explicit write_process_record(), the calling
// thread waits for the write at most kRecordWriteWaitLimit (2 s); past that
// the process goes on (exits) without it, and the writer thread, which may
// be stuck in the kernel on a hung mount, touches nothing more: exit is
// destroying the statics it would read.

// The bound on how long after a request the record is on disk, on storage
// that answers (what the tests check).
constexpr std::chrono::milliseconds kRecordOnDiskWithin{1000};
// The most that exit or an explicit write waits for the writer thread.
constexpr std::chrono::milliseconds kRecordWriteWaitLimit{2000};

// Builds the writer's state; arming the record calls it, so that no pass
// does.
void prepare_record_writer() noexcept;

// Asks the writer thread for a write. Never blocks, performs no I/O, and
// never throws; the first call in a process starts the thread.
void request_record_write(RecordOccasion occasion) noexcept;

enum class RecordWait : uint8_t { kWritten, kFailed, kTimedOut };

// Asks for a write and waits until it is done, or `limit` has passed.
RecordWait write_record_and_wait(
    RecordOccasion occasion,
    std::chrono::milliseconds limit) noexcept;

// Waits until the writer has served more than `seen` requests, or `limit`
// has passed, and returns how many it has served: a follower of the writes
// (follow_record_writes, process_record.h) acts after each.
uint64_t wait_for_record_write(
    uint64_t seen,
    std::chrono::milliseconds limit) noexcept;

// After exit gave up waiting: the writer thread writes nothing more.
void stop_record_writer() noexcept;

// Note [The textfile is refreshed on an interval]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The record's write points (first pass, an event, a measured pair, exit)
// leave a running job's counts behind for as long as it runs, and a killed
// job's for good. With a refresh interval set (the Prometheus textfile
// armed; AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_INTERVAL, seconds, default 15,
// 0 for none), the writer thread also wakes on its own once per interval and
// rewrites the textfile alone from a fresh snapshot: one write per interval
// however many passes ran, on the writer thread, never on a thread that runs
// backward. A process that ran no backward pass still writes none.
void set_textfile_refresh_interval(std::chrono::milliseconds interval) noexcept;

} // namespace torch::autograd::device_logging::detail
