// What the threading-cost measurement needs around a sampled pass
// (sampled_pass.h): the thread's multithreading mode, and the census of the
// pass on request (Note [A census on request]).

#include <torch/csrc/autograd/sampled_pass.h>

#include <torch/csrc/autograd/device_logging.h>
#include <torch/csrc/autograd/device_logging_state.h>

#include <c10/core/AutogradState.h>
#include <c10/core/Device.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

namespace torch::autograd::device_logging {

namespace {

struct CensusSlot {
  bool requested = false;
  bool taken = false;
  PassDeviceCensus census;
};

thread_local CensusSlot slot;

// Requests outstanding in the process; the state bit is set while it is not
// zero. Leaked: a thread may withdraw its request during exit.
std::mutex& requests_mutex() {
  static auto* m = new std::mutex();
  return *m;
}
int outstanding_requests = 0;

void withdraw_request() noexcept {
  if (!slot.requested) {
    return;
  }
  slot.requested = false;
  std::lock_guard<std::mutex> lock(requests_mutex());
  if (--outstanding_requests == 0) {
    detail::state.fetch_and(
        static_cast<uint8_t>(~detail::kStateCensusRequested),
        std::memory_order_relaxed);
  }
}

} // namespace

bool multithreading_enabled() noexcept {
  return c10::AutogradState::get_tls_state().get_multithreading_enabled();
}

bool set_multithreading_enabled(bool enabled) noexcept {
  c10::AutogradState& autograd_state = c10::AutogradState::get_tls_state();
  const bool previous = autograd_state.get_multithreading_enabled();
  autograd_state.set_multithreading_enabled(enabled);
  return previous;
}

bool request_pass_census() noexcept {
  if (detail::state.load(std::memory_order_relaxed) & detail::kStateDisabled) {
    return false;
  }
  slot.taken = false;
  if (!slot.requested) {
    slot.requested = true;
    std::lock_guard<std::mutex> lock(requests_mutex());
    if (outstanding_requests++ == 0) {
      detail::state.fetch_or(
          detail::kStateCensusRequested, std::memory_order_relaxed);
    }
  }
  return true;
}

bool take_pass_census(PassDeviceCensus* census) noexcept {
  withdraw_request();
  const bool taken = slot.taken;
  slot.taken = false;
  if (taken && census != nullptr) {
    *census = slot.census;
  }
  return taken;
}

namespace detail {

bool census_requested_on_this_thread() noexcept {
  return slot.requested;
}

void keep_census_on_this_thread(const PassDeviceCensus& census) noexcept {
  slot.census = census;
  slot.taken = true;
  withdraw_request();
}

} // namespace detail

} // namespace torch::autograd::device_logging

extern "C" {

int autograd_device_logging_multithreading_enabled(void) {
  return torch::autograd::device_logging::multithreading_enabled() ? 1 : 0;
}

int autograd_device_logging_set_multithreading_enabled(int enabled) {
  return torch::autograd::device_logging::set_multithreading_enabled(
             enabled != 0)
      ? 1
      : 0;
}

int autograd_device_logging_request_pass_census(void) {
  return torch::autograd::device_logging::request_pass_census() ? 1 : 0;
}

int autograd_device_logging_take_pass_census(
    char* devices,
    size_t size,
    uint64_t* nodes) {
  using torch::autograd::device_logging::PassDeviceCensus;
  PassDeviceCensus census;
  if (!torch::autograd::device_logging::take_pass_census(&census)) {
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
