// The census of a backward pass on request (Note [A census on request],
// pass_census.h).

#include <torch/csrc/autograd/pass_census.h>

#include <torch/csrc/autograd/device_logging_state.h>

#include <mutex>

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
        ~detail::kStateCensusRequested, std::memory_order_relaxed);
  }
}

} // namespace

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
