// Reading record files for the fleet report's extensions (record_files.cpp's
// read_files, record_decoding.cpp's keep_records): what record_reader's
// read_record does in Python, file by file, without a Python object. Include
// after <Python.h>.
#pragma once

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace autograd_device_logging_report {

// What reading a record file found.
struct RecordFile {
  // Why it was not read, as record_reader names it; nullptr: read.
  const char* reason = nullptr;
  // Whether `st` holds the file's key: a file read, or one too large.
  bool keyed = false;
  struct stat st {};
  // The bytes read into the buffer.
  size_t filled = 0;
};

// Opens the file `name` of `directory_fd` and fstat()s it into `f.st`: its
// descriptor, or -1 with `f.reason` set where it is not read.
inline int open_record_file(int directory_fd, const char* name, RecordFile& f) {
  // Nothing in a shared directory is followed or waited on (read_record's
  // docstring): no link, and no blocking open of a FIFO.
  const int fd = openat(
      directory_fd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    f.reason = errno == ELOOP ? "symbolic link" : "unreadable";
    return -1;
  }
  if (fstat(fd, &f.st) != 0) {
    close(fd);
    f.reason = "unreadable";
    return -1;
  }
  if (!S_ISREG(f.st.st_mode)) {
    close(fd);
    f.reason = "not a regular file";
    return -1;
  }
  return fd;
}

// Reads the opened file `fd` into `buffer` (which holds the largest record
// and one byte more) from `f.filled` on, and closes it.
inline void
read_opened_record_file(int fd, RecordFile& f, std::vector<char>& buffer) {
  // Note [A file is read to the size its key says]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A read that brings at least the st_size fstat gave is the file its key
  // (Note [The files' index], file_index.py) describes, so reading stops
  // there instead of asking again for the end of the file: one system call
  // of four, about a tenth of a file's reading. A file that grew meanwhile
  // has another key at the next run, which reads it again.
  bool failed = false;
  const size_t expected = size_t(f.st.st_size);
  while (f.filled < buffer.size() && !(expected > 0 && f.filled >= expected)) {
    const ssize_t n = pread(
        fd,
        buffer.data() + f.filled,
        buffer.size() - f.filled,
        off_t(f.filled));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      failed = n < 0;
      break;
    }
    f.filled += size_t(n);
  }
  close(fd);
  if (failed) {
    f.reason = "unreadable";
    return;
  }
  f.keyed = true;
  if (f.filled == buffer.size()) {
    // More than the largest record (the buffer holds one byte more).
    f.reason = "too large";
  }
}

// Note [A file not in memory is read later]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A record the page cache does not hold waits for the disk: a read of a
// few KB that takes a tenth of a millisecond or more, while reading and
// decoding a record in memory takes a few microseconds. Read one after
// another, such files are waited for one at a time (two, with two reading
// processes), so a fleet the page cache holds only part of (the kernel
// takes back what was not used lately, and a daily report's records were
// written a day ago) was read at the speed of the disk's latency, not of
// the disk. So each file's first read asks for what is in memory only
// (preadv2 with RWF_NOWAIT). A file not there is asked of the disk at once
// (POSIX_FADV_WILLNEED starts its reading and does not wait) and read
// later, kept open, up to kMostReadLater files: the files after it are read
// meanwhile, and the disk has up to that many reads to do at once (at 10^5
// records none in memory, on 2 cores: 2.4 s with 16, 1.9 with 64, 1.8 with
// 256, 5.5 read as they come). Where the files kept open leave no
// descriptor for the next (EMFILE, a low `ulimit -n`), the first of them is
// read and closed before it. What is read is the same either way, and the
// callers take a chunk's files in any order (a file's outcome names it).
// Where the kernel or file system has no RWF_NOWAIT, and in the Python path
// (record_reader.read_record), every file is read as it comes, as before.
constexpr size_t kMostReadLater = 256;

// Files this process read later (Note [A file not in memory is read
// later]), for its tests.
inline size_t& files_read_later() {
  static size_t count = 0;
  return count;
}

// Reads the files name_of(i), i in [0, count), of `directory_fd` into
// `buffer` (which holds the largest record and one byte more), calling
// on_file(i, f) for each once, with its bytes in `buffer`, in an order of
// its own (Note [A file not in memory is read later]); stops where on_file
// returns false, and gives that back.
template <typename NameOf, typename OnFile>
bool read_record_files(
    int directory_fd,
    size_t count,
    const NameOf& name_of,
    std::vector<char>& buffer,
    const OnFile& on_file) {
  struct Later {
    size_t i;
    int fd;
    RecordFile f;
  };
  // Where a callback fails or throws, the files still open are closed.
  struct ReadLater {
    Later files[kMostReadLater];
    size_t first = 0;
    size_t size = 0;
    ~ReadLater() {
      for (; size > 0; --size, first = (first + 1) % kMostReadLater) {
        close(files[first].fd);
      }
    }
  } later;
  const auto read_first_later = [&]() {
    Later& l = later.files[later.first];
    const int fd = l.fd;
    later.first = (later.first + 1) % kMostReadLater;
    --later.size;
    read_opened_record_file(fd, l.f, buffer);
    return on_file(l.i, l.f);
  };
#ifdef RWF_NOWAIT
  bool nowait = true;
#endif
  for (size_t i = 0; i < count; ++i) {
    RecordFile f;
    int fd = open_record_file(directory_fd, name_of(i), f);
    while (fd < 0 && (errno == EMFILE || errno == ENFILE) && later.size > 0) {
      // The files kept open took the last descriptors this process may
      // have: one is read (and closed) first, then this one is opened.
      if (!read_first_later()) {
        return false;
      }
      f = RecordFile();
      fd = open_record_file(directory_fd, name_of(i), f);
    }
    if (fd < 0) {
      if (!on_file(i, f)) {
        return false;
      }
      continue;
    }
#ifdef RWF_NOWAIT
    if (nowait && f.st.st_size > 0) {
      struct iovec into = {buffer.data(), buffer.size()};
      const ssize_t n = preadv2(fd, &into, 1, 0, RWF_NOWAIT);
      if (n > 0) {
        f.filled = size_t(n);
      } else if (n < 0 && errno == EAGAIN) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
        if (later.size == kMostReadLater && !read_first_later()) {
          close(fd);
          return false;
        }
        later.files[(later.first + later.size) % kMostReadLater] = {i, fd, f};
        ++later.size;
        ++files_read_later();
        continue;
      } else if (
          n < 0 &&
          (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS)) {
        // No RWF_NOWAIT here: every file is read as it comes from now on.
        nowait = false;
      }
      // Otherwise (an empty read, a failure) the reading below tries again
      // and says what it finds.
    }
#endif
    read_opened_record_file(fd, f, buffer);
    if (!on_file(i, f)) {
      return false;
    }
  }
  while (later.size > 0) {
    if (!read_first_later()) {
      return false;
    }
  }
  return true;
}

// A file's modification time in ns, as os.stat's st_mtime_ns.
inline long long mtime_ns_of(const struct stat& st) {
  return static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL +
      static_cast<long long>(st.st_mtim.tv_nsec);
}

} // namespace autograd_device_logging_report
