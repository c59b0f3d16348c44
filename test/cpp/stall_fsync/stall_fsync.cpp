// A preloadable shim that stalls every fsync and fdatasync of the process by
// $ADL_TEST_STALL_FSYNC_SECONDS before doing it: storage that answers slowly,
// or (with a large value) a hung mount, for test/test_process_record.py.

#include <dlfcn.h>
#include <time.h>

#include <cerrno>
#include <cstdlib>

namespace {

void stall() {
  const char* value = std::getenv("ADL_TEST_STALL_FSYNC_SECONDS");
  const double seconds = value != nullptr ? std::atof(value) : 0.0;
  if (seconds <= 0) {
    return;
  }
  timespec left{};
  left.tv_sec = static_cast<time_t>(seconds);
  left.tv_nsec = static_cast<long>((seconds - left.tv_sec) * 1e9);
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

} // namespace

extern "C" int fsync(int fd) {
  stall();
  static const auto real = next<int (*)(int)>("fsync");
  return real(fd);
}

extern "C" int fdatasync(int fd) {
  stall();
  static const auto real = next<int (*)(int)>("fdatasync");
  return real(fd);
}
