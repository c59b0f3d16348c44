// The fleet report's counting of the plain records, in compiled code (Note
// [Counting the plain records in compiled code]): part of the _record_files
// extension, which needs only Python's headers.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "python_reference.h"
#include "record_counting.h"

#include <cstdint>
#include <utility>

namespace autograd_device_logging_report {

namespace {

// Note [Counting the plain records in compiled code]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Counting a record from its part is FleetTotals.add (fleet_totals.py): in
// Python about 1.3 us a record, a quarter of counting from the parts (Note
// [Counting from the parts, job by job], fleet_report.py). Most records
// take one plain path through it: a rank or another process (no agent),
// that ran backward and was not disabled, of a release already numbered,
// with only the known events and classes, and no rank of its job seen
// under another release. count_records does that path on the same objects
// (the job's JobTotals, its ClassCost arrays, the ranks' parents), each
// step what add() does, and hands every other record to add() itself
// before touching anything of it: so each record is counted once, by one
// of the two, the same. The report uses it only without --since, --until,
// --job and --by-placement (FleetTotals.add_all), where add() filters and
// keys first. test_report_cache.py holds the two to each other on random
// records, and the random rounds count the cached report this way against
// a fresh one counted by add().

// Record.__slots__ (record_fields.py), in order.
enum Slot : Py_ssize_t {
  kThreadingCost,
  kJob,
  kHost,
  kPid,
  kParent,
  kRank,
  kRole,
  kStartTime,
  kEvents,
  kOtherEvents,
  kRanBackward,
  kPassClasses,
  kOtherClasses,
  kTorch,
  kDisabledReason,
  kPlacement,
  kSlots,
};

// The strs it compares with and the attributes it reads, made once.
struct Names {
  PyObject* rank = nullptr;
  PyObject* agent = nullptr;
  PyObject* costs = nullptr;
  PyObject* passes = nullptr;
  PyObject* counting = nullptr;
  PyObject* ranks = nullptr;
  PyObject* other_releases = nullptr;
  PyObject* rank_values = nullptr;
  PyObject* process_values = nullptr;
  PyObject* differences = nullptr;
  PyObject* pairs = nullptr;
  PyObject* append = nullptr;
};

const Names* names() {
  static Names n;
  if (n.append == nullptr) {
    const std::pair<PyObject**, const char*> all[] = {
        {&n.rank, "rank"},
        {&n.agent, "agent"},
        {&n.costs, "costs"},
        {&n.passes, "passes"},
        {&n.counting, "counting"},
        {&n.ranks, "ranks"},
        {&n.other_releases, "other_releases"},
        {&n.rank_values, "rank_values"},
        {&n.process_values, "process_values"},
        {&n.differences, "differences"},
        {&n.pairs, "pairs"},
        {&n.append, "append"}};
    for (const auto& [field, text] : all) {
      // Kept for the process's life.
      *field = PyUnicode_InternFromString(text);
      if (*field == nullptr) {
        return nullptr;
      }
    }
  }
  return &n;
}

// 1: equal; 0: not (or not a str); -1: an error.
int same_str(PyObject* a, PyObject* b) {
  if (a == b) {
    return 1;
  }
  if (!PyUnicode_CheckExact(a)) {
    return 0;
  }
  return PyUnicode_Compare(a, b) == 0 ? 1 : (PyErr_Occurred() ? -1 : 0);
}

// Whether `value` is a class's value as the decoding gives it: (percent,
// difference, pairs), two floats and an int.
bool plain_value(PyObject* value) {
  return PyTuple_CheckExact(value) && PyTuple_GET_SIZE(value) == 3 &&
      PyFloat_CheckExact(PyTuple_GET_ITEM(value, 0)) &&
      PyFloat_CheckExact(PyTuple_GET_ITEM(value, 1)) &&
      PyLong_CheckExact(PyTuple_GET_ITEM(value, 2));
}

// `object`.`name` += `by` (ints); false with an exception set.
bool add_to(PyObject* object, PyObject* name, PyObject* by) {
  const Ref now(PyObject_GetAttr(object, name));
  if (now.p == nullptr) {
    return false;
  }
  const Ref sum(PyNumber_Add(now.p, by));
  return sum.p != nullptr && PyObject_SetAttr(object, name, sum.p) == 0;
}

// list[i] += by (ints); false with an exception set.
bool add_at(PyObject* list, Py_ssize_t i, PyObject* by) {
  PyObject* sum = PyNumber_Add(PyList_GET_ITEM(list, i), by);
  return sum != nullptr && PyList_SetItem(list, i, sum) == 0;
}

// The job counted last and what of it each record touches: records come a
// job at a time (Note [Counting from the parts, job by job]), so each is
// looked up once per run of its records. add() never replaces these
// objects, only adds to them.
struct JobCache {
  Ref key{nullptr}, job{nullptr}, costs{nullptr}, passes{nullptr},
      ranks{nullptr}, releases{nullptr};
  // The class counted last in it: its ClassCost and its arrays' appends.
  Ref device_class{nullptr}, cost{nullptr}, rank_append{nullptr},
      process_append{nullptr}, difference_append{nullptr};

  static void set(Ref& field, PyObject* value) {
    Py_XDECREF(field.p);
    field.p = value;
  }

  // The JobTotals of `key` (made, as the defaultdict does, where new);
  // false with an exception set.
  bool take(const Names& n, PyObject* jobs, PyObject* key) {
    // A part's job is a str of its own (Note [A part's strings are not
    // interned], record_decoding.cpp): the same job is the same value.
    const int same = this->key.p == nullptr ? 0 : same_str(key, this->key.p);
    if (same < 0) {
      return false;
    }
    if (same) {
      return true;
    }
    set(this->key, nullptr);
    set(device_class, nullptr);
    set(job, PyObject_GetItem(jobs, key));
    if (job.p == nullptr) {
      return false;
    }
    set(costs, PyObject_GetAttr(job.p, n.costs));
    set(passes, PyObject_GetAttr(job.p, n.passes));
    set(ranks, PyObject_GetAttr(job.p, n.ranks));
    set(releases, PyObject_GetAttr(job.p, n.other_releases));
    if (costs.p == nullptr || passes.p == nullptr || ranks.p == nullptr ||
        releases.p == nullptr) {
      return false;
    }
    if (!PyDict_Check(costs.p) || !PyList_Check(passes.p) ||
        !PyDict_Check(ranks.p) || !PyDict_Check(releases.p)) {
      PyErr_SetString(PyExc_TypeError, "not a JobTotals");
      return false;
    }
    Py_INCREF(key);
    set(this->key, key);
    return true;
  }

  // The ClassCost of `name` in the job (made where new), its appends
  // ready; false with an exception set.
  bool take_class(const Names& n, PyObject* name, PyObject* class_cost) {
    const int same =
        device_class.p == nullptr ? 0 : same_str(name, device_class.p);
    if (same < 0) {
      return false;
    }
    if (same) {
      return true;
    }
    set(device_class, nullptr);
    PyObject* mine = PyDict_GetItemWithError(costs.p, name);
    if (mine == nullptr) {
      if (PyErr_Occurred()) {
        return false;
      }
      const Ref made(PyObject_CallNoArgs(class_cost));
      if (made.p == nullptr || PyDict_SetItem(costs.p, name, made.p) != 0) {
        return false;
      }
      mine = made.p; // the dict holds it
    }
    Py_INCREF(mine);
    set(cost, mine);
    PyObject* arrays[] = {nullptr, nullptr, nullptr};
    PyObject* attributes[] = {n.rank_values, n.process_values, n.differences};
    Ref* appends[] = {&rank_append, &process_append, &difference_append};
    for (int i = 0; i < 3; ++i) {
      arrays[i] = PyObject_GetAttr(mine, attributes[i]);
      set(*appends[i],
          arrays[i] == nullptr ? nullptr
                               : PyObject_GetAttr(arrays[i], n.append));
      Py_XDECREF(arrays[i]);
      if (appends[i]->p == nullptr) {
        return false;
      }
    }
    Py_INCREF(name);
    set(device_class, name);
    return true;
  }
};

// What one record needs before anything is counted: whether it takes the
// plain path, and the key and state of its rank.
struct Plan {
  bool plain = false;
  bool is_rank = false;
  // A rank's record naming its parent (host, pid, start time), which its
  // job keeps (Note [An agent joins its workers' job], fleet_totals.py).
  bool keeps_parent = false;
  long release = 0;
  Ref rank_key{nullptr};
  // The rank's state after this record (Note [A restarted rank counts
  // once, under its newest release], fleet_totals.py).
  long state = 0;
};

// Fills `plan`; false with an exception set.
bool plan_of(
    const Names& n,
    PyObject* r,
    const JobCache& c,
    PyObject* jobs,
    PyObject* release_numbers,
    long events,
    Plan* plan) {
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != kSlots) {
    return true;
  }
  PyObject* role = PyTuple_GET_ITEM(r, kRole);
  const int agent = same_str(role, n.agent);
  const int rank_role = agent ? 0 : same_str(role, n.rank);
  if (agent < 0 || rank_role < 0) {
    return false;
  }
  PyObject* event_bits = PyTuple_GET_ITEM(r, kEvents);
  PyObject* other_events = PyTuple_GET_ITEM(r, kOtherEvents);
  PyObject* parent = PyTuple_GET_ITEM(r, kParent);
  PyObject* cost = PyTuple_GET_ITEM(r, kThreadingCost);
  PyObject* passes = PyTuple_GET_ITEM(r, kPassClasses);
  if (agent || PyTuple_GET_ITEM(r, kDisabledReason) != Py_None ||
      PyTuple_GET_ITEM(r, kRanBackward) != Py_True ||
      PyTuple_GET_ITEM(r, kOtherClasses) != Py_None ||
      !PyTuple_CheckExact(other_events) || PyTuple_GET_SIZE(other_events) ||
      !PyLong_CheckExact(event_bits) ||
      (parent != Py_None &&
       (!PyTuple_CheckExact(parent) || PyTuple_GET_SIZE(parent) != 2 ||
        (PyTuple_GET_ITEM(parent, 1) != Py_None &&
         !PyUnicode_CheckExact(PyTuple_GET_ITEM(parent, 1))))) ||
      !PyUnicode_CheckExact(PyTuple_GET_ITEM(r, kJob)) ||
      !PyUnicode_CheckExact(PyTuple_GET_ITEM(r, kHost)) ||
      (cost != Py_None && !PyDict_CheckExact(cost)) ||
      (passes != Py_None && !PyTuple_CheckExact(passes))) {
    return true;
  }
  if (cost != Py_None) {
    Py_ssize_t at = 0;
    PyObject *device_class = nullptr, *value = nullptr;
    while (PyDict_Next(cost, &at, &device_class, &value)) {
      if (!PyUnicode_CheckExact(device_class) || !plain_value(value)) {
        return true;
      }
    }
  }
  if (passes != Py_None) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(passes); ++i) {
      if (!PyLong_CheckExact(PyTuple_GET_ITEM(passes, i))) {
        return true;
      }
    }
  }
  PyObject* number =
      PyDict_GetItemWithError(release_numbers, PyTuple_GET_ITEM(r, kTorch));
  if (number == nullptr) {
    return !PyErr_Occurred(); // a release not numbered yet: add() numbers it
  }
  plan->release = PyLong_AsLong(number);
  const long bits = PyLong_AsLong(event_bits);
  if (PyErr_Occurred()) {
    return false;
  }
  if (bits < 0 || bits >> events) {
    return true; // no events but the known ones
  }
  plan->keeps_parent =
      rank_role && parent != Py_None && PyTuple_GET_ITEM(parent, 1) != Py_None;
  PyObject* rank = PyTuple_GET_ITEM(r, kRank);
  plan->is_rank = rank_role && rank != Py_None;
  if (plan->is_rank) {
    plan->rank_key.p =
        PyUnicode_FromFormat("%U%c%S", PyTuple_GET_ITEM(r, kHost), 0, rank);
    if (plan->rank_key.p == nullptr) {
      return false;
    }
    plan->state = bits | plan->release << 2;
    // The job's ranks, where it has them already (a job is made only by
    // counting a record of it: an agent's makes none).
    PyObject* key = PyTuple_GET_ITEM(r, kJob);
    Ref ranks(nullptr);
    const int current = c.key.p == nullptr ? 0 : same_str(key, c.key.p);
    if (current < 0) {
      return false;
    }
    if (current) {
      Py_INCREF(c.ranks.p);
      ranks.p = c.ranks.p;
    } else {
      PyObject* job = PyDict_GetItemWithError(jobs, key);
      if (job == nullptr && PyErr_Occurred()) {
        return false;
      }
      if (job != nullptr) {
        ranks.p = PyObject_GetAttr(job, n.ranks);
        if (ranks.p == nullptr) {
          return false;
        }
        if (!PyDict_Check(ranks.p)) {
          PyErr_SetString(PyExc_TypeError, "not a JobTotals");
          return false;
        }
      }
    }
    if (ranks.p != nullptr) {
      PyObject* old = PyDict_GetItemWithError(ranks.p, plan->rank_key.p);
      if (old == nullptr && PyErr_Occurred()) {
        return false;
      }
      if (old != nullptr) {
        const long was = PyLong_AsLong(old);
        if (PyErr_Occurred()) {
          return false;
        }
        if (was >> 2 != plan->release) {
          return true; // which release is newest is add()'s rule
        }
        plan->state =
            ((was | bits) & ((1L << events) - 1)) | plan->release << 2;
      }
    }
  }
  plan->plain = true;
  return true;
}

// A str shared with every equal one kept (fleet_totals._kept: sys.intern).
PyObject* kept(PyObject* s) {
  Py_INCREF(s);
  PyUnicode_InternInPlace(&s);
  return s;
}

// FleetTotals.add's parents[job].add((host, parent pid, parent start)), each
// str kept; false with an exception set.
bool keep_parent(PyObject* r, PyObject* parents) {
  PyObject* job = PyTuple_GET_ITEM(r, kJob);
  PyObject* parent = PyTuple_GET_ITEM(r, kParent);
  PyObject* named = PyDict_GetItemWithError(parents, job);
  if (named == nullptr) {
    if (PyErr_Occurred()) {
      return false;
    }
    const Ref key(kept(job));
    const Ref made(PySet_New(nullptr));
    if (made.p == nullptr || PyDict_SetItem(parents, key.p, made.p) != 0) {
      return false;
    }
    named = made.p; // the dict holds it
  }
  const Ref host(kept(PyTuple_GET_ITEM(r, kHost)));
  const Ref started(kept(PyTuple_GET_ITEM(parent, 1)));
  const Ref entry(
      PyTuple_Pack(3, host.p, PyTuple_GET_ITEM(parent, 0), started.p));
  return entry.p != nullptr && PySet_Add(named, entry.p) == 0;
}

// Counts a plain record into its job (JobTotals.add's plain path); false
// with an exception set.
bool count_plain(
    const Names& n,
    PyObject* r,
    const Plan& plan,
    JobCache& c,
    PyObject* jobs,
    PyObject* parents,
    PyObject* class_cost,
    long events) {
  if (plan.keeps_parent && !keep_parent(r, parents)) {
    return false;
  }
  if (!c.take(n, jobs, PyTuple_GET_ITEM(r, kJob))) {
    return false;
  }
  PyObject* cost = PyTuple_GET_ITEM(r, kThreadingCost);
  if (cost != Py_None) {
    Py_ssize_t at = 0;
    PyObject *device_class = nullptr, *value = nullptr;
    while (PyDict_Next(cost, &at, &device_class, &value)) {
      // ClassCost.add
      if (!c.take_class(n, device_class, class_cost)) {
        return false;
      }
      const Ref a(PyObject_CallOneArg(
          plan.is_rank ? c.rank_append.p : c.process_append.p,
          PyTuple_GET_ITEM(value, 0)));
      const Ref b(
          a.p == nullptr
              ? nullptr
              : PyObject_CallOneArg(
                    c.difference_append.p, PyTuple_GET_ITEM(value, 1)));
      if (b.p == nullptr ||
          !add_to(c.cost.p, n.pairs, PyTuple_GET_ITEM(value, 2))) {
        return false;
      }
    }
  }
  PyObject* passes = PyTuple_GET_ITEM(r, kPassClasses);
  if (passes != Py_None) {
    const Ref one(PyLong_FromLong(1));
    PyObject* mine = c.passes.p;
    if (one.p == nullptr || !add_to(c.job.p, n.counting, one.p)) {
      return false;
    }
    if (PyList_GET_SIZE(mine) < PyTuple_GET_SIZE(passes)) {
      PyErr_SetString(PyExc_TypeError, "a job's passes are one per class");
      return false;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(passes); ++i) {
      if (!add_at(mine, i, PyTuple_GET_ITEM(passes, i))) {
        return false;
      }
    }
  }
  if (plan.is_rank) {
    const Ref state(PyLong_FromLong(plan.state));
    return state.p != nullptr &&
        PyDict_SetItem(c.ranks.p, plan.rank_key.p, state.p) == 0;
  }
  PyObject* releases = c.releases.p;
  PyObject* torch = PyTuple_GET_ITEM(r, kTorch);
  PyObject* row = PyDict_GetItemWithError(releases, torch);
  Ref made(nullptr);
  if (row == nullptr) {
    if (PyErr_Occurred()) {
      return false;
    }
    // fleet_totals._release_row: [processes, with each event].
    made.p = PyList_New(1 + events);
    if (made.p == nullptr) {
      return false;
    }
    for (Py_ssize_t i = 0; i <= events; ++i) {
      PyList_SET_ITEM(made.p, i, PyLong_FromLong(0));
      if (PyList_GET_ITEM(made.p, i) == nullptr) {
        return false;
      }
    }
    if (PyDict_SetItem(releases, torch, made.p) != 0) {
      return false;
    }
    row = made.p;
  }
  if (!PyList_Check(row) || PyList_GET_SIZE(row) != 1 + events) {
    PyErr_SetString(PyExc_TypeError, "a release's row must be a list");
    return false;
  }
  const long bits = PyLong_AsLong(PyTuple_GET_ITEM(r, kEvents));
  const Ref one(PyLong_FromLong(1));
  if (one.p == nullptr || !add_at(row, 0, one.p)) {
    return false;
  }
  for (long i = 0; i < events; ++i) {
    if ((bits >> i) & 1 && !add_at(row, 1 + i, one.p)) {
      return false;
    }
  }
  return true;
}

} // namespace

PyObject* count_records(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_SetString(
        PyExc_TypeError,
        "count_records(records, add, jobs, parents, release_numbers, "
        "class_cost, events)");
    return nullptr;
  }
  PyObject* records = args[0];
  PyObject* add = args[1];
  PyObject* jobs = args[2];
  PyObject* parents = args[3];
  PyObject* release_numbers = args[4];
  PyObject* class_cost = args[5];
  const long events = PyLong_AsLong(args[6]);
  if (events < 0 || events > 30) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "events must be from 0 to 30");
    }
    return nullptr;
  }
  const Names* n = names();
  if (n == nullptr) {
    return nullptr;
  }
  if (!PyList_Check(records) || !PyDict_Check(jobs) || !PyDict_Check(parents) ||
      !PyDict_Check(release_numbers)) {
    PyErr_SetString(
        PyExc_TypeError,
        "records must be a list, jobs, parents and release_numbers dicts");
    return nullptr;
  }
  Py_ssize_t counted = 0;
  JobCache cache;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); ++i) {
    PyObject* r = PyList_GET_ITEM(records, i);
    Plan plan;
    if (!plan_of(*n, r, cache, jobs, release_numbers, events, &plan)) {
      return nullptr;
    }
    if (plan.plain) {
      if (!count_plain(*n, r, plan, cache, jobs, parents, class_cost, events)) {
        return nullptr;
      }
      ++counted;
      continue;
    }
    const Ref done(PyObject_CallOneArg(add, r));
    if (done.p == nullptr) {
      return nullptr;
    }
  }
  return PyLong_FromSsize_t(counted);
}

} // namespace autograd_device_logging_report
