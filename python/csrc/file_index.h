// The fleet report's index of record files in compiled code: the functions
// _record_files adds from file_index.cpp (Note [The files' index],
// file_index.py).

#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "python_reference.h"

namespace autograd_device_logging_report {

// scan_directory(directory_fd) -> (the record names listed, "/"-ended; symbolic
// links, other entries that are no regular file).
PyObject* scan_directory(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// pack_entries(records, groups, places) -> the index entries (Note [The
// files' index]) of records [(name, (size, mtime_ns, inode), record)] counted
// in the groups `groups`, their parts at `places` [(log, span)] (None: none),
// as int64s.
PyObject* pack_entries(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// list_and_check(directory_fd, load[, files_per_thread]) -> (the record
// names to read, "/"-ended; symbolic links, other entries that are no
// regular file; the index's unchanged flags, or None): lists the directory
// in a thread while load() gives the index (names, keys) or None, then a
// thread per core checks a share of at least files_per_thread of its keys
// (Note [The keys are checked while listing]). The names to read are the
// listed ones whose key changed or that the index has not.
PyObject* list_and_check(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// table_lookups() -> how many listed names list_and_check looked for in its
// table of the index's names, not finding them after the name before (Note
// [The keys are checked while listing]), in this process.
PyObject* table_lookups(PyObject*, PyObject*);
// listed_stats() -> how many listed names list_and_check stat'ed, in this
// process (Note [The keys are checked while listing]).
PyObject* listed_stats(PyObject*, PyObject*);
// changed_groups(names, keys, unchanged) -> ({jobs' groups of changed
// entries}, {skipped files' group: unchanged entries}).
PyObject* changed_groups(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// names_in(names, keys, unchanged, groups) -> names of the unchanged
// entries of `groups`, which become changed.
PyObject* names_in(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// unchanged_entries(names, keys, unchanged) -> (names, keys) of the
// unchanged entries.
PyObject* unchanged_entries(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// keep_unchanged_in_place(names, keys, unchanged) -> (names' length,
// entries) of the unchanged entries, moved to the front of the writable
// names and keys where they lie (Note [The entries gone are left out in
// place]).
PyObject*
keep_unchanged_in_place(PyObject*, PyObject* const* args, Py_ssize_t nargs);

// spans_in(names, keys, unchanged, groups) -> (group, part log, part span)
// of each unchanged entry of `groups` (None: of every job), as int64
// triples in group order.
PyObject* spans_in(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// in_group_order(spans) puts a writable buffer of such triples in group
// order, in place.
PyObject* in_group_order(PyObject*, PyObject* spans);
// part_logs(names, keys, unchanged) -> ({logs the unchanged entries' parts
// are in}, the bytes of those parts).
PyObject* part_logs(PyObject*, PyObject* const* args, Py_ssize_t nargs);

} // namespace autograd_device_logging_report
