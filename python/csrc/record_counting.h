// The fleet report's counting of the plain records in compiled code
// (record_counting.cpp). Include after <Python.h>.
#pragma once

namespace autograd_device_logging_report {

// count_records(records, add, jobs, parents, release_numbers, class_cost,
// events) -> how many it counted itself (Note [Counting the plain records in
// compiled code]).
PyObject* count_records(PyObject*, PyObject* const* args, Py_ssize_t nargs);

} // namespace autograd_device_logging_report
