// The fleet report's assembly in compiled code (report_assembly.cpp).
// Include after <Python.h>.
#pragma once

namespace autograd_device_logging_report {

// cross_jobs(jobs, wanted, no_row) -> (joined, filtered, releases, order):
// what crosses the jobs' parts `jobs` ({job: fleet_totals.KeptJob}) for
// --job `wanted` (a set, or None): the agents each job is joined by, the
// processes filtered out, the rows per torch release (each summed onto
// `no_row`, a row of zeros), and the report's jobs, sorted, as
// fleet_totals.Assembled makes them (Note [Assembling the report in
// compiled code]).
PyObject* cross_jobs(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// sum_lights(jobs, order, no_counts, no_passes) -> (processes, ranks,
// processes_with, passes, processes counting passes, {torch}, left_out,
// {class: [vote]}): the sums of the lights of `order`'s jobs, as
// Assembled._everything makes them.
PyObject* sum_lights(PyObject*, PyObject* const* args, Py_ssize_t nargs);
PyObject* kept_lines(PyObject*, PyObject* const* args, Py_ssize_t nargs);
// sorted_column(rows, index) -> list or None: sorted(row[index] for row in
// rows) where each is an exact float and none is NaN (Note [A column of
// votes sorted in compiled code]).
PyObject* sorted_column(PyObject*, PyObject* const* args, Py_ssize_t nargs);

} // namespace autograd_device_logging_report
