#pragma once

// The C ABI of the autograd device-logging patch: every extern "C" function
// the library exports, for callers without C++ linkage. Its one caller is
// the Python package, through the ctypes table in
// python/autograd_device_logging/_native.py, which test/test_c_api.py holds
// to this header (names, argument and return types). Private to the library:
// C++ programs use the C++ API (device_logging.h, device_stats.h). The
// benchmark-only switch is declared with the benchmarks (benchmark_switch.h).
//
// Each function wraps the C++ function of the same meaning and never throws.
// Strings returned live as long as the process.

#include <torch/csrc/autograd/device_logging.h>

#include <cstddef>
#include <cstdint>

extern "C" {

// --- Status (DeviceLoggingStatus) -------------------------------------------

// 1 when the patched compute_dependencies has run
// (DeviceLoggingStatus::active).
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_active(void);
// BackwardDeviceEvent bits this process's passes raised.
AUTOGRAD_DEVICE_LOGGING_API unsigned autograd_device_logging_events_raised(
    void);
AUTOGRAD_DEVICE_LOGGING_API uint64_t
autograd_device_logging_nodes_inspected(void);
// nullptr while enabled.
AUTOGRAD_DEVICE_LOGGING_API const char* autograd_device_logging_disabled_reason(
    void);
AUTOGRAD_DEVICE_LOGGING_API const char* autograd_device_logging_built_for_torch(
    void);
AUTOGRAD_DEVICE_LOGGING_API const char* autograd_device_logging_running_torch(
    void);
// 1 when the events are torch's own (DeviceLoggingStatus::torch_logs_events).
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_torch_logs_events(void);
// The path of this library's file, as the dynamic linker loaded it.
AUTOGRAD_DEVICE_LOGGING_API const char* autograd_device_logging_library_path(
    void);
// 1 when LD_PRELOAD named this library as it was loaded, else 0.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_loaded_by_preload(void);

// --- Single-device passes on the calling thread (calling_thread_policy.h) ----

// Turns the opt-in on (1) or off (0); returns 1, or 0 (nothing changed) where
// this torch lacks the seam the opt-in needs.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_set_calling_thread(
    int enabled);
// 1 while it is on.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_calling_thread(void);

// --- Statistics (device_stats.h) --------------------------------------------

// out[0..4]: cpu_only, single_accelerator, accelerator_cpu, multi_accelerator,
// max_accelerators_in_one_pass; returns 1 if enabled.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_stats(uint64_t* out);
AUTOGRAD_DEVICE_LOGGING_API void autograd_device_logging_enable_stats(
    int enabled);
AUTOGRAD_DEVICE_LOGGING_API void autograd_device_logging_reset_stats(void);

// --- The per-process record (Note [The per-process record]) -----------------

// The directory to write the record into (nullptr or "" disarms it).
AUTOGRAD_DEVICE_LOGGING_API void autograd_device_logging_set_report_dir(
    const char* dir);
// What the Python package knows of the program and of how the library came in.
AUTOGRAD_DEVICE_LOGGING_API void autograd_device_logging_set_record_program(
    const char* program);
AUTOGRAD_DEVICE_LOGGING_API void autograd_device_logging_set_record_activation(
    const char* how);
// The record's `threading_cost`, handed over as the measurement goes
// (process_record.h): its start with its settings, the calling thread's
// kernel id and the intra-op thread count, each measured pair
// (device_class is a BackwardDeviceClass; asks for a write: 1 then, 0 with no
// directory, -1 when refused), and its counts by reason (which: 0
// not_sampled, 1 discarded; 0, or -1 when refused).
AUTOGRAD_DEVICE_LOGGING_API void
autograd_device_logging_start_recording_threading_cost(
    double rate,
    uint64_t warmup,
    uint64_t max_pairs,
    uint64_t washout,
    int64_t calling_thread,
    int intra_op_threads);
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_record_measured_pair(
    int device_class,
    uint64_t off_ns,
    uint64_t on_ns);
AUTOGRAD_DEVICE_LOGGING_API int
autograd_device_logging_record_measurement_count(
    int which,
    const char* reason,
    uint64_t count);
// The job's name as the record gives it, into `job` (truncated to `size`
// bytes, NUL terminated), when something job-wide names it (not the program
// and host): 1 then, else 0.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_job_wide_name(
    char* job,
    size_t size);
// "rank", "agent" (torchrun's elastic agent) or "other"
// (ProcessIdentity::role).
AUTOGRAD_DEVICE_LOGGING_API const char* autograd_device_logging_process_role(
    void);
// Writes the record now rather than at exit (for processes that end with
// _exit) and waits for it; 1 when written.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_write_process_record(
    void);
// The record as it stands now, as JSON (schema/process_record.schema.json),
// into `out` (truncated to `size` bytes, NUL terminated); returns its full
// length, 0 when it cannot be built. Not during a pass.
AUTOGRAD_DEVICE_LOGGING_API size_t
autograd_device_logging_record_json(char* out, size_t size);
// Waits until the record's writer has served more than `seen` write
// requests (the first pass, an event, a measured pair, exit), or
// `timeout_ms` passed, and returns how many it has served; the first call
// has the write points served even with no directory set. For a thread of
// the program's own that exports after each write (the Python package's
// OTLP export); never from a thread that runs backward.
AUTOGRAD_DEVICE_LOGGING_API uint64_t
autograd_device_logging_wait_for_record_write(uint64_t seen, int timeout_ms);
// The JSON of the snapshot the last write encoded for its followers (Note
// [Every output is a sink of one writer], output_sinks.h), into `out` as
// autograd_device_logging_record_json does; with `write_now`, a write for
// the followers alone first, waited for (at most 2 s).
AUTOGRAD_DEVICE_LOGGING_API size_t autograd_device_logging_followed_record_json(
    char* out,
    size_t size,
    int write_now);

// --- Around a sampled pass (multithreading_mode.h, pass_census.h) -----------

// The calling thread's multithreading mode (1 on, 0 off), and its setter,
// which returns the mode it replaced.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_multithreading_enabled(
    void);
AUTOGRAD_DEVICE_LOGGING_API int
autograd_device_logging_set_multithreading_enabled(int enabled);
// Asks for the census of the calling thread's next backward pass (Note [A
// census on request]): 1 when asked, 0 when the library is disabled.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_request_pass_census(
    void);
// Withdraws the request and returns the census that pass took: its
// BackwardDeviceClass (0 cpu_only, 1 single_accelerator, 2 accelerator_cpu,
// 3 multi_accelerator), or -1 when none was taken. `devices` receives the
// accelerator devices the pass spanned, comma-separated ("cuda:0,cuda:1"),
// truncated to `size` bytes with a terminating NUL; `nodes` the nodes read.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_take_pass_census(
    char* devices,
    size_t size,
    uint64_t* nodes);

// --- Test seams (device_logging.h) ------------------------------------------

// set_classifier_fault_for_testing: kind 0 removes the fault, 1 throws a
// c10::Error, 2 std::bad_alloc, 3 an exception of no std type. Returns 0, or
// -1 for an unknown kind (then nothing changes).
AUTOGRAD_DEVICE_LOGGING_API int
autograd_device_logging_inject_classifier_fault_for_testing(int kind);
// reset_raised_events_for_testing.
AUTOGRAD_DEVICE_LOGGING_API void
autograd_device_logging_reset_raised_events_for_testing(unsigned events);

} // extern "C"
