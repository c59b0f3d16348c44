// The CRC-32 the report's cache keeps of its files and parts (zlib's, the
// polynomial of gzip and PNG), from libdeflate where the machine has it
// (Note [The cache's CRC-32 from libdeflate]). Include after <Python.h>.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>

namespace autograd_device_logging_report {

// Note [The cache's CRC-32 from libdeflate]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every cache file is checked whole by its CRC-32 when it is loaded and
// when it is written, and every record's part when it is kept and when it
// is counted (Note [A record's part, kept], report_cache.py): at 10^6
// records, the 130 MB file and 125 MB of parts. zlib's crc32 (1.2.13, as
// Python's zlib module and the decoding extension link it) does about 2 GB
// a second on this project's 2-core machine, a quarter of a second of a
// cold run's CPU and 0.06 s of a re-run's, on a core the listing needs
// (Note [The keys are checked while listing], file_index.cpp). libdeflate,
// a well-kept library that Debian ships (libdeflate0), computes the same
// CRC-32 with the processor's carry-less multiply, about 8 GB a second
// here. So it is loaded at run time where the machine has it (no header or
// link is needed to build: its libdeflate_crc32 is a stable C function),
// and zlib's does the same work elsewhere: the same values either way, so
// a cache written with one is read with the other. test_report_cache.py
// holds the two equal.
using Crc32Function = uint32_t (*)(uint32_t, const void*, size_t);

// libdeflate's libdeflate_crc32, or nullptr where it cannot be loaded.
inline Crc32Function libdeflate_crc32() {
  static const Crc32Function found = []() -> Crc32Function {
    void* library = dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      return nullptr;
    }
    // Kept loaded for the process's life.
    return reinterpret_cast<Crc32Function>(dlsym(library, "libdeflate_crc32"));
  }();
  return found;
}

} // namespace autograd_device_logging_report
