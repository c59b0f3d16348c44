#pragma once

// The census of one backward pass, on request: the thread that asks gets the
// device class, the accelerator devices and the node count of the next pass
// it starts. The threading-cost measurement
// (python/autograd_device_logging/threading_measurement.py) attributes each
// timed pass to its device class this way. The hook takes the census
// whatever the once-per-process state says, so a pass is classified even
// after both events fired.

#include <torch/csrc/autograd/backward_device_class.h>

namespace torch::autograd::device_logging {

// Note [A census on request]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Engine::execute runs compute_dependencies on the thread that called it, so
// a thread-local request reaches exactly the next pass that thread starts,
// and a nested pass started by a node on another thread never sees it. While
// any thread holds a request, the state word carries kStateCensusRequested:
// every pass then takes the slow path, where one thread-local read decides;
// with no request pending, passes pay nothing for this. A request is rare
// (sampled passes only), so setting and clearing the bit is serialized by a
// mutex rather than made lock-free.

// Asks for the census of the calling thread's next backward pass. False
// when the library is disabled (no census will be taken).
bool request_pass_census() noexcept;

// The census the calling thread's last requested pass took, and withdraws
// the request. False when none was taken (the pass never reached the hook,
// or the library was disabled meanwhile).
bool take_pass_census(PassDeviceCensus* census) noexcept;

namespace detail {

// Called by the hook on a pass's slow path when kStateCensusRequested is
// set: whether the calling thread asked for this pass's census.
bool census_requested_on_this_thread() noexcept;

// Keeps `census` as the calling thread's answer, and clears its request.
void keep_census_on_this_thread(const PassDeviceCensus& census) noexcept;

} // namespace detail

} // namespace torch::autograd::device_logging
