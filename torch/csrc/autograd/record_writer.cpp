// The thread that writes the per-process record (Note [The record is written
// off the backward path], record_writer.h).

#include <torch/csrc/autograd/record_writer.h>

#include <torch/csrc/autograd/device_logging_state.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

namespace torch::autograd::device_logging::detail {

namespace {

struct Writer {
  // RecordOccasion bits asked for and not yet taken by the thread.
  std::atomic<uint32_t> pending{0};
  // Requests made; the thread serves every request up to the count it read
  // before taking `pending`.
  std::atomic<uint64_t> requested{0};
  // The process whose writer thread was started (another one after fork()).
  std::atomic<pid_t> started_in{0};
  // Exit gave up waiting (stop_record_writer()).
  std::atomic<bool> stopped{false};
  // Note [The textfile is refreshed on an interval]; 0: none.
  std::atomic<int64_t> refresh_ms{0};
  sem_t wake;
  // Guards `completed` and `last_written`; held only between writes, never
  // during one, and only by the writer thread and the threads that wait.
  pthread_mutex_t mutex;
  pthread_cond_t done;
  uint64_t completed = 0;
  bool last_written = false;

  Writer() {
    reset();
  }

  // Also the child's fresh state after fork(): the thread was not copied.
  void reset() {
    pending.store(0, std::memory_order_relaxed);
    requested.store(0, std::memory_order_relaxed);
    stopped.store(false, std::memory_order_relaxed);
    completed = 0;
    last_written = false;
    sem_init(&wake, /*pshared=*/0, 0);
    pthread_mutex_init(&mutex, nullptr);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&done, &attr);
    pthread_condattr_destroy(&attr);
  }
};

// Leaked: the exit handler uses it after static destructors may have run.
// Built on first use, which is arming the record (process_record.cpp), at
// load or from the Python package, never inside a pass.
Writer& writer() {
  static Writer* const w = new Writer();
  return *w;
}

void reset_in_child() {
  writer().reset();
}

// `clock`'s time `limit` from now: CLOCK_MONOTONIC for
// pthread_cond_timedwait on Writer::done, CLOCK_REALTIME for sem_timedwait.
timespec deadline_after(
    std::chrono::milliseconds limit,
    clockid_t clock = CLOCK_MONOTONIC) noexcept {
  timespec deadline{};
  clock_gettime(clock, &deadline);
  const auto ns = deadline.tv_nsec +
      std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count();
  deadline.tv_sec += static_cast<time_t>(ns / 1000000000);
  deadline.tv_nsec = static_cast<long>(ns % 1000000000);
  return deadline;
}

// Waits for a request; false when the refresh interval (Note [The textfile
// is refreshed on an interval]) passed first.
bool wait_for_request(Writer& w, timespec& next_refresh) {
  for (;;) {
    const int64_t refresh_ms = w.refresh_ms.load(std::memory_order_relaxed);
    if (refresh_ms <= 0) {
      if (sem_wait(&w.wake) == 0) {
        return true;
      }
      continue; // EINTR
    }
    if (next_refresh.tv_sec == 0) {
      next_refresh =
          deadline_after(std::chrono::milliseconds(refresh_ms), CLOCK_REALTIME);
    }
    if (sem_timedwait(&w.wake, &next_refresh) == 0) {
      return true;
    }
    if (errno == ETIMEDOUT) {
      next_refresh =
          deadline_after(std::chrono::milliseconds(refresh_ms), CLOCK_REALTIME);
      return false;
    }
  }
}

void* run_writer(void*) {
  pthread_setname_np(pthread_self(), "adl_record");
  Writer& w = writer();
  timespec next_refresh{};
  for (;;) {
    const bool requested = wait_for_request(w, next_refresh);
    if (w.stopped.load(std::memory_order_acquire)) {
      return nullptr;
    }
    if (!requested) {
      write_sinks(kRecordTextfileRefresh);
      continue;
    }
    const uint64_t served = w.requested.load(std::memory_order_acquire);
    const uint32_t occasions = w.pending.exchange(0, std::memory_order_acq_rel);
    bool written = false;
    if (occasions & kRecordAtExit) {
      // The exit write is the last: no refresh may undo what it says.
      w.refresh_ms.store(0, std::memory_order_relaxed);
    }
    if (occasions != 0) {
      written = write_sinks(occasions);
    }
    pthread_mutex_lock(&w.mutex);
    w.completed = std::max(w.completed, served);
    if (occasions != 0) {
      w.last_written = written;
    }
    pthread_cond_broadcast(&w.done);
    pthread_mutex_unlock(&w.mutex);
  }
}

// Starts this process's writer thread unless it runs already. False (after
// one warning) when it cannot be started.
bool ensure_running(Writer& w) noexcept {
  const pid_t self = getpid();
  pid_t seen = w.started_in.load(std::memory_order_acquire);
  if (seen == self) {
    return true;
  }
  if (!w.started_in.compare_exchange_strong(seen, self)) {
    return seen == self; // another thread of this process started it
  }
  static const bool registered =
      (pthread_atfork(nullptr, nullptr, &reset_in_child), true);
  (void)registered;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  // The thread inherits this mask: every signal stays with the program's
  // own threads.
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  pthread_t thread;
  const int error = pthread_create(&thread, &attr, &run_writer, nullptr);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  pthread_attr_destroy(&attr);
  if (error != 0) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      warn_to_stderr(
          std::string("autograd_device_logging: cannot start the thread that "
                      "writes this process's record: ") +
          std::strerror(error));
    }
    return false;
  }
  return true;
}

uint64_t post(Writer& w, RecordOccasion occasion) noexcept {
  w.pending.fetch_or(occasion, std::memory_order_acq_rel);
  const uint64_t ticket =
      w.requested.fetch_add(1, std::memory_order_acq_rel) + 1;
  sem_post(&w.wake);
  return ticket;
}

} // namespace

void prepare_record_writer() noexcept {
  (void)writer();
}

void request_record_write(RecordOccasion occasion) noexcept {
  Writer& w = writer();
  if (w.stopped.load(std::memory_order_relaxed)) {
    return;
  }
  ensure_running(w);
  post(w, occasion);
}

RecordWait write_record_and_wait(
    RecordOccasion occasion,
    std::chrono::milliseconds limit) noexcept {
  Writer& w = writer();
  if (w.stopped.load(std::memory_order_relaxed) || !ensure_running(w)) {
    return RecordWait::kFailed;
  }
  const uint64_t ticket = post(w, occasion);
  const timespec deadline = deadline_after(limit);
  pthread_mutex_lock(&w.mutex);
  while (w.completed < ticket) {
    if (pthread_cond_timedwait(&w.done, &w.mutex, &deadline) == ETIMEDOUT) {
      break;
    }
  }
  const RecordWait result = w.completed < ticket ? RecordWait::kTimedOut
      : w.last_written                           ? RecordWait::kWritten
                                                 : RecordWait::kFailed;
  pthread_mutex_unlock(&w.mutex);
  return result;
}

uint64_t wait_for_record_write(
    uint64_t seen,
    std::chrono::milliseconds limit) noexcept {
  Writer& w = writer();
  const timespec deadline = deadline_after(limit);
  pthread_mutex_lock(&w.mutex);
  while (w.completed <= seen) {
    if (pthread_cond_timedwait(&w.done, &w.mutex, &deadline) == ETIMEDOUT) {
      break;
    }
  }
  const uint64_t completed = w.completed;
  pthread_mutex_unlock(&w.mutex);
  return completed;
}

void set_textfile_refresh_interval(
    std::chrono::milliseconds interval) noexcept {
  writer().refresh_ms.store(interval.count(), std::memory_order_relaxed);
}

void stop_record_writer() noexcept {
  writer().stopped.store(true, std::memory_order_release);
}

} // namespace torch::autograd::device_logging::detail
