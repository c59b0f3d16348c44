// Reading one record file for the fleet report's extensions
// (record_files.cpp's read_files, record_decoding.cpp's keep_records): what
// record_reader.read_record does in Python, without a Python object. Include
// after <Python.h>.
#pragma once

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
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

// Reads the file `name` of `directory_fd` into `buffer`, which holds the
// largest record and one byte more.
inline RecordFile read_record_file(
    int directory_fd,
    const char* name,
    std::vector<char>& buffer) {
  RecordFile f;
  // Nothing in a shared directory is followed or waited on (read_record's
  // docstring): no link, and no blocking open of a FIFO.
  const int fd = openat(
      directory_fd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    f.reason = errno == ELOOP ? "symbolic link" : "unreadable";
    return f;
  }
  if (fstat(fd, &f.st) != 0) {
    close(fd);
    f.reason = "unreadable";
    return f;
  }
  if (!S_ISREG(f.st.st_mode)) {
    close(fd);
    f.reason = "not a regular file";
    return f;
  }
  // Note [A file is read to the size its key says]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A read that brings at least the st_size fstat gave is the file its key
  // (Note [The files' index], file_index.py) describes, so reading stops
  // there instead of asking again for the end of the file: one system call
  // of four, about a tenth of a file's reading. A file that grew meanwhile
  // has another key at the next run, which reads it again.
  bool failed = false;
  const size_t expected = size_t(f.st.st_size);
  while (f.filled < buffer.size()) {
    const ssize_t n =
        read(fd, buffer.data() + f.filled, buffer.size() - f.filled);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      failed = n < 0;
      break;
    }
    f.filled += size_t(n);
    if (expected > 0 && f.filled >= expected) {
      break;
    }
  }
  close(fd);
  if (failed) {
    f.reason = "unreadable";
    return f;
  }
  f.keyed = true;
  if (f.filled == buffer.size()) {
    // More than the largest record (the buffer holds one byte more).
    f.reason = "too large";
  }
  return f;
}

// A file's modification time in ns, as os.stat's st_mtime_ns.
inline long long mtime_ns_of(const struct stat& st) {
  return static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL +
      static_cast<long long>(st.st_mtim.tv_nsec);
}

} // namespace autograd_device_logging_report
