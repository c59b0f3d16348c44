// The leak check runs while threads that exit during exit still run (Note
// [Leaks are checked while torch's engine threads still run],
// leak_check.h): a model of the autograd engine's exit-time shutdown, which
// LeakSanitizer's own exit-time check would report as a leak of glibc's
// second-level pthread_setspecific block.

#include "leak_check.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace {

// A thread like the engine's pt_autograd_N: it sets a thread-specific value
// under a key of 32 or above (libgomp's, on the engine's threads), which
// makes glibc allocate a second-level block, then parks until exit tells it
// to end. Its last thread-specific destructor then takes a while, as
// destructors of a real thread may: the window in which LeakSanitizer no
// longer lists the thread but glibc has not freed its block yet.
pthread_key_t slow_key;
pthread_key_t high_key;
std::atomic<int> destructor_rounds{0};
std::atomic<bool> exiting{false};
std::mutex mutex;
std::condition_variable told;
bool end_now = false;

void slow_destructor(void* value) {
  // glibc runs up to four rounds of destructors, and ASan unregisters the
  // thread in its last: take this one's time after that.
  if (destructor_rounds.fetch_add(1) + 1 < 4) {
    pthread_setspecific(slow_key, value);
    return;
  }
  exiting.store(true);
  sleep(1);
}

void* park(void*) {
  pthread_setspecific(high_key, reinterpret_cast<void*>(1));
  pthread_setspecific(slow_key, reinterpret_cast<void*>(1));
  std::unique_lock<std::mutex> lock(mutex);
  told.wait(lock, [] { return end_now; });
  return nullptr;
}

// Like Engine::~Engine: ends the thread at exit and waits only until it has
// begun to exit.
struct EndsTheThreadAtExit {
  ~EndsTheThreadAtExit() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      end_now = true;
    }
    told.notify_all();
    while (!exiting.load()) {
      usleep(1000);
    }
  }
};

TEST(LeakCheck, RunsBeforeThreadsEndAtExit) {
#ifndef ADL_TEST_WITH_LEAK_CHECK
  GTEST_SKIP() << "LeakSanitizer runs in the AddressSanitizer build only";
#endif
  ASSERT_EQ(pthread_key_create(&slow_key, &slow_destructor), 0);
  // Keys up to 31 live in the thread descriptor itself.
  do {
    ASSERT_EQ(pthread_key_create(&high_key, nullptr), 0);
  } while (high_key < 32);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, nullptr, &park, nullptr), 0);
  ASSERT_EQ(pthread_detach(thread), 0);
  // Constructed after the test binary's statics, so destroyed before them,
  // as torch's default engine is.
  static EndsTheThreadAtExit ends_the_thread_at_exit;
}

} // namespace
