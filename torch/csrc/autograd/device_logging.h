#pragma once

// Introspection API of the autograd device-logging patch: whether the patched
// Engine::compute_dependencies is the one libtorch runs, what it has logged,
// and why it is disabled if it is. A C ABI mirror (for ctypes) is declared at
// the bottom.

#include <cstddef>
#include <cstdint>
#include <string>

// The library is built with hidden visibility; this marks its public API.
#define AUTOGRAD_DEVICE_LOGGING_API __attribute__((visibility("default")))

namespace torch::autograd::device_logging {

struct DeviceLoggingStatus {
  // The patched compute_dependencies has run at least once in this process,
  // i.e. libtorch's Engine::execute is bound to it.
  bool hook_has_run = false;
  // BackwardDeviceEvent bits this library has emitted (where torch logs the
  // events itself: the events this process's passes raised).
  uint8_t events_emitted = 0;
  // Nodes whose metadata the classifier has read, summed over all passes.
  uint64_t nodes_inspected = 0;
  // Empty while the classifier is enabled.
  std::string disabled_reason;
  // "major.minor.patch" of the torch headers the library was compiled with.
  std::string built_for_torch;
  // "major.minor.patch" of the libtorch running in this process, or empty if
  // libtorch does not say.
  std::string running_torch;
  // Built against a torch that emits both events itself (2.14 and later):
  // this library then classifies as on earlier releases but logs nothing;
  // events_emitted says which events this process's passes raised.
  bool torch_logs_events = false;
};

AUTOGRAD_DEVICE_LOGGING_API DeviceLoggingStatus device_logging_status();

// Test seam. While set, `fault` is called inside the classifier's error guard
// just before each pass is classified, so a test can make classification fail
// (throw anything) and check that the library disables itself with one
// warning and leaves the backward pass alone. nullptr removes it. Costs one
// relaxed load per classified pass; not meant for production code.
using ClassifierFaultForTesting = void (*)();
AUTOGRAD_DEVICE_LOGGING_API void set_classifier_fault_for_testing(
    ClassifierFaultForTesting fault) noexcept;

// Test seam. Puts the once-per-process logic back to a process in which
// exactly the events in `events_already_emitted` (BackwardDeviceEvent bits)
// have been emitted, so that one process can run the hook on many graphs with
// fresh, or partly fired, state. C10_LOG_API_USAGE_ONCE still logs each event
// only once per process, so such tests read events_emitted. Does nothing once
// the library is disabled. Not meant for production code.
AUTOGRAD_DEVICE_LOGGING_API void reset_emitted_events_for_testing(
    uint8_t events_already_emitted) noexcept;

} // namespace torch::autograd::device_logging

extern "C" {
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_hook_has_run(void);
AUTOGRAD_DEVICE_LOGGING_API unsigned autograd_device_logging_events_emitted(
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
// The test seam above for ctypes: kind 0 removes the fault, 1 throws a
// c10::Error, 2 std::bad_alloc, 3 an exception of no std type. Returns 0, or
// -1 for an unknown kind (then nothing changes).
AUTOGRAD_DEVICE_LOGGING_API int
autograd_device_logging_inject_classifier_fault_for_testing(int kind);
// The path of this library's file, as the dynamic linker loaded it.
AUTOGRAD_DEVICE_LOGGING_API const char* autograd_device_logging_library_path(
    void);
// The per-process record (Note [The per-process record]): the directory to
// write it into at exit, and what the Python package knows of the program and
// of how the library came in.
AUTOGRAD_DEVICE_LOGGING_API void autograd_device_logging_set_report_dir(
    const char* dir);
AUTOGRAD_DEVICE_LOGGING_API void autograd_device_logging_set_record_program(
    const char* program);
AUTOGRAD_DEVICE_LOGGING_API void autograd_device_logging_set_record_activation(
    const char* how);
// The record's `threading_cost` (Note [The per-process record]): a JSON
// object, or nullptr for none; writes the record at once. 1 when written, 0
// when not (no directory, or the write failed), -1 when `json` is not a JSON
// object.
AUTOGRAD_DEVICE_LOGGING_API int
autograd_device_logging_set_record_threading_cost(const char* json);
// The job's name as the record gives it, into `job` (truncated to `size`
// bytes, NUL terminated), when something job-wide names it (not the program
// and host): 1 then, else 0. The threading-cost measurement seeds its choices
// with it, so that every rank of a job samples the same passes.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_job_wide_name(
    char* job,
    size_t size);
// Writes the record now rather than at exit (for processes that end with
// _exit); 1 when written.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_write_process_record(
    void);
// 1 when the events are torch's own (DeviceLoggingStatus::torch_logs_events).
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_torch_logs_events(void);
// 1 when LD_PRELOAD named this library as it was loaded, else 0.
AUTOGRAD_DEVICE_LOGGING_API int autograd_device_logging_loaded_by_preload(void);
// The threading-cost measurement's calls around a sampled pass
// (sampled_pass.h, internal). The calling thread's multithreading mode
// (c10::AutogradState, what the engine reads), and its setter, which returns
// the previous mode (1 on, 0 off).
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
// reset_emitted_events_for_testing above, for ctypes.
AUTOGRAD_DEVICE_LOGGING_API void
autograd_device_logging_reset_emitted_events_for_testing(unsigned events);
}
