// The fleet report's assembly in compiled code: what crosses jobs, and the
// row for all jobs, from every job's part (Note [Assembling the report in
// compiled code]).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "python_reference.h"
#include "report_assembly.h"

namespace autograd_device_logging_report {
namespace {

// Note [Assembling the report in compiled code]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A re-run counts only the jobs that changed (Note [A re-run reads the
// jobs that changed], fleet_report.py), but what crosses jobs (the agents
// that join a job, the rows per torch release, the jobs' order) and the row
// for all jobs are made from every job's part (fleet_totals.Assembled): in
// Python, a dozen dict and tuple operations per job, a tenth of a second or
// two at 55,000 jobs on this project's 2-core machine, a tenth of a warm
// run. cross_jobs and sum_lights do the same operations on the same
// objects, job by job in the same order (so that each name of a row's
// counts comes where it first appears, and each vote of a class in the
// jobs' order), each in one call, the sums in machine integers where they
// fit (Note [Sums in machine integers where they fit]); the rest (sorting
// the torch releases, the medians over jobs) stays in Python. Without the
// extension, Assembled does it all in Python: the same report, which the
// tests hold the two to.

// Item `i` of the tuple `kept` (a job's part: fleet_totals.KeptJob);
// nullptr with an exception set where it has none.
PyObject* item_of(PyObject* kept, Py_ssize_t i) {
  if (!PyTuple_Check(kept) || PyTuple_GET_SIZE(kept) <= i) {
    PyErr_SetString(PyExc_TypeError, "a job's part is not a KeptJob");
    return nullptr;
  }
  return PyTuple_GET_ITEM(kept, i);
}

// The light of `job`'s part in `jobs` (borrowed), or `no_counts` where it
// counted no process; nullptr with an exception set where `jobs` has no
// part of it, or not a KeptJob.
PyObject* light_of_job(PyObject* jobs, PyObject* job, PyObject* no_counts) {
  PyObject* kept = PyDict_GetItemWithError(jobs, job);
  if (kept == nullptr) {
    if (!PyErr_Occurred()) {
      PyErr_SetObject(PyExc_KeyError, job);
    }
    return nullptr;
  }
  PyObject* summary = item_of(kept, 0);
  return summary == nullptr ? nullptr
      : summary == Py_None  ? no_counts
                            : item_of(kept, 5);
}

// *total += value (a new reference replaces the old); false with an
// exception set.
bool add_to(Ref& total, PyObject* value) {
  PyObject* sum = PyNumber_Add(total.p, value);
  if (sum == nullptr) {
    return false;
  }
  Py_DECREF(total.p);
  total.p = sum;
  return true;
}

// into[name] = into.get(name, 0) + n for each (name, n) of `pairs`; false
// with an exception set.
bool add_pairs(PyObject* into, PyObject* pairs, PyObject* zero) {
  const Ref fast(PySequence_Fast(pairs, "counts are not (name, n) pairs"));
  if (fast.p == nullptr) {
    return false;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.p);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* pair = PySequence_Fast_GET_ITEM(fast.p, i);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
      PyErr_SetString(PyExc_TypeError, "counts are not (name, n) pairs");
      return false;
    }
    PyObject* name = PyTuple_GET_ITEM(pair, 0);
    PyObject* known = PyDict_GetItemWithError(into, name);
    if (known == nullptr && PyErr_Occurred()) {
      return false;
    }
    const Ref sum(PyNumber_Add(
        known == nullptr ? zero : known, PyTuple_GET_ITEM(pair, 1)));
    if (sum.p == nullptr || PyDict_SetItem(into, name, sum.p) != 0) {
      return false;
    }
  }
  return true;
}

// Adds every item of `items` to the set `into`; false with an exception
// set.
bool add_items(PyObject* into, PyObject* items) {
  const Ref each(PyObject_GetIter(items));
  if (each.p == nullptr) {
    return false;
  }
  while (true) {
    const Ref item(PyIter_Next(each.p));
    if (item.p == nullptr) {
      return !PyErr_Occurred();
    }
    if (PySet_Add(into, item.p) != 0) {
      return false;
    }
  }
}

// Note [Sums in machine integers where they fit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Most of cross_jobs' and sum_lights' time went to Python's own addition
// (a new int object per sum) and to dict lookups of the same few names
// (events, classes, releases, reasons) job after job. So each first sums
// in int64_t, the names of a row's counts kept in the order they first
// appear, found by identity (a name read back from the cache is one
// object wherever it appears) or else by equality, and the agents that
// join each job in a table keyed by the job's name object (every target
// is a key of `jobs`, so identity is equality there). It gives up, and the
// same sums are made again with Python's addition as before, at the first
// value that is not an exact int or str where one is expected, a count or
// sum that does not fit in 63 bits, a container of another type, or more
// than kMostNames names in one row: the same result either way, which
// test_report_cache.py holds the two paths to.
constexpr size_t kMostNames = 64;

// The (name, count) pairs of a row, in the order the names first came.
struct NamedCounts {
  // Borrowed: the jobs' parts hold them for the whole call.
  std::vector<PyObject*> names;
  std::vector<int64_t> counts;

  // The place of `name` (an exact str), added with a count of 0 where it
  // is new; -1 where there would be more than kMostNames.
  std::ptrdiff_t place_of(PyObject* name, size_t hint) {
    if (hint < names.size() && names[hint] == name) {
      return std::ptrdiff_t(hint);
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) {
        return std::ptrdiff_t(i);
      }
    }
    for (size_t i = 0; i < names.size(); ++i) {
      // Two exact str: no error, 0 where equal.
      if (PyUnicode_Compare(names[i], name) == 0) {
        return std::ptrdiff_t(i);
      }
    }
    if (names.size() == kMostNames) {
      return -1;
    }
    names.push_back(name);
    counts.push_back(0);
    return std::ptrdiff_t(names.size() - 1);
  }

  // {name: count} in the names' order; nullptr with an exception set.
  PyObject* as_dict() const {
    Ref out(PyDict_New());
    for (size_t i = 0; out.p != nullptr && i < names.size(); ++i) {
      const Ref count(PyLong_FromLongLong(counts[i]));
      if (count.p == nullptr || PyDict_SetItem(out.p, names[i], count.p) != 0) {
        return nullptr;
      }
    }
    return out.release();
  }
};

// `value` as an int64_t in *out where it is an exact int that fits.
bool small_int(PyObject* value, int64_t* out) {
  if (!PyLong_CheckExact(value)) {
    return false;
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  *out = int64_t(v);
  return true;
}

// *total += the exact int `value`; false where it is none or the sum does
// not fit.
bool add_small(int64_t* total, PyObject* value) {
  int64_t v = 0;
  return small_int(value, &v) && !__builtin_add_overflow(*total, v, total);
}

// Adds each (name, n) of `pairs` (an exact tuple of exact 2-tuples of an
// exact str and an exact int) to `into`; false where they are not that,
// or a sum does not fit.
bool add_small_pairs(NamedCounts& into, PyObject* pairs) {
  if (!PyTuple_CheckExact(pairs)) {
    return false;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pairs); ++i) {
    PyObject* pair = PyTuple_GET_ITEM(pairs, i);
    if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
        !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0))) {
      return false;
    }
    const std::ptrdiff_t at =
        into.place_of(PyTuple_GET_ITEM(pair, 0), size_t(i));
    if (at < 0 ||
        !add_small(&into.counts[size_t(at)], PyTuple_GET_ITEM(pair, 1))) {
      return false;
    }
  }
  return true;
}

// What a fast path gives: its result, or nothing where it gave up (no
// exception set) or failed (an exception set).
struct Fast {
  Ref result{nullptr};
  bool gave_up = false;
};

// sum_lights in machine integers (Note [Sums in machine integers where
// they fit]).
void sum_lights_fast(
    PyObject* jobs,
    PyObject* order,
    PyObject* no_counts,
    PyObject* no_passes,
    Fast& out) {
  int64_t processes = 0, ranks = 0, counting = 0;
  NamedCounts processes_with, passes, torch, left_out, classes;
  const Ref votes(PyList_New(0)); // each class's votes, in classes' order
  if (votes.p == nullptr) {
    return;
  }
  const auto give_up = [&out]() { out.gave_up = true; };
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(order); ++j) {
    PyObject* light = light_of_job(jobs, PyList_GET_ITEM(order, j), no_counts);
    if (light == nullptr) {
      return;
    }
    if (!PyTuple_CheckExact(light) || PyTuple_GET_SIZE(light) < 8) {
      return give_up();
    }
    PyObject* job_passes = PyTuple_GET_ITEM(light, 3);
    if (job_passes != Py_None && !PyTuple_CheckExact(job_passes)) {
      return give_up();
    }
    const bool has_passes =
        job_passes != Py_None && PyTuple_GET_SIZE(job_passes) > 0;
    PyObject* releases = PyTuple_GET_ITEM(light, 5);
    if (!add_small(&processes, PyTuple_GET_ITEM(light, 0)) ||
        !add_small(&ranks, PyTuple_GET_ITEM(light, 1)) ||
        !add_small_pairs(processes_with, PyTuple_GET_ITEM(light, 2)) ||
        !add_small_pairs(passes, has_passes ? job_passes : no_passes) ||
        !add_small(&counting, PyTuple_GET_ITEM(light, 4)) ||
        !add_small_pairs(left_out, PyTuple_GET_ITEM(light, 6)) ||
        !PyTuple_CheckExact(releases)) {
      return give_up();
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(releases); ++i) {
      PyObject* release = PyTuple_GET_ITEM(releases, i);
      if (!PyUnicode_CheckExact(release) ||
          torch.place_of(release, size_t(i)) < 0) {
        return give_up();
      }
    }
    PyObject* costs = PyTuple_GET_ITEM(light, 7);
    if (costs == Py_None) {
      continue;
    }
    if (!PyTuple_CheckExact(costs)) {
      return give_up();
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(costs); ++i) {
      PyObject* cost = PyTuple_GET_ITEM(costs, i);
      if (!PyTuple_CheckExact(cost) || PyTuple_GET_SIZE(cost) != 2 ||
          !PyUnicode_CheckExact(PyTuple_GET_ITEM(cost, 0))) {
        return give_up();
      }
      const size_t known = classes.names.size();
      const std::ptrdiff_t at =
          classes.place_of(PyTuple_GET_ITEM(cost, 0), size_t(i));
      if (at < 0) {
        return give_up();
      }
      if (classes.names.size() > known) {
        const Ref made(PyList_New(0));
        if (made.p == nullptr || PyList_Append(votes.p, made.p) != 0) {
          return;
        }
      }
      if (PyList_Append(
              PyList_GET_ITEM(votes.p, at), PyTuple_GET_ITEM(cost, 1)) != 0) {
        return;
      }
    }
  }
  const Ref torch_set(PySet_New(nullptr));
  const Ref per_class(PyDict_New());
  if (torch_set.p == nullptr || per_class.p == nullptr) {
    return;
  }
  for (PyObject* release : torch.names) {
    if (PySet_Add(torch_set.p, release) != 0) {
      return;
    }
  }
  for (size_t i = 0; i < classes.names.size(); ++i) {
    if (PyDict_SetItem(
            per_class.p, classes.names[i], PyList_GET_ITEM(votes.p, i)) != 0) {
      return;
    }
  }
  const Ref processes_sum(PyLong_FromLongLong(processes));
  const Ref ranks_sum(PyLong_FromLongLong(ranks));
  const Ref counting_sum(PyLong_FromLongLong(counting));
  const Ref with(processes_with.as_dict());
  const Ref passes_sum(passes.as_dict());
  const Ref left(left_out.as_dict());
  if (processes_sum.p == nullptr || ranks_sum.p == nullptr ||
      counting_sum.p == nullptr || with.p == nullptr ||
      passes_sum.p == nullptr || left.p == nullptr) {
    return;
  }
  out.result.p = PyTuple_Pack(
      8,
      processes_sum.p,
      ranks_sum.p,
      with.p,
      passes_sum.p,
      counting_sum.p,
      torch_set.p,
      left.p,
      per_class.p);
}

// The rows per torch release, each as long as the shortest summed into it
// (as zip()), in the order the releases first came.
struct ReleaseRows {
  NamedCounts names; // counts unused
  std::vector<std::vector<int64_t>> rows;
};

// cross_jobs after the parents, in machine integers (Note [Sums in machine
// integers where they fit]).
void cross_jobs_fast(
    PyObject* jobs,
    PyObject* wanted,
    PyObject* no_row,
    PyObject* parents,
    Fast& out) {
  const auto give_up = [&out]() { out.gave_up = true; };
  std::vector<int64_t> zeros;
  if (!PyList_CheckExact(no_row)) {
    return give_up();
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(no_row); ++i) {
    int64_t v = 0;
    if (!small_int(PyList_GET_ITEM(no_row, i), &v)) {
      return give_up();
    }
    zeros.push_back(v);
  }
  int64_t filtered = 0;
  // The agents that join each job, by the job's name object, in the order
  // the jobs were first joined.
  std::unordered_map<PyObject*, size_t> joined_at;
  std::vector<std::pair<PyObject*, int64_t>> joined;
  ReleaseRows releases;
  const bool any_parent = PyDict_GET_SIZE(parents) > 0;
  Py_ssize_t at = 0;
  PyObject *job = nullptr, *kept = nullptr;
  while (PyDict_Next(jobs, &at, &job, &kept)) {
    PyObject* left_out = item_of(kept, 4);
    PyObject* agents = item_of(kept, 3);
    PyObject* rows = item_of(kept, 1);
    if (left_out == nullptr || agents == nullptr || rows == nullptr) {
      return;
    }
    if (!add_small(&filtered, left_out) || !PyTuple_CheckExact(agents) ||
        !PyDict_CheckExact(rows)) {
      return give_up();
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(agents); ++i) {
      PyObject* target = nullptr;
      // A key no job names as a parent joins its own job: where none
      // names any, no key is looked up.
      if (any_parent) {
        target = PyDict_GetItemWithError(parents, PyTuple_GET_ITEM(agents, i));
        if (target == nullptr && PyErr_Occurred()) {
          return;
        }
      }
      if (target == nullptr) {
        target = job;
      }
      const int in = wanted == nullptr ? 1 : PySet_Contains(wanted, target);
      if (in < 0) {
        return;
      }
      if (!in) {
        if (__builtin_add_overflow(filtered, 1, &filtered)) {
          return give_up();
        }
        continue;
      }
      const auto known = joined_at.emplace(target, joined.size());
      if (known.second) {
        joined.emplace_back(target, 0);
      }
      ++joined[known.first->second].second;
    }
    Py_ssize_t row_at = 0;
    PyObject *release = nullptr, *row = nullptr;
    while (PyDict_Next(rows, &row_at, &release, &row)) {
      if (!PyUnicode_CheckExact(release) || !PyList_CheckExact(row)) {
        return give_up();
      }
      const size_t known = releases.names.names.size();
      const std::ptrdiff_t place = releases.names.place_of(release, 0);
      if (place < 0) {
        return give_up();
      }
      if (releases.names.names.size() > known) {
        releases.rows.push_back(zeros);
      }
      std::vector<int64_t>& sums = releases.rows[size_t(place)];
      const size_t width = std::min(sums.size(), size_t(PyList_GET_SIZE(row)));
      sums.resize(width);
      for (size_t i = 0; i < width; ++i) {
        if (!add_small(&sums[i], PyList_GET_ITEM(row, Py_ssize_t(i)))) {
          return give_up();
        }
      }
    }
  }
  // The jobs of the report: those that counted a process or that an agent
  // joined, sorted.
  const Ref order(PyList_New(0));
  const Ref joined_dict(PyDict_New());
  const Ref releases_dict(PyDict_New());
  const Ref filtered_sum(PyLong_FromLongLong(filtered));
  if (order.p == nullptr || joined_dict.p == nullptr ||
      releases_dict.p == nullptr || filtered_sum.p == nullptr) {
    return;
  }
  at = 0;
  while (PyDict_Next(jobs, &at, &job, &kept)) {
    PyObject* summary = item_of(kept, 0);
    if (summary == nullptr) {
      return;
    }
    if ((summary != Py_None || joined_at.count(job) > 0) &&
        PyList_Append(order.p, job) != 0) {
      return;
    }
  }
  for (const auto& target : joined) {
    const int known = PyDict_Contains(jobs, target.first);
    const Ref count(PyLong_FromLongLong(target.second));
    if (known < 0 || count.p == nullptr ||
        (!known && PyList_Append(order.p, target.first) != 0) ||
        PyDict_SetItem(joined_dict.p, target.first, count.p) != 0) {
      return;
    }
  }
  for (size_t r = 0; r < releases.rows.size(); ++r) {
    const std::vector<int64_t>& sums = releases.rows[r];
    const Ref row(PyList_New(Py_ssize_t(sums.size())));
    if (row.p == nullptr) {
      return;
    }
    for (size_t i = 0; i < sums.size(); ++i) {
      PyObject* value = PyLong_FromLongLong(sums[i]);
      if (value == nullptr) {
        return;
      }
      PyList_SET_ITEM(row.p, Py_ssize_t(i), value);
    }
    if (PyDict_SetItem(releases_dict.p, releases.names.names[r], row.p) != 0) {
      return;
    }
  }
  if (PyList_Sort(order.p) != 0) {
    return;
  }
  out.result.p =
      PyTuple_Pack(4, joined_dict.p, filtered_sum.p, releases_dict.p, order.p);
}

} // namespace

PyObject* cross_jobs(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyDict_Check(args[0]) ||
      (args[1] != Py_None && !PyAnySet_Check(args[1]))) {
    PyErr_SetString(
        PyExc_TypeError,
        "cross_jobs(jobs: dict, wanted: set or None, row: list)");
    return nullptr;
  }
  PyObject* jobs = args[0];
  PyObject* wanted = args[1] == Py_None ? nullptr : args[1];
  PyObject* no_row = args[2];
  const Ref zero(PyLong_FromLong(0));
  const Ref one(PyLong_FromLong(1));
  const Ref parents(PyDict_New());
  const Ref joined(PyDict_New());
  const Ref releases(PyDict_New());
  Ref filtered(PyLong_FromLong(0));
  if (zero.p == nullptr || one.p == nullptr || parents.p == nullptr ||
      joined.p == nullptr || releases.p == nullptr || filtered.p == nullptr) {
    return nullptr;
  }
  // Each key's parent: the first job that names it, in name order.
  Py_ssize_t at = 0;
  PyObject *job = nullptr, *kept = nullptr;
  while (PyDict_Next(jobs, &at, &job, &kept)) {
    PyObject* named = item_of(kept, 2);
    const Ref keys(named == nullptr ? nullptr : PySequence_Fast(named, "keys"));
    if (keys.p == nullptr) {
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(keys.p); ++i) {
      PyObject* key = PySequence_Fast_GET_ITEM(keys.p, i);
      PyObject* known = PyDict_GetItemWithError(parents.p, key);
      if (known == nullptr && PyErr_Occurred()) {
        return nullptr;
      }
      const int earlier =
          known == nullptr ? 1 : PyObject_RichCompareBool(job, known, Py_LT);
      if (earlier < 0 ||
          (earlier && PyDict_SetItem(parents.p, key, job) != 0)) {
        return nullptr;
      }
    }
  }
  {
    // Note [Sums in machine integers where they fit]
    Fast fast;
    cross_jobs_fast(jobs, wanted, no_row, parents.p, fast);
    if (!fast.gave_up) {
      return fast.result.release();
    }
  }
  // The agents each job's agents join, and the rows per torch release.
  at = 0;
  while (PyDict_Next(jobs, &at, &job, &kept)) {
    PyObject* left_out = item_of(kept, 4);
    PyObject* agents = item_of(kept, 3);
    PyObject* rows = item_of(kept, 1);
    if (left_out == nullptr || agents == nullptr || rows == nullptr ||
        !add_to(filtered, left_out)) {
      return nullptr;
    }
    const Ref keys(PySequence_Fast(agents, "keys"));
    if (keys.p == nullptr) {
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(keys.p); ++i) {
      PyObject* target = PyDict_GetItemWithError(
          parents.p, PySequence_Fast_GET_ITEM(keys.p, i));
      if (target == nullptr) {
        if (PyErr_Occurred()) {
          return nullptr;
        }
        target = job;
      }
      const int in = wanted == nullptr ? 1 : PySet_Contains(wanted, target);
      if (in < 0) {
        return nullptr;
      }
      if (!in) {
        if (!add_to(filtered, one.p)) {
          return nullptr;
        }
        continue;
      }
      PyObject* count = PyDict_GetItemWithError(joined.p, target);
      if (count == nullptr && PyErr_Occurred()) {
        return nullptr;
      }
      const Ref more(PyNumber_Add(count == nullptr ? zero.p : count, one.p));
      if (more.p == nullptr || PyDict_SetItem(joined.p, target, more.p) != 0) {
        return nullptr;
      }
    }
    if (!PyDict_Check(rows)) {
      PyErr_SetString(PyExc_TypeError, "a job's rows are not a dict");
      return nullptr;
    }
    Py_ssize_t row_at = 0;
    PyObject *release = nullptr, *row = nullptr;
    while (PyDict_Next(rows, &row_at, &release, &row)) {
      PyObject* sum = PyDict_GetItemWithError(releases.p, release);
      if (sum == nullptr && PyErr_Occurred()) {
        return nullptr;
      }
      const Ref before(PySequence_Fast(sum == nullptr ? no_row : sum, "row"));
      const Ref added(PySequence_Fast(row, "a release's row is not a list"));
      if (before.p == nullptr || added.p == nullptr) {
        return nullptr;
      }
      // As zip(): as long as the shorter.
      const Py_ssize_t width = std::min(
          PySequence_Fast_GET_SIZE(before.p),
          PySequence_Fast_GET_SIZE(added.p));
      const Ref next(PyList_New(width));
      if (next.p == nullptr) {
        return nullptr;
      }
      for (Py_ssize_t i = 0; i < width; ++i) {
        PyObject* value = PyNumber_Add(
            PySequence_Fast_GET_ITEM(before.p, i),
            PySequence_Fast_GET_ITEM(added.p, i));
        if (value == nullptr) {
          return nullptr;
        }
        PyList_SET_ITEM(next.p, i, value);
      }
      if (PyDict_SetItem(releases.p, release, next.p) != 0) {
        return nullptr;
      }
    }
  }
  // The jobs of the report: those that counted a process or that an agent
  // joined, sorted.
  const Ref order(PyList_New(0));
  if (order.p == nullptr) {
    return nullptr;
  }
  at = 0;
  while (PyDict_Next(jobs, &at, &job, &kept)) {
    PyObject* summary = item_of(kept, 0);
    if (summary == nullptr) {
      return nullptr;
    }
    const int has_agents = PyDict_Contains(joined.p, job);
    if (has_agents < 0 ||
        ((has_agents || summary != Py_None) &&
         PyList_Append(order.p, job) != 0)) {
      return nullptr;
    }
  }
  at = 0;
  PyObject* count = nullptr;
  while (PyDict_Next(joined.p, &at, &job, &count)) {
    const int known = PyDict_Contains(jobs, job);
    if (known < 0 || (!known && PyList_Append(order.p, job) != 0)) {
      return nullptr;
    }
  }
  if (PyList_Sort(order.p) != 0) {
    return nullptr;
  }
  return PyTuple_Pack(4, joined.p, filtered.p, releases.p, order.p);
}

// Note [The lines kept are taken in one call]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A job's line, as the cache kept it or a counting process made it, stands
// where it was made for the agents that join the job now (Note [An agent
// joins its workers' job], fleet_totals.py): on a re-run, every job but a
// few. Assembled.lines takes them for every job of the report, once for
// the cache and the JSON: in Python a dict lookup, two tuple items and a
// comparison per job, 0.05 s at 55,000 jobs on this project's 2-core
// machine, a fortieth of a re-run. kept_lines does the same per job in one
// call, and names the jobs whose line must be made again, which Python
// makes (Assembled.line).
PyObject* kept_lines(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || !PyDict_Check(args[0]) || !PyList_Check(args[1]) ||
      !PyDict_Check(args[2]) || !PyUnicode_Check(args[3])) {
    PyErr_SetString(
        PyExc_TypeError,
        "kept_lines(jobs: dict, names: list, joined: dict, all_jobs: str)");
    return nullptr;
  }
  PyObject* jobs = args[0];
  PyObject* names = args[1];
  PyObject* joined = args[2];
  PyObject* all_jobs = args[3];
  const Py_ssize_t count = PyList_GET_SIZE(names);
  const Ref zero(PyLong_FromLong(0));
  const Ref lines(PyList_New(count));
  const Ref again(PyList_New(0));
  if (zero.p == nullptr || lines.p == nullptr || again.p == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* job = PyList_GET_ITEM(names, i);
    PyObject* line = Py_None;
    PyObject* kept = PyDict_GetItemWithError(jobs, job);
    if (kept == nullptr && PyErr_Occurred()) {
      return nullptr;
    }
    if (kept != nullptr) {
      PyObject* made = item_of(kept, 6);
      PyObject* made_for = made == nullptr ? nullptr : item_of(kept, 7);
      if (made_for == nullptr) {
        return nullptr;
      }
      PyObject* now = PyDict_GetItemWithError(joined, job);
      if (now == nullptr && PyErr_Occurred()) {
        return nullptr;
      }
      if (made != Py_None) {
        const int same = PyObject_RichCompareBool(
            made_for, now == nullptr ? zero.p : now, Py_EQ);
        if (same < 0) {
          return nullptr;
        }
        // The row for all jobs is no job's line, whatever a job is named.
        if (same &&
            !(PyUnicode_Check(job) && PyUnicode_Compare(job, all_jobs) == 0)) {
          line = made;
        }
        if (PyErr_Occurred()) {
          return nullptr;
        }
      }
    }
    if (line == Py_None) {
      const Ref at(PyLong_FromSsize_t(i));
      if (at.p == nullptr || PyList_Append(again.p, at.p) != 0) {
        return nullptr;
      }
    }
    Py_INCREF(line);
    PyList_SET_ITEM(lines.p, i, line);
  }
  return PyTuple_Pack(2, lines.p, again.p);
}

namespace {

// sum_lights with Python's addition (Note [Sums in machine integers where
// they fit]).
PyObject* sum_lights_in_python_numbers(
    PyObject* const* args,
    Py_ssize_t nargs) {
  if (nargs != 4 || !PyDict_Check(args[0]) || !PyList_Check(args[1])) {
    PyErr_SetString(
        PyExc_TypeError,
        "sum_lights(jobs: dict, order: list, no_counts: tuple, no_passes: "
        "tuple)");
    return nullptr;
  }
  PyObject* jobs = args[0];
  PyObject* order = args[1];
  PyObject* no_counts = args[2];
  PyObject* no_passes = args[3];
  const Ref zero(PyLong_FromLong(0));
  Ref processes(PyLong_FromLong(0));
  Ref ranks(PyLong_FromLong(0));
  Ref counting(PyLong_FromLong(0));
  const Ref processes_with(PyDict_New());
  const Ref passes(PyDict_New());
  const Ref torch(PySet_New(nullptr));
  const Ref left_out(PyDict_New());
  const Ref per_class(PyDict_New());
  if (zero.p == nullptr || processes.p == nullptr || ranks.p == nullptr ||
      counting.p == nullptr || processes_with.p == nullptr ||
      passes.p == nullptr || torch.p == nullptr || left_out.p == nullptr ||
      per_class.p == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(order); ++j) {
    PyObject* light = light_of_job(jobs, PyList_GET_ITEM(order, j), no_counts);
    if (light == nullptr) {
      return nullptr;
    }
    if (!PyTuple_Check(light) || PyTuple_GET_SIZE(light) < 8) {
      PyErr_SetString(PyExc_TypeError, "a job's light is not a tuple of 8");
      return nullptr;
    }
    PyObject* job_passes = PyTuple_GET_ITEM(light, 3);
    const int has_passes = PyObject_IsTrue(job_passes);
    if (has_passes < 0 || !add_to(processes, PyTuple_GET_ITEM(light, 0)) ||
        !add_to(ranks, PyTuple_GET_ITEM(light, 1)) ||
        !add_pairs(processes_with.p, PyTuple_GET_ITEM(light, 2), zero.p) ||
        !add_pairs(passes.p, has_passes ? job_passes : no_passes, zero.p) ||
        !add_to(counting, PyTuple_GET_ITEM(light, 4)) ||
        !add_items(torch.p, PyTuple_GET_ITEM(light, 5)) ||
        !add_pairs(left_out.p, PyTuple_GET_ITEM(light, 6), zero.p)) {
      return nullptr;
    }
    PyObject* costs = PyTuple_GET_ITEM(light, 7);
    if (costs == Py_None) {
      continue;
    }
    const Ref each(PySequence_Fast(costs, "costs"));
    if (each.p == nullptr) {
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(each.p); ++i) {
      // (class, vote): the job's vote as light_of made it, taken as it is.
      PyObject* cost = PySequence_Fast_GET_ITEM(each.p, i);
      if (!PyTuple_Check(cost) || PyTuple_GET_SIZE(cost) != 2) {
        PyErr_SetString(PyExc_TypeError, "a job's cost is not (class, vote)");
        return nullptr;
      }
      PyObject* device_class = PyTuple_GET_ITEM(cost, 0);
      PyObject* vote = PyTuple_GET_ITEM(cost, 1);
      PyObject* votes = PyDict_GetItemWithError(per_class.p, device_class);
      if (votes == nullptr) {
        if (PyErr_Occurred()) {
          return nullptr;
        }
        const Ref made(PyList_New(0));
        if (made.p == nullptr ||
            PyDict_SetItem(per_class.p, device_class, made.p) != 0) {
          return nullptr;
        }
        votes = made.p; // the dict holds it
      }
      if (PyList_Append(votes, vote) != 0) {
        return nullptr;
      }
    }
  }
  return PyTuple_Pack(
      8,
      processes.p,
      ranks.p,
      processes_with.p,
      passes.p,
      counting.p,
      torch.p,
      left_out.p,
      per_class.p);
}

} // namespace

PyObject* sum_lights(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs == 4 && PyDict_Check(args[0]) && PyList_Check(args[1])) {
    // Note [Sums in machine integers where they fit]
    Fast fast;
    sum_lights_fast(args[0], args[1], args[2], args[3], fast);
    if (!fast.gave_up) {
      return fast.result.release();
    }
  }
  return sum_lights_in_python_numbers(args, nargs);
}

// Note [A column of votes sorted in compiled code]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The threading cost over jobs (cost_statistics.over_jobs_of) sorts two
// columns of the jobs' votes, 55,000 floats each at 10^6 records: in
// Python, an itemgetter call per vote and a comparison through each
// float's object, 11 ms a column on this project's 2-core machine.
// sorted_column sorts the column's values as doubles beside their objects,
// stably, and gives the objects in that order: the list sorted() gives.
// It gives None (and the caller sorts in Python) where a row is no tuple
// long enough or a value is no exact float, or is NaN, which orders
// nothing.
PyObject* sorted_column(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyList_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "sorted_column(rows: list, index: int)");
    return nullptr;
  }
  PyObject* rows = args[0];
  const Py_ssize_t index = PyLong_AsSsize_t(args[1]);
  if (index == -1 && PyErr_Occurred()) {
    return nullptr;
  }
  try {
    std::vector<std::pair<double, PyObject*>> column;
    column.reserve(size_t(PyList_GET_SIZE(rows)));
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); ++i) {
      PyObject* row = PyList_GET_ITEM(rows, i);
      if (!PyTuple_CheckExact(row) || index < 0 ||
          PyTuple_GET_SIZE(row) <= index) {
        Py_RETURN_NONE;
      }
      PyObject* value = PyTuple_GET_ITEM(row, index);
      if (!PyFloat_CheckExact(value) || std::isnan(PyFloat_AS_DOUBLE(value))) {
        Py_RETURN_NONE;
      }
      column.emplace_back(PyFloat_AS_DOUBLE(value), value);
    }
    std::stable_sort(
        column.begin(), column.end(), [](const auto& a, const auto& b) {
          return a.first < b.first;
        });
    PyObject* out = PyList_New(Py_ssize_t(column.size()));
    if (out == nullptr) {
      return nullptr;
    }
    for (size_t i = 0; i < column.size(); ++i) {
      Py_INCREF(column[i].second);
      PyList_SET_ITEM(out, Py_ssize_t(i), column[i].second);
    }
    return out;
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  }
}

} // namespace autograd_device_logging_report
