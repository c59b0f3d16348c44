// The fleet report's reading of record files, in compiled code (Note
// [Reading the files in compiled code], file_index.py), and its index of
// them (file_index.cpp). A CPython
// extension of its own: the report loads neither torch nor the library, so
// this links neither, and it needs nothing beyond POSIX and Python's headers.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "file_index.h"
#include "job_finishing.h"
#include "part_checksum.h"
#include "python_reference.h"
#include "record_counting.h"
#include "report_assembly.h"
#include "record_file_reading.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <vector>

namespace {

using autograd_device_logging_report::files_read_later;
using autograd_device_logging_report::mtime_ns_of;
using autograd_device_logging_report::read_record_files;
using autograd_device_logging_report::RecordFile;
using autograd_device_logging_report::Ref;

// A file's key, as record_reader's Python path makes it from os.stat:
// (st_size, st_mtime_ns, st_ino).
PyObject* key_of(const struct stat& st) {
  return Py_BuildValue(
      "(LLK)",
      static_cast<long long>(st.st_size),
      mtime_ns_of(st),
      static_cast<unsigned long long>(st.st_ino));
}

bool same_key(PyObject* key, const struct stat& st) {
  const Ref now(key_of(st));
  if (now.p == nullptr) {
    PyErr_Clear();
    return false;
  }
  const int equal = PyObject_RichCompareBool(key, now.p, Py_EQ);
  if (equal < 0) {
    PyErr_Clear();
    return false;
  }
  return equal == 1;
}

// (key or None, reason): a file that is not read, as record_reader names it.
PyObject* skipped(PyObject* key, const char* reason) {
  return Py_BuildValue("(Os)", key == nullptr ? Py_None : key, reason);
}

// Whether the file `name` still has the key of `held`, a cache entry (key,
// part): then its part is used as it is (Note [The report's cache]).
bool still_held(int directory_fd, const char* name, PyObject* held) {
  struct stat st;
  return fstatat(directory_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISREG(st.st_mode) && same_key(PyTuple_GET_ITEM(held, 0), st);
}

// The outcome of a file read into `buffer` (read_files' docstring); nullptr
// with an exception set only when the interpreter is out of memory.
PyObject* outcome_of(const RecordFile& f, const std::vector<char>& buffer) {
  if (!f.keyed) {
    return skipped(nullptr, f.reason);
  }
  const Ref key(key_of(f.st));
  if (key.p == nullptr) {
    return nullptr;
  }
  if (f.reason != nullptr) {
    return skipped(key.p, f.reason);
  }
  const Ref data(
      PyBytes_FromStringAndSize(buffer.data(), Py_ssize_t(f.filled)));
  if (data.p == nullptr) {
    return nullptr;
  }
  return PyTuple_Pack(2, key.p, data.p);
}

PyObject* read_files(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_SetString(
        PyExc_TypeError, "read_files(directory_fd, names, held, max_bytes)");
    return nullptr;
  }
  const int directory_fd = PyObject_AsFileDescriptor(args[0]);
  if (directory_fd < 0) {
    return nullptr;
  }
  PyObject* names = args[1];
  PyObject* held = args[2];
  if (!PyList_Check(names) || (held != Py_None && !PyDict_Check(held))) {
    PyErr_SetString(
        PyExc_TypeError, "names must be a list, held a dict or None");
    return nullptr;
  }
  const Py_ssize_t max_bytes = PyLong_AsSsize_t(args[3]);
  if (max_bytes < 0) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "max_bytes must not be negative");
    }
    return nullptr;
  }
  const Py_ssize_t count = PyList_GET_SIZE(names);
  Ref out(PyList_New(count));
  if (out.p == nullptr) {
    return nullptr;
  }
  Py_ssize_t reused_count = 0;
  try {
    // The files to read, after those whose held entry is used as it is.
    std::vector<Py_ssize_t> to_read;
    for (Py_ssize_t i = 0; i < count; ++i) {
      PyObject* name = PyList_GET_ITEM(names, i);
      if (!PyBytes_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "each name must be bytes");
        return nullptr;
      }
      if (strlen(PyBytes_AS_STRING(name)) != size_t(PyBytes_GET_SIZE(name))) {
        PyErr_SetString(PyExc_ValueError, "embedded null byte");
        return nullptr;
      }
      PyObject* entry = nullptr;
      if (held != Py_None) {
        entry = PyDict_GetItemWithError(held, name); // borrowed
        if (entry == nullptr && PyErr_Occurred()) {
          return nullptr;
        }
        if (entry != nullptr &&
            (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2)) {
          entry = nullptr; // not an entry the cache writes: read the file
        }
      }
      if (entry != nullptr &&
          still_held(directory_fd, PyBytes_AS_STRING(name), entry)) {
        ++reused_count;
        Py_INCREF(entry);
        PyList_SET_ITEM(out.p, i, entry);
      } else {
        to_read.push_back(i);
      }
    }
    std::vector<char> buffer(size_t(max_bytes) + 1);
    // Each outcome in its name's place, whatever order the files are read
    // in (Note [A file not in memory is read later],
    // record_file_reading.h).
    const bool whole = read_record_files(
        directory_fd,
        to_read.size(),
        [names, &to_read](size_t k) {
          return PyBytes_AS_STRING(PyList_GET_ITEM(names, to_read[k]));
        },
        buffer,
        [&out, &to_read, &buffer](size_t k, const RecordFile& f) {
          PyObject* result = outcome_of(f, buffer);
          if (result == nullptr) {
            return false;
          }
          PyList_SET_ITEM(out.p, to_read[k], result);
          return true;
        });
    if (!whole) {
      return nullptr;
    }
  } catch (const std::bad_alloc&) {
    // No C++ exception crosses into the interpreter.
    return PyErr_NoMemory();
  }
  return Py_BuildValue("(On)", out.p, reused_count);
}

// Note [A file not in memory is read later], record_file_reading.h.
// libdeflate_crc32(data, value=0) -> int: zlib.crc32's value, from
// libdeflate (Note [The cache's CRC-32 from libdeflate]); OSError where the
// machine has no libdeflate (has_libdeflate).
PyObject*
crc32_by_libdeflate(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError, "libdeflate_crc32(data, value=0)");
    return nullptr;
  }
  const autograd_device_logging_report::Crc32Function crc32 =
      autograd_device_logging_report::libdeflate_crc32();
  if (crc32 == nullptr) {
    PyErr_SetString(PyExc_OSError, "libdeflate is not on this machine");
    return nullptr;
  }
  unsigned long value = 0;
  if (nargs == 2) {
    value = PyLong_AsUnsignedLongMask(args[1]);
    if (value == static_cast<unsigned long>(-1) && PyErr_Occurred()) {
      return nullptr;
    }
  }
  Py_buffer view;
  if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0) {
    return nullptr;
  }
  uint32_t crc = uint32_t(value);
  const size_t length = size_t(view.len);
  // A large buffer (a cache file) without the interpreter's lock.
  if (length >= (size_t(1) << 16)) {
    Py_BEGIN_ALLOW_THREADS;
    crc = crc32(crc, view.buf, length);
    Py_END_ALLOW_THREADS;
  } else {
    crc = crc32(crc, view.buf, length);
  }
  PyBuffer_Release(&view);
  return PyLong_FromUnsignedLong(crc);
}

PyObject* has_libdeflate(PyObject*, PyObject*) {
  return PyBool_FromLong(
      autograd_device_logging_report::libdeflate_crc32() != nullptr);
}

PyObject* read_later(PyObject*, PyObject*) {
  return PyLong_FromSize_t(files_read_later());
}

PyMethodDef kMethods[] = {
    {"files_read_later",
     read_later,
     METH_NOARGS,
     "files_read_later() -> int\n"
     "\n"
     "How many files read_files has read after those listed after them,\n"
     "the page cache not holding them, in this process."},
    {"read_files",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(read_files)),
     METH_FASTCALL,
     "read_files(directory_fd, names, held, max_bytes) -> (outcomes, reused)\n"
     "\n"
     "Each name's outcome, in order: held[name] itself where the file still\n"
     "has its key; else (key, contents as bytes) for a regular file of at\n"
     "most max_bytes; else (key or None, why it was not read)."},
    {"scan_directory",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::scan_directory)),
     METH_FASTCALL,
     "scan_directory(directory_fd)\n"
     "-> (record names, symbolic links, not regular files)\n"
     "\n"
     "Lists the directory's record names, \"/\"-ended (file_index.scan)."},
    {"changed_groups",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::changed_groups)),
     METH_FASTCALL,
     "changed_groups(names, keys, unchanged) -> (set, dict)"},
    {"names_in",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::names_in)),
     METH_FASTCALL,
     "names_in(names, keys, unchanged, groups) -> names"},
    {"unchanged_entries",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::unchanged_entries)),
     METH_FASTCALL,
     "unchanged_entries(names, keys, unchanged) -> (names, keys)"},
    {"keep_unchanged_in_place",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::keep_unchanged_in_place)),
     METH_FASTCALL,
     "keep_unchanged_in_place(names, keys, unchanged) -> (length, entries)"},
    {"spans_in",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::spans_in)),
     METH_FASTCALL,
     "spans_in(names, keys, unchanged, groups) -> bytes"},
    {"pack_entries",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::pack_entries)),
     METH_FASTCALL,
     "pack_entries(records, groups, places) -> bytes"},
    {"list_and_check",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::list_and_check)),
     METH_FASTCALL,
     "list_and_check(directory_fd, load[, files_per_thread])\n"
     "-> (names to read, symbolic links, not regular files, unchanged)\n"
     "\n"
     "Lists the directory while load() gives the index (names, keys) or\n"
     "None, and checks the index's keys (file_index.scan_and_check)."},
    {"listed_stats",
     autograd_device_logging_report::listed_stats,
     METH_NOARGS,
     "listed_stats() -> int\n"
     "\n"
     "How many listed names list_and_check stat'ed, in this process."},
    {"table_lookups",
     autograd_device_logging_report::table_lookups,
     METH_NOARGS,
     "table_lookups() -> int\n"
     "\n"
     "How many listed names list_and_check looked for in its table of the\n"
     "index's names, not finding them after the name before, in this process."},
    {"in_group_order",
     autograd_device_logging_report::in_group_order,
     METH_O,
     "in_group_order(spans) -> None"},
    {"cross_jobs",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::cross_jobs)),
     METH_FASTCALL,
     "cross_jobs(jobs, wanted, no_row) -> (joined, filtered, releases, order)"},
    {"sum_lights",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::sum_lights)),
     METH_FASTCALL,
     "sum_lights(jobs, order, no_counts, no_passes) -> (processes, ranks, "
     "processes_with, passes, counting, torch, left_out, per_class)"},
    {"sorted_column",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::sorted_column)),
     METH_FASTCALL,
     "sorted_column(rows, index) -> list or None\n"
     "\n"
     "sorted(row[index] for row in rows), or None where a value is no\n"
     "exact float or is NaN."},
    {"kept_lines",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::kept_lines)),
     METH_FASTCALL,
     "kept_lines(jobs, names, joined, all_jobs) -> (lines, again)\n"
     "\n"
     "Each of `names`' line as its part keeps it, None where it must be made\n"
     "again, and the positions of those."},
    {"count_records",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::count_records)),
     METH_FASTCALL,
     "count_records(records, add, jobs, parents, release_numbers, class_cost, "
     "events) -> int\n"
     "\n"
     "Counts each record of the plain path into FleetTotals' jobs and\n"
     "parents, and hands every other to add(record); how many it counted."},
    {"libdeflate_crc32",
     reinterpret_cast<PyCFunction>(
         reinterpret_cast<void (*)()>(crc32_by_libdeflate)),
     METH_FASTCALL,
     "libdeflate_crc32(data, value=0) -> int\n"
     "\n"
     "zlib.crc32(data, value), computed by libdeflate; OSError where this\n"
     "machine has no libdeflate."},
    {"has_libdeflate",
     has_libdeflate,
     METH_NOARGS,
     "has_libdeflate() -> bool: whether libdeflate_crc32 can compute."},
    {"finish_jobs",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::finish_jobs)),
     METH_FASTCALL,
     "finish_jobs(counted, jobs, parents, agents, filtered, names, one, out, "
     "shape) -> int\n"
     "\n"
     "Each counted job's part (fleet_totals.KeptJob, its line made) into\n"
     "out, its counts popped; a job off the plain path through one(job).\n"
     "How many it made itself."},
    {"part_logs",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
         autograd_device_logging_report::part_logs)),
     METH_FASTCALL,
     "part_logs(names, keys, unchanged) -> (set, int)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "_record_files",
    "The fleet report's reading of record files.",
    -1,
    kMethods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

} // namespace

PyMODINIT_FUNC PyInit__record_files() {
  return PyModule_Create(&kModule);
}
