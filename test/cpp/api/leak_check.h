#pragma once

// Runs LeakSanitizer's check now, in a build with AddressSanitizer (and
// nothing otherwise): what the test binaries do once their tests are done.

// Note [Leaks are checked while torch's engine threads still run]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// LeakSanitizer's own check runs at exit, after the static destructors, and
// one of those is the autograd engine's: Engine::~Engine (Engine::stop)
// pushes a shutdown task to each device thread (pt_autograd_N) and waits
// until each has decremented the engine's thread count, not until it is
// gone. Such a thread may then still be exiting when the check runs:
// LeakSanitizer skips a thread that its registry no longer lists (ASan's
// thread-specific-data destructor, which unregisters it, has run), while
// glibc frees the thread's second-level pthread_setspecific block (512
// bytes: 32 slots of 16 bytes, made for keys 32 and above; on the engine's
// threads, libgomp's key, set when the thread's start-up sets the OpenMP
// thread count, and one of libtorch_cpu's) only after every destructor has
// run. That block, reachable only from the exiting thread's
// own descriptor, is reported as "Direct leak of 512 byte(s) in 1 object(s)
// allocated from ___pthread_setspecific", which is how a fresh clone's CI
// once failed at the exit of DeviceStats.AreOffByDefault. It is glibc's
// block of one of torch's engine threads, freed a moment later: no leak of
// this project or of torch, and no suppression should hide the real ones
// that such a stack could one day name. So every test binary runs the check
// itself once its tests are done, before any static destructor: then every
// engine thread is alive, parked on its queue, and scanned;
// __lsan_do_leak_check() also turns the exit-time check off, so nothing is
// checked during the shutdown.

#if defined(__SANITIZE_ADDRESS__)
#define ADL_TEST_WITH_LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADL_TEST_WITH_LEAK_CHECK 1
#endif
#endif

#ifdef ADL_TEST_WITH_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

namespace torch::autograd::device_logging::testing {

inline void check_leaks_now() {
#ifdef ADL_TEST_WITH_LEAK_CHECK
  __lsan_do_leak_check();
#endif
}

} // namespace torch::autograd::device_logging::testing
