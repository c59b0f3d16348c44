// The C ABI of the autograd device-logging patch (device_logging_c_api.h):
// every extern "C" function the library exports, each a wrapper of the C++
// function of the same meaning.

#include <torch/csrc/autograd/device_logging_c_api.h>

#include <torch/csrc/autograd/calling_thread_policy.h>
#include <torch/csrc/autograd/device_logging_state.h>
#include <torch/csrc/autograd/device_stats.h>
#include <torch/csrc/autograd/interposition.h>
#include <torch/csrc/autograd/multithreading_mode.h>
#include <torch/csrc/autograd/pass_census.h>
#include <torch/csrc/autograd/process_identity.h>
#include <torch/csrc/autograd/process_record.h>
#include <torch/csrc/autograd/process_snapshot.h>
#include <torch/csrc/autograd/record_writer.h>

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <string>

namespace device_logging = torch::autograd::device_logging;

extern "C" {

int autograd_device_logging_active(void) {
  return device_logging::device_logging_status().active ? 1 : 0;
}

unsigned autograd_device_logging_events_raised(void) {
  return device_logging::device_logging_status().events_raised;
}

uint64_t autograd_device_logging_nodes_inspected(void) {
  return device_logging::device_logging_status().nodes_inspected;
}

const char* autograd_device_logging_disabled_reason(void) {
  const std::string* reason = device_logging::detail::disabled_reason();
  return reason != nullptr ? reason->c_str() : nullptr;
}

const char* autograd_device_logging_built_for_torch(void) {
  return device_logging::detail::built_for_torch();
}

const char* autograd_device_logging_running_torch(void) {
  return device_logging::detail::running_torch_version().c_str();
}

int autograd_device_logging_inject_classifier_fault_for_testing(int kind) {
  using device_logging::set_classifier_fault_for_testing;
  switch (kind) {
    case 0:
      set_classifier_fault_for_testing(nullptr);
      return 0;
    case 1:
      set_classifier_fault_for_testing(
          [] { TORCH_CHECK(false, "injected classifier fault"); });
      return 0;
    case 2:
      set_classifier_fault_for_testing([] { throw std::bad_alloc(); });
      return 0;
    case 3:
      set_classifier_fault_for_testing([] { throw 42; });
      return 0;
    default:
      return -1;
  }
}

void autograd_device_logging_set_report_dir(const char* dir) {
  device_logging::detail::set_report_dir(dir);
}

void autograd_device_logging_set_record_program(const char* program) {
  device_logging::detail::set_record_program(program);
}

void autograd_device_logging_set_record_activation(const char* how) {
  device_logging::detail::set_record_activation(how);
}

void autograd_device_logging_start_recording_threading_cost(
    double rate,
    uint64_t warmup,
    uint64_t max_pairs,
    uint64_t washout,
    int64_t calling_thread,
    int intra_op_threads) {
  device_logging::detail::start_recording_threading_cost(
      rate, warmup, max_pairs, washout, calling_thread, intra_op_threads);
}

int autograd_device_logging_record_measured_pair(
    int device_class,
    uint64_t off_ns,
    uint64_t on_ns) {
  return device_logging::detail::record_measured_pair(
      device_class, off_ns, on_ns);
}

int autograd_device_logging_record_measurement_count(
    int which,
    const char* reason,
    uint64_t count) {
  if (which != 0 && which != 1) {
    return -1;
  }
  return device_logging::detail::record_measurement_count(
      static_cast<device_logging::detail::MeasurementCount>(which),
      reason,
      count);
}

int autograd_device_logging_job_wide_name(char* job, size_t size) {
  return device_logging::detail::job_wide_name(job, size);
}

const char* autograd_device_logging_process_role(void) {
  return device_logging::detail::process_identity().role.c_str();
}

int autograd_device_logging_write_process_record(void) {
  return device_logging::detail::write_process_record() ? 1 : 0;
}

namespace {

size_t copy_out(const std::string& json, char* out, size_t size) {
  if (out != nullptr && size > 0) {
    const size_t n = std::min(json.size(), size - 1);
    std::memcpy(out, json.data(), n);
    out[n] = '\0';
  }
  return json.size();
}

} // namespace

size_t autograd_device_logging_record_json(char* out, size_t size) {
  return copy_out(device_logging::detail::current_record_json(), out, size);
}

size_t autograd_device_logging_followed_record_json(
    char* out,
    size_t size,
    int write_now) {
  return copy_out(
      write_now != 0 ? device_logging::detail::write_for_followers()
                     : device_logging::detail::last_followed_json(),
      out,
      size);
}

uint64_t autograd_device_logging_wait_for_record_write(
    uint64_t seen,
    int timeout_ms) {
  device_logging::detail::follow_record_writes();
  return device_logging::detail::wait_for_record_write(
      seen, std::chrono::milliseconds(std::max(timeout_ms, 0)));
}

const char* autograd_device_logging_library_path(void) {
  return device_logging::detail::library_file().c_str();
}

int autograd_device_logging_torch_logs_events(void) {
  return device_logging::detail::kTorchLogsTheEvents ? 1 : 0;
}

int autograd_device_logging_loaded_by_preload(void) {
  return device_logging::detail::loaded_by_preload() ? 1 : 0;
}

int autograd_device_logging_set_calling_thread(int enabled) {
  return device_logging::set_calling_thread_backward(enabled != 0) ? 1 : 0;
}

int autograd_device_logging_calling_thread(void) {
  return device_logging::calling_thread_backward() ? 1 : 0;
}

void autograd_device_logging_reset_raised_events_for_testing(unsigned events) {
  device_logging::reset_raised_events_for_testing(static_cast<uint8_t>(events));
}

int autograd_device_logging_stats(uint64_t* out) {
  const auto stats = device_logging::backward_device_stats();
  for (int i = 0; i < device_logging::kNumBackwardDeviceClasses; ++i) {
    out[i] = stats.of_class(i);
  }
  out[device_logging::kNumBackwardDeviceClasses] =
      static_cast<uint64_t>(stats.max_accelerators_in_one_pass);
  return stats.enabled ? 1 : 0;
}

void autograd_device_logging_enable_stats(int enabled) {
  device_logging::enable_backward_device_stats(enabled != 0);
}

void autograd_device_logging_reset_stats(void) {
  device_logging::reset_backward_device_stats();
}

int autograd_device_logging_multithreading_enabled(void) {
  return device_logging::multithreading_enabled() ? 1 : 0;
}

int autograd_device_logging_set_multithreading_enabled(int enabled) {
  return device_logging::set_multithreading_enabled(enabled != 0) ? 1 : 0;
}

int autograd_device_logging_request_pass_census(void) {
  return device_logging::request_pass_census() ? 1 : 0;
}

int autograd_device_logging_take_pass_census(
    char* devices,
    size_t size,
    uint64_t* nodes) {
  using device_logging::PassDeviceCensus;
  PassDeviceCensus census;
  if (!device_logging::take_pass_census(&census)) {
    return -1;
  }
  if (nodes != nullptr) {
    *nodes = census.nodes_inspected;
  }
  if (devices != nullptr && size > 0) {
    std::string text;
    try {
      for (int i = 0; i < census.num_accelerators; ++i) {
        const uint16_t key = census.accelerators[i];
        const c10::Device device(
            static_cast<c10::DeviceType>(key >> 8),
            static_cast<c10::DeviceIndex>(static_cast<int8_t>(key & 0xff)));
        text += (i == 0 ? "" : ",") + device.str();
      }
    } catch (...) {
      text.clear();
    }
    const size_t n = std::min(text.size(), size - 1);
    std::memcpy(devices, text.data(), n);
    devices[n] = '\0';
  }
  return static_cast<int>(census.device_class());
}

} // extern "C"
