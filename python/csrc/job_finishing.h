// The fleet report's making of the jobs' parts in compiled code
// (job_finishing.cpp). Include after <Python.h>.
#pragma once

namespace autograd_device_logging_report {

// finish_jobs(counted, jobs, parents, agents, filtered, names, one, out,
// shape) -> int: each job of the list `counted`, in order, its part as
// fleet_totals.kept_job(job, result, True) makes it (a KeptJob, its line
// made) put in the dict `out`, its counts popped from FleetTotals' `jobs`,
// `parents`, `agents` and `filtered` as FleetTotals.results does; a job off
// the plain path goes to one(job), which does both in Python. How many it
// made itself (Note [The jobs' parts made in compiled code]). `names` are
// the torch releases by number; `shape` is (events' short names, classes,
// order_statistic_interval, level, group_of, the torchrun agent's reason).
PyObject* finish_jobs(PyObject*, PyObject* const* args, Py_ssize_t nargs);

} // namespace autograd_device_logging_report
