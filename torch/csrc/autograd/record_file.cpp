// Replacing one file in a directory that other users can write (Note
// [Writing into a directory that others can write], record_file.h).

#include <torch/csrc/autograd/record_file.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace torch::autograd::device_logging::detail {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what);
}

[[noreturn]] void fail_errno(const std::string& what) {
  fail(what + ": " + std::strerror(errno));
}

// A descriptor that closes itself.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(other.fd_) {
    other.fd_ = -1;
  }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      close();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  int get() const {
    return fd_;
  }
  // Closes now, reporting close()'s result (a deferred write error).
  bool close() {
    const int fd = fd_;
    fd_ = -1;
    return fd < 0 || ::close(fd) == 0;
  }

 private:
  int fd_;
};

// Opens the directory `name` relative to `at` (AT_FDCWD for a path) without
// following a link in its last component, creating it first (mode 1777:
// users share it, sticky like /tmp) when it is missing. `shown` names it in
// messages.
Fd open_shared_directory(
    int at,
    const std::string& name,
    const std::string& shown) {
  const bool created = ::mkdirat(at, name.c_str(), 0700) == 0;
  if (!created && errno != EEXIST) {
    fail_errno("cannot create " + shown);
  }
  Fd fd(::openat(
      at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    struct stat link {};
    if ((error == ELOOP || error == ENOTDIR) &&
        ::fstatat(at, name.c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(link.st_mode)) {
      fail(shown + " is a symbolic link; refusing to write through it");
    }
    errno = error;
    fail_errno("cannot open " + shown);
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    fail_errno("cannot stat " + shown);
  }
  // Only a directory this call made, and still ours, is given the shared
  // mode (mkdirat's mode is masked by the umask); an existing one keeps its
  // own.
  if (created && info.st_uid == ::geteuid()) {
    ::fchmod(fd.get(), 01777);
  }
  return fd;
}

// The sticky bit keeps other users from renaming or removing our entries.
void check_temporaries_directory(int tmp_fd, const std::string& shown) {
  struct stat info {};
  if (::fstat(tmp_fd, &info) != 0) {
    fail_errno("cannot stat " + shown);
  }
  if (info.st_uid != ::geteuid() && !(info.st_mode & S_ISVTX)) {
    fail(
        shown + " belongs to another user (uid " + std::to_string(info.st_uid) +
        ") and is not sticky; refusing to write there");
  }
}

// 64 random bits as hex: the temporary's name cannot be guessed.
std::string random_suffix() {
  static thread_local std::mt19937_64 generator([] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device() ^
        static_cast<uint64_t>(::getpid()) ^
        static_cast<uint64_t>(std::time(nullptr));
  }());
  char text[17];
  std::snprintf(
      text,
      sizeof(text),
      "%016llx",
      static_cast<unsigned long long>(generator()));
  return text;
}

// Removes this user's temporaries whose writer cannot finish (record_file.h).
void remove_stale_temporaries(int tmp_fd, const std::string& stale_prefix) {
  const int listing_fd = ::dup(tmp_fd);
  if (listing_fd < 0) {
    return;
  }
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return;
  }
  const std::time_t now = std::time(nullptr);
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".tmp") != 0) {
      continue;
    }
    struct stat info {};
    if (::fstatat(tmp_fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(info.st_mode) || info.st_uid != ::geteuid()) {
      continue; // not ours to remove
    }
    bool stale = now - info.st_mtime > 24 * 3600;
    if (!stale && name.compare(0, stale_prefix.size(), stale_prefix) == 0) {
      const long long pid =
          std::strtoll(name.c_str() + stale_prefix.size(), nullptr, 10);
      stale =
          pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    }
    if (stale) {
      ::unlinkat(tmp_fd, name.c_str(), 0);
    }
  }
  ::closedir(listing);
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      fail_errno("cannot write the record");
    }
    done += static_cast<size_t>(n);
  }
}

} // namespace

void replace_file_in_shared_directory(
    const std::string& dir,
    const std::string& name,
    const std::string& text,
    const std::string& temporary_prefix,
    const std::string& stale_prefix,
    TemporaryPlace place) {
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  if (!parent.empty()) {
    std::error_code ignored; // a missing parent fails at DIR below
    std::filesystem::create_directories(parent, ignored);
  }
  const Fd dir_fd = open_shared_directory(AT_FDCWD, dir, dir);
  const bool beside = place == TemporaryPlace::kBesideTheFile;
  const std::string tmp_shown = beside ? dir : dir + "/.tmp";
  const Fd tmp_dir =
      beside ? Fd() : open_shared_directory(dir_fd.get(), ".tmp", tmp_shown);
  const Fd& tmp_fd = beside ? dir_fd : tmp_dir;
  check_temporaries_directory(tmp_fd.get(), tmp_shown);
  remove_stale_temporaries(tmp_fd.get(), stale_prefix);

  std::string temporary;
  Fd file;
  for (int attempt = 0; attempt < 8 && file.get() < 0; ++attempt) {
    temporary = temporary_prefix + "." + random_suffix() + ".tmp";
    file = Fd(::openat(
        tmp_fd.get(),
        temporary.c_str(),
        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
        0644));
    if (file.get() < 0 && errno != EEXIST) {
      fail_errno("cannot create a temporary in " + tmp_shown);
    }
  }
  if (file.get() < 0) {
    fail("cannot create a temporary in " + tmp_shown + ": names taken");
  }
  try {
    write_all(file.get(), text);
    if (::fsync(file.get()) != 0) {
      fail_errno("cannot fsync the record");
    }
    if (!file.close()) {
      fail_errno("cannot close the record");
    }
    if (::renameat(
            tmp_fd.get(), temporary.c_str(), dir_fd.get(), name.c_str()) != 0) {
      fail_errno("cannot rename the record to " + dir + "/" + name);
    }
  } catch (...) {
    ::unlinkat(tmp_fd.get(), temporary.c_str(), 0);
    throw;
  }
  ::fsync(dir_fd.get());
}

} // namespace torch::autograd::device_logging::detail
