// The fleet report's making of the jobs' parts in compiled code (Note [The
// jobs' parts made in compiled code]): part of the _record_files extension,
// which needs only Python's headers.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <marshal.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "job_finishing.h"
#include "python_reference.h"

namespace autograd_device_logging_report {
namespace {

// Note [The jobs' parts made in compiled code]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Once a job's records are counted, its part of the report is made
// (fleet_totals.finished_jobs): its summary (JobTotals.ranks_by_release and
// summary, the threading cost's medians and interval), the summary in
// marshal, its light, its JSON line and its group. In Python that is about
// 25 us a job, a quarter of a re-run's counting and a second of a cold
// run's on this project's 2-core machine, nearly all of it building and
// walking small dicts. finish_jobs makes the same part from the same counts
// for the jobs of the plain shape: no counts by name (others_by_name), every
// str that goes into the line printable ASCII without a quote or a
// backslash (which JSON writes as it is), every value a finite float or an
// int of 64 bits, every class with a value. The summary is the dict
// summary() builds, key for key in the same order, made from the counts as
// Python's float arithmetic makes them (the same sorts, stable as sorted(),
// the same (a + b) / 2.0 and / 1e6), and the line is written the way
// json.JSONEncoder(sort_keys=True) writes that dict (its floats by
// float.__repr__, through the same PyOS_double_to_string). Every other job
// goes to one(job), the Python path, before anything of it is popped, so
// each job is made once, by one of the two. The order statistics' interval
// and the group stay the Python functions', called from here. A job's part
// took 9.6 us so, against 24 us in Python (at 10^6 records, the 9,220 jobs
// of a re-run). The summary is marshalled as Python marshals it, held
// twice and its counts let go first, so that marshal marks the same
// objects and the bytes are the same. test_report_cache.py holds the two
// to each other, to the byte, on random records shaped to take both paths.

// A str `s` as the line writes it, where JSON writes it as it is: printable
// ASCII, no quote or backslash; false where not (or not a str).
bool plain_text(PyObject* s, std::string* out) {
  if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s)) {
    return false;
  }
  const auto* data = static_cast<const char*>(PyUnicode_DATA(s));
  const Py_ssize_t size = PyUnicode_GET_LENGTH(s);
  for (Py_ssize_t i = 0; i < size; ++i) {
    const char c = data[i];
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
      return false;
    }
  }
  out->assign(data, static_cast<size_t>(size));
  return true;
}

// An int of 64 bits: false where `value` is not an exact int or does not
// fit, the error cleared.
bool small_int(PyObject* value, long long* out) {
  if (!PyLong_CheckExact(value)) {
    return false;
  }
  int overflow = 0;
  *out = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (overflow != 0 || (*out == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// The values of an array("d"), copied; false where it is not one.
bool doubles_of(PyObject* array, std::vector<double>* out) {
  Py_buffer view;
  if (PyObject_GetBuffer(array, &view, PyBUF_FORMAT | PyBUF_ND) != 0) {
    PyErr_Clear();
    return false;
  }
  const bool plain = view.itemsize == sizeof(double) &&
      view.format != nullptr && std::string(view.format) == "d";
  if (plain) {
    const auto* values = static_cast<const double*>(view.buf);
    out->assign(values, values + view.len / sizeof(double));
  }
  PyBuffer_Release(&view);
  if (!plain) {
    return false;
  }
  for (const double v : *out) {
    if (!std::isfinite(v)) {
      return false;
    }
  }
  return true;
}

// cost_statistics.median of values sorted as sorted() sorts them.
double median_of_sorted(const std::vector<double>& ordered) {
  const size_t n = ordered.size();
  const size_t middle = n / 2;
  return n % 2 ? ordered[middle]
               : (ordered[middle - 1] + ordered[middle]) / 2.0;
}

// sorted(values): stable, so that equal values (0.0 and -0.0) keep their
// order, as sorted() keeps it.
std::vector<double> sorted_copy(const std::vector<double>& values) {
  std::vector<double> ordered(values);
  std::stable_sort(ordered.begin(), ordered.end());
  return ordered;
}

// The strs and constants it uses, made once.
struct Names {
  // JobTotals' and ClassCost's attributes.
  PyObject* ranks = nullptr;
  PyObject* other_releases = nullptr;
  PyObject* passes = nullptr;
  PyObject* counting = nullptr;
  PyObject* left_out = nullptr;
  PyObject* costs = nullptr;
  PyObject* others_by_name = nullptr;
  PyObject* rank_values = nullptr;
  PyObject* process_values = nullptr;
  PyObject* differences = nullptr;
  PyObject* pairs = nullptr;
  // The summary's keys (also "ranks", "left_out" and "pairs" above).
  PyObject* processes = nullptr;
  PyObject* processes_with = nullptr;
  PyObject* passes_per_class = nullptr;
  PyObject* processes_counting_passes = nullptr;
  PyObject* torch = nullptr;
  PyObject* threading_cost = nullptr;
  PyObject* median_percent = nullptr;
  PyObject* interval = nullptr;
  PyObject* units = nullptr;
  PyObject* over = nullptr;
  PyObject* median_difference_ms = nullptr;
  PyObject* percent = nullptr;
  PyObject* level = nullptr;
  PyObject* meets_level = nullptr;
  // ClassCost.over()'s words: "processes" above, and these two ("runs and
  // processes" is no identifier, so not interned, as in Python).
  PyObject* runs = nullptr;
  PyObject* runs_and_processes = nullptr;
};

const Names* names() {
  static Names n;
  if (n.runs_and_processes == nullptr) {
    const std::pair<PyObject**, const char*> all[] = {
        {&n.ranks, "ranks"},
        {&n.other_releases, "other_releases"},
        {&n.passes, "passes"},
        {&n.counting, "counting"},
        {&n.left_out, "left_out"},
        {&n.costs, "costs"},
        {&n.others_by_name, "others_by_name"},
        {&n.rank_values, "rank_values"},
        {&n.process_values, "process_values"},
        {&n.differences, "differences"},
        {&n.pairs, "pairs"},
        {&n.processes, "processes"},
        {&n.processes_with, "processes_with"},
        {&n.passes_per_class, "passes_per_class"},
        {&n.processes_counting_passes, "processes_counting_passes"},
        {&n.torch, "torch"},
        {&n.threading_cost, "threading_cost"},
        {&n.median_percent, "median_percent"},
        {&n.interval, "interval"},
        {&n.units, "units"},
        {&n.over, "over"},
        {&n.median_difference_ms, "median_difference_ms"},
        {&n.percent, "percent"},
        {&n.level, "level"},
        {&n.meets_level, "meets_level"},
        {&n.runs, "runs"}};
    for (const auto& [field, text] : all) {
      // Kept for the process's life.
      *field = PyUnicode_InternFromString(text);
      if (*field == nullptr) {
        return nullptr;
      }
    }
    n.runs_and_processes = PyUnicode_FromString("runs and processes");
    if (n.runs_and_processes == nullptr) {
      return nullptr;
    }
  }
  return &n;
}

// finish_jobs' `shape`, read once per call.
struct Shape {
  std::vector<PyObject*> events; // borrowed: the events' short names
  std::vector<std::string> event_texts;
  std::vector<PyObject*> classes; // borrowed
  std::vector<std::string> class_texts;
  PyObject* interval = nullptr; // order_statistic_interval
  PyObject* level = nullptr;    // a float
  double level_value = 0.0;
  PyObject* group_of = nullptr;
  std::string agent_reason;
};

// Fills `shape` from the tuple; false with an exception set.
bool shape_of(PyObject* tuple, Shape* shape) {
  if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 6 ||
      !PyTuple_Check(PyTuple_GET_ITEM(tuple, 0)) ||
      !PyTuple_Check(PyTuple_GET_ITEM(tuple, 1)) ||
      !PyFloat_CheckExact(PyTuple_GET_ITEM(tuple, 3))) {
    PyErr_SetString(
        PyExc_TypeError,
        "shape is (events, classes, order_statistic_interval, level, "
        "group_of, agent_reason)");
    return false;
  }
  for (int which = 0; which < 2; ++which) {
    PyObject* words = PyTuple_GET_ITEM(tuple, which);
    auto& objects = which == 0 ? shape->events : shape->classes;
    auto& texts = which == 0 ? shape->event_texts : shape->class_texts;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(words); ++i) {
      std::string text;
      if (!plain_text(PyTuple_GET_ITEM(words, i), &text)) {
        PyErr_SetString(
            PyExc_ValueError, "events and classes must be plain ASCII strs");
        return false;
      }
      objects.push_back(PyTuple_GET_ITEM(words, i));
      texts.push_back(std::move(text));
    }
  }
  if (shape->events.size() > 30) {
    PyErr_SetString(PyExc_ValueError, "at most 30 events");
    return false;
  }
  shape->interval = PyTuple_GET_ITEM(tuple, 2);
  shape->level = PyTuple_GET_ITEM(tuple, 3);
  shape->level_value = PyFloat_AS_DOUBLE(shape->level);
  shape->group_of = PyTuple_GET_ITEM(tuple, 4);
  if (!plain_text(PyTuple_GET_ITEM(tuple, 5), &shape->agent_reason)) {
    PyErr_SetString(PyExc_ValueError, "the agent's reason must be plain ASCII");
    return false;
  }
  return true;
}

// A release's row: [processes, with each event].
using Row = std::vector<long long>;

struct Release {
  PyObject* name; // borrowed from `names` or the job's other_releases
  std::string text;
  Row row;
};

// One class's ClassCost.summary(), as numbers.
struct ClassSummary {
  PyObject* name; // borrowed: the class's str in `shape` or in costs
  std::string text;
  double median_percent = 0.0;
  // order_statistic_interval(units)'s (k, coverage), where there are two
  // units or more (held by JobSummary::owned).
  PyObject* found = nullptr;
  double low = 0.0, high = 0.0, coverage = 0.0;
  long long units = 0;
  PyObject* over = nullptr; // borrowed, one of Names' words
  const char* over_text = nullptr;
  long long processes = 0, ranks = 0, pairs = 0;
  double median_difference_ms = 0.0;
};

// One job's summary, as numbers, before any of it is a Python object.
struct JobSummary {
  long long processes = 0;
  long long ranks = 0;
  std::vector<long long> with_event;
  bool has_passes = false;
  std::vector<long long> passes;
  long long counting = 0;
  // The ranks' rows per release (ranks_by_release), then the rows of
  // those rows and the other processes' together (FleetTotals.results).
  std::vector<Release> by_release;
  std::vector<Release> rows;
  // sorted({*other_releases, *by_release}): the strs, sorted.
  std::vector<std::pair<std::string, PyObject*>> torch;
  // sorted(left_out.items()).
  std::vector<std::pair<std::string, std::pair<PyObject*, long long>>> left_out;
  std::vector<ClassSummary> costs;
  // The references it holds (the intervals' (k, coverage)).
  std::vector<PyObject*> owned;

  JobSummary() = default;
  JobSummary(const JobSummary&) = delete;
  JobSummary& operator=(const JobSummary&) = delete;
  ~JobSummary() {
    for (PyObject* object : owned) {
      Py_DECREF(object);
    }
  }
};

bool add_checked(long long* total, long long value) {
  return !__builtin_add_overflow(*total, value, total);
}

// The row of ints `list` (a list of 1 + events ints); false where not.
bool row_of(PyObject* list, size_t events, Row* row) {
  if (!PyList_CheckExact(list) ||
      static_cast<size_t>(PyList_GET_SIZE(list)) != 1 + events) {
    return false;
  }
  row->resize(1 + events);
  for (size_t i = 0; i <= events; ++i) {
    if (!small_int(PyList_GET_ITEM(list, i), &(*row)[i])) {
      return false;
    }
  }
  return true;
}

// The attribute `name` of `object`; nullptr with no exception where it has
// none (not the shape expected), with one where it failed otherwise.
PyObject* attribute(PyObject* object, PyObject* name) {
  PyObject* value = PyObject_GetAttr(object, name);
  if (value == nullptr && PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
  }
  return value;
}

// ClassCost.summary() of `cost` into `out`: 1 done, 0 not the plain shape,
// -1 an error.
int class_summary(
    const Names& n,
    const Shape& shape,
    PyObject* cost,
    ClassSummary* out,
    std::vector<PyObject*>* owned) {
  std::vector<double> rank_values, process_values, differences;
  PyObject* attributes[] = {n.rank_values, n.process_values, n.differences};
  std::vector<double>* arrays[] = {&rank_values, &process_values, &differences};
  for (int i = 0; i < 3; ++i) {
    const Ref values(attribute(cost, attributes[i]));
    if (values.p == nullptr) {
      return PyErr_Occurred() ? -1 : 0;
    }
    if (!doubles_of(values.p, arrays[i])) {
      return 0;
    }
  }
  const Ref pairs(attribute(cost, n.pairs));
  if (pairs.p == nullptr) {
    return PyErr_Occurred() ? -1 : 0;
  }
  if (!small_int(pairs.p, &out->pairs) || differences.empty()) {
    return 0;
  }
  // ClassCost.units(): the processes' values, then the ranks' median.
  std::vector<double> units(process_values);
  if (!rank_values.empty()) {
    units.push_back(median_of_sorted(sorted_copy(rank_values)));
  }
  if (units.empty()) {
    return 0;
  }
  const std::vector<double> ordered = sorted_copy(units);
  out->median_percent = median_of_sorted(ordered);
  const bool runs = !rank_values.empty();
  if (runs && !process_values.empty()) {
    out->over = n.runs_and_processes;
    out->over_text = "runs and processes";
  } else if (runs) {
    out->over = n.runs;
    out->over_text = "runs";
  } else {
    out->over = n.processes;
    out->over_text = "processes";
  }
  out->units = static_cast<long long>(units.size());
  if (units.size() >= 2) {
    // median_interval: order_statistic_interval(n, level), as it calls it.
    const Ref count(PyLong_FromSsize_t(static_cast<Py_ssize_t>(units.size())));
    if (count.p == nullptr) {
      return -1;
    }
    PyObject* call[] = {count.p, shape.level};
    PyObject* found = PyObject_Vectorcall(shape.interval, call, 2, nullptr);
    if (found == nullptr) {
      return -1;
    }
    owned->push_back(found);
    out->found = found;
    long long k = 0;
    if (!PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) != 2 ||
        !small_int(PyTuple_GET_ITEM(found, 0), &k) ||
        !PyFloat_CheckExact(PyTuple_GET_ITEM(found, 1)) || k < 1 ||
        k > out->units) {
      return 0;
    }
    out->coverage = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(found, 1));
    if (!std::isfinite(out->coverage)) {
      return 0;
    }
    out->low = ordered[static_cast<size_t>(k - 1)];
    out->high = ordered[static_cast<size_t>(out->units - k)];
  }
  out->processes = static_cast<long long>(differences.size());
  out->ranks = static_cast<long long>(rank_values.size());
  out->median_difference_ms = median_of_sorted(sorted_copy(differences)) / 1e6;
  return std::isfinite(out->median_difference_ms) ? 1 : 0;
}

// The release `name`'s entry of `releases` (made where new, in order of
// first appearance); nullptr where `name` is not a plain str.
Release*
release_in(std::vector<Release>& releases, PyObject* name, size_t events) {
  for (auto& release : releases) {
    if (release.name == name) {
      return &release;
    }
  }
  std::string text;
  if (!plain_text(name, &text)) {
    return nullptr;
  }
  for (auto& release : releases) {
    if (release.text == text) {
      return &release;
    }
  }
  releases.push_back({name, std::move(text), Row(1 + events, 0)});
  return &releases.back();
}

// JobTotals.ranks_by_release and summary of `t` into `out`, and the rows
// FleetTotals.results keeps: 1 done, 0 not the plain shape, -1 an error.
int job_summary(
    const Names& n,
    const Shape& shape,
    PyObject* t,
    PyObject* release_names,
    JobSummary* out) {
  const size_t events = shape.events.size();
  const Ref by_name(attribute(t, n.others_by_name));
  if (by_name.p != Py_None) {
    return by_name.p == nullptr && PyErr_Occurred() ? -1 : 0;
  }
  const Ref ranks(attribute(t, n.ranks));
  const Ref other_releases(attribute(t, n.other_releases));
  const Ref passes(attribute(t, n.passes));
  const Ref counting(attribute(t, n.counting));
  const Ref left_out(attribute(t, n.left_out));
  const Ref costs(attribute(t, n.costs));
  if (ranks.p == nullptr || other_releases.p == nullptr ||
      passes.p == nullptr || counting.p == nullptr || left_out.p == nullptr ||
      costs.p == nullptr) {
    return PyErr_Occurred() ? -1 : 0;
  }
  if (!PyDict_CheckExact(ranks.p) || !PyDict_CheckExact(other_releases.p) ||
      !PyList_CheckExact(passes.p) || !PyDict_Check(left_out.p) ||
      !PyDict_CheckExact(costs.p) || !small_int(counting.p, &out->counting) ||
      !PyList_CheckExact(release_names)) {
    return 0;
  }
  // ranks_by_release: each state counted once, in order of first
  // appearance, then its ranks added to its release's row.
  std::vector<std::pair<long long, long long>> states;
  Py_ssize_t at = 0;
  PyObject *key = nullptr, *value = nullptr;
  while (PyDict_Next(ranks.p, &at, &key, &value)) {
    long long state = 0;
    if (!small_int(value, &state) || state < 0) {
      return 0;
    }
    auto found = std::find_if(states.begin(), states.end(), [&](auto& s) {
      return s.first == state;
    });
    if (found == states.end()) {
      states.emplace_back(state, 1);
    } else {
      ++found->second;
    }
  }
  for (const auto& [state, count] : states) {
    const long long number = state >> 2;
    if (number >= PyList_GET_SIZE(release_names)) {
      return 0;
    }
    Release* release = release_in(
        out->by_release, PyList_GET_ITEM(release_names, number), events);
    if (release == nullptr || !add_checked(&release->row[0], count)) {
      return 0;
    }
    for (size_t i = 0; i < events; ++i) {
      if ((state >> i) & 1 && !add_checked(&release->row[1 + i], count)) {
        return 0;
      }
    }
  }
  // summary()
  out->ranks = PyDict_GET_SIZE(ranks.p);
  out->processes = out->ranks;
  out->with_event.assign(events, 0);
  out->rows = out->by_release;
  at = 0;
  while (PyDict_Next(other_releases.p, &at, &key, &value)) {
    Row row;
    if (!row_of(value, events, &row) || !add_checked(&out->processes, row[0])) {
      return 0;
    }
    Release* merged = release_in(out->rows, key, events);
    if (merged == nullptr) {
      return 0;
    }
    for (size_t i = 0; i <= events; ++i) {
      if (!add_checked(&merged->row[i], row[i]) ||
          (i > 0 && !add_checked(&out->with_event[i - 1], row[i]))) {
        return 0;
      }
    }
  }
  for (const auto& release : out->by_release) {
    for (size_t i = 0; i < events; ++i) {
      if (!add_checked(&out->with_event[i], release.row[1 + i])) {
        return 0;
      }
    }
  }
  out->has_passes = out->counting != 0;
  if (out->has_passes) {
    if (static_cast<size_t>(PyList_GET_SIZE(passes.p)) !=
        shape.classes.size()) {
      return 0;
    }
    out->passes.resize(shape.classes.size());
    for (size_t i = 0; i < shape.classes.size(); ++i) {
      if (!small_int(PyList_GET_ITEM(passes.p, i), &out->passes[i])) {
        return 0;
      }
    }
  }
  for (const auto& release : out->rows) {
    out->torch.emplace_back(release.text, release.name);
  }
  // {*other_releases, *by_release}: an equal str keeps the first one met.
  std::stable_sort(
      out->torch.begin(), out->torch.end(), [](const auto& a, const auto& b) {
        return a.first < b.first;
      });
  at = 0;
  while (PyDict_Next(left_out.p, &at, &key, &value)) {
    std::string text;
    long long count = 0;
    if (!plain_text(key, &text) || !small_int(value, &count)) {
      return 0;
    }
    out->left_out.push_back({std::move(text), {key, count}});
  }
  std::sort(
      out->left_out.begin(),
      out->left_out.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  // summaries_of(costs, classes): the known classes in their order, then
  // the others by name.
  std::vector<std::pair<std::string, PyObject*>> others;
  std::vector<bool> known(shape.classes.size(), false);
  at = 0;
  while (PyDict_Next(costs.p, &at, &key, &value)) {
    std::string text;
    if (!plain_text(key, &text)) {
      return 0;
    }
    const auto place =
        std::find(shape.class_texts.begin(), shape.class_texts.end(), text);
    if (place == shape.class_texts.end()) {
      others.emplace_back(std::move(text), key);
    } else {
      known[place - shape.class_texts.begin()] = true;
    }
  }
  std::sort(others.begin(), others.end(), [](const auto& a, const auto& b) {
    return a.first < b.first;
  });
  std::vector<std::pair<std::string, PyObject*>> order;
  for (size_t i = 0; i < known.size(); ++i) {
    if (known[i]) {
      order.emplace_back(shape.class_texts[i], shape.classes[i]);
    }
  }
  order.insert(order.end(), others.begin(), others.end());
  out->costs.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    PyObject* cost = PyDict_GetItemWithError(costs.p, order[i].second);
    if (cost == nullptr) {
      return PyErr_Occurred() ? -1 : 0;
    }
    const int made = class_summary(n, shape, cost, &out->costs[i], &out->owned);
    if (made != 1) {
      return made;
    }
    out->costs[i].name = order[i].second;
    out->costs[i].text = order[i].first;
  }
  return 1;
}

// Appends float.__repr__(value) (json's encoding of a finite float);
// false with an exception set.
bool append_float(std::string* line, double value) {
  char* text = PyOS_double_to_string(value, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
  if (text == nullptr) {
    return false;
  }
  line->append(text);
  PyMem_Free(text);
  return true;
}

void append_key(std::string* line, const std::string& key) {
  line->push_back('"');
  line->append(key);
  line->append("\": ");
}

// The job's line: json.JSONEncoder(sort_keys=True).encode of its summary
// with `joined` torchrun agents left out (fleet_totals._with_agents);
// false with an exception set, or with none where a count does not fit in
// 64 bits (the Python path's then).
bool line_of(
    const Shape& shape,
    const JobSummary& s,
    long long joined,
    std::string* line) {
  auto by_text = [](const auto& a, const auto& b) { return a.first < b.first; };
  // Each dict's items in the order of their keys.
  std::vector<std::pair<std::string, long long>> left_out;
  bool agents_counted = joined == 0;
  for (const auto& [text, item] : s.left_out) {
    long long count = item.second;
    if (!agents_counted && text == shape.agent_reason) {
      if (!add_checked(&count, joined)) {
        return false;
      }
      agents_counted = true;
    }
    left_out.emplace_back(text, count);
  }
  if (!agents_counted) {
    left_out.emplace_back(shape.agent_reason, joined);
    std::sort(left_out.begin(), left_out.end(), by_text);
  }
  auto write_counts =
      [&](const std::vector<std::pair<std::string, long long>>& items) {
        line->push_back('{');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) {
            line->append(", ");
          }
          append_key(line, items[i].first);
          line->append(std::to_string(items[i].second));
        }
        line->push_back('}');
      };
  line->push_back('{');
  append_key(line, "left_out");
  write_counts(left_out);
  line->append(", ");
  append_key(line, "passes_per_class");
  if (s.has_passes) {
    std::vector<std::pair<std::string, long long>> passes;
    for (size_t i = 0; i < s.passes.size(); ++i) {
      passes.emplace_back(shape.class_texts[i], s.passes[i]);
    }
    std::sort(passes.begin(), passes.end(), by_text);
    write_counts(passes);
  } else {
    line->append("null");
  }
  line->append(", ");
  append_key(line, "processes");
  line->append(std::to_string(s.processes));
  line->append(", ");
  append_key(line, "processes_counting_passes");
  line->append(std::to_string(s.counting));
  line->append(", ");
  append_key(line, "processes_with");
  std::vector<std::pair<std::string, long long>> with_event;
  for (size_t i = 0; i < s.with_event.size(); ++i) {
    with_event.emplace_back(shape.event_texts[i], s.with_event[i]);
  }
  std::sort(with_event.begin(), with_event.end(), by_text);
  write_counts(with_event);
  line->append(", ");
  append_key(line, "ranks");
  line->append(std::to_string(s.ranks));
  line->append(", ");
  append_key(line, "threading_cost");
  if (s.costs.empty()) {
    line->append("null");
  } else {
    std::vector<const ClassSummary*> costs;
    for (const auto& c : s.costs) {
      costs.push_back(&c);
    }
    std::sort(costs.begin(), costs.end(), [](const auto* a, const auto* b) {
      return a->text < b->text;
    });
    line->push_back('{');
    for (size_t i = 0; i < costs.size(); ++i) {
      const ClassSummary& c = *costs[i];
      if (i) {
        line->append(", ");
      }
      append_key(line, c.text);
      line->push_back('{');
      append_key(line, "interval");
      if (c.found == nullptr) {
        line->append("null");
      } else {
        line->push_back('{');
        append_key(line, "level");
        if (!append_float(line, c.coverage)) {
          return false;
        }
        line->append(", ");
        append_key(line, "meets_level");
        line->append(c.coverage >= shape.level_value ? "true" : "false");
        line->append(", ");
        append_key(line, "over");
        line->push_back('"');
        line->append(c.over_text);
        line->append("\", ");
        append_key(line, "percent");
        line->push_back('[');
        if (!append_float(line, c.low)) {
          return false;
        }
        line->append(", ");
        if (!append_float(line, c.high)) {
          return false;
        }
        line->append("], ");
        append_key(line, "units");
        line->append(std::to_string(c.units));
        line->push_back('}');
      }
      line->append(", ");
      append_key(line, "median_difference_ms");
      if (!append_float(line, c.median_difference_ms)) {
        return false;
      }
      line->append(", ");
      append_key(line, "median_percent");
      if (!append_float(line, c.median_percent)) {
        return false;
      }
      line->append(", ");
      append_key(line, "over");
      line->push_back('"');
      line->append(c.over_text);
      line->append("\", ");
      append_key(line, "pairs");
      line->append(std::to_string(c.pairs));
      line->append(", ");
      append_key(line, "processes");
      line->append(std::to_string(c.processes));
      line->append(", ");
      append_key(line, "ranks");
      line->append(std::to_string(c.ranks));
      line->append(", ");
      append_key(line, "units");
      line->append(std::to_string(c.units));
      line->push_back('}');
    }
    line->push_back('}');
  }
  line->append(", ");
  append_key(line, "torch");
  line->push_back('[');
  for (size_t i = 0; i < s.torch.size(); ++i) {
    if (i) {
      line->append(", ");
    }
    line->push_back('"');
    line->append(s.torch[i].first);
    line->push_back('"');
  }
  line->append("]}");
  return true;
}

// A dict of `keys` (borrowed) and `values` (each a new reference, stolen,
// nullptr where making it failed), in order; nullptr with an exception set.
PyObject* dict_of(
    std::initializer_list<PyObject*> keys,
    std::initializer_list<PyObject*> values) {
  Ref dict(PyDict_New());
  bool ok = dict.p != nullptr;
  auto key = keys.begin();
  for (PyObject* value : values) {
    ok = ok && value != nullptr && PyDict_SetItem(dict.p, *key, value) == 0;
    Py_XDECREF(value);
    ++key;
  }
  return ok ? dict.release() : nullptr;
}

// A tuple of `values` (each a new reference, stolen, nullptr where making
// it failed); nullptr with an exception set.
PyObject* tuple_of(std::initializer_list<PyObject*> values) {
  Ref tuple(PyTuple_New(static_cast<Py_ssize_t>(values.size())));
  bool ok = tuple.p != nullptr;
  Py_ssize_t i = 0;
  for (PyObject* value : values) {
    if (ok && value != nullptr) {
      PyTuple_SET_ITEM(tuple.p, i, value);
    } else {
      ok = false;
      Py_XDECREF(value);
    }
    ++i;
  }
  return ok ? tuple.release() : nullptr;
}

PyObject* new_ref(PyObject* object) {
  Py_INCREF(object);
  return object;
}

// A Python list of a row's ints.
PyObject* list_of(const Row& row) {
  Ref list(PyList_New(static_cast<Py_ssize_t>(row.size())));
  if (list.p == nullptr) {
    return nullptr;
  }
  for (size_t i = 0; i < row.size(); ++i) {
    PyObject* value = PyLong_FromLongLong(row[i]);
    if (value == nullptr) {
      return nullptr;
    }
    PyList_SET_ITEM(list.p, static_cast<Py_ssize_t>(i), value);
  }
  return list.release();
}

// (key, value) pairs as a dict (`as_dict`) or as light_of's tuple of
// tuples; nullptr with an exception set.
template <typename Items, typename Key, typename Value>
PyObject* items_of(const Items& items, bool as_dict, Key key, Value value) {
  Ref out(
      as_dict ? PyDict_New()
              : PyTuple_New(static_cast<Py_ssize_t>(items.size())));
  if (out.p == nullptr) {
    return nullptr;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    PyObject* k = key(i);
    Ref v(value(i));
    if (v.p == nullptr) {
      return nullptr;
    }
    if (as_dict) {
      if (PyDict_SetItem(out.p, k, v.p) != 0) {
        return nullptr;
      }
    } else {
      PyObject* pair = PyTuple_Pack(2, k, v.p);
      if (pair == nullptr) {
        return nullptr;
      }
      PyTuple_SET_ITEM(out.p, static_cast<Py_ssize_t>(i), pair);
    }
  }
  return out.release();
}

// The summary dict, as JobTotals.summary builds it.
PyObject*
summary_dict(const Names& n, const Shape& shape, const JobSummary& s) {
  Ref costs(Py_None);
  Py_INCREF(Py_None);
  if (!s.costs.empty()) {
    Py_DECREF(costs.release());
    costs.p = PyDict_New();
    if (costs.p == nullptr) {
      return nullptr;
    }
    for (const auto& c : s.costs) {
      PyObject* interval = Py_None;
      Py_INCREF(Py_None);
      if (c.found != nullptr) {
        Py_DECREF(interval);
        PyObject* percent = PyList_New(2);
        if (percent != nullptr) {
          PyObject* low = PyFloat_FromDouble(c.low);
          PyObject* high = PyFloat_FromDouble(c.high);
          if (low == nullptr || high == nullptr) {
            Py_XDECREF(low);
            Py_XDECREF(high);
            Py_CLEAR(percent);
          } else {
            PyList_SET_ITEM(percent, 0, low);
            PyList_SET_ITEM(percent, 1, high);
          }
        }
        interval = dict_of(
            {n.percent, n.level, n.meets_level, n.units, n.over},
            {percent,
             new_ref(PyTuple_GET_ITEM(c.found, 1)),
             PyBool_FromLong(c.coverage >= shape.level_value),
             PyLong_FromLongLong(c.units),
             new_ref(c.over)});
      }
      const Ref one(dict_of(
          {n.median_percent,
           n.interval,
           n.units,
           n.over,
           n.processes,
           n.ranks,
           n.pairs,
           n.median_difference_ms},
          {PyFloat_FromDouble(c.median_percent),
           interval,
           PyLong_FromLongLong(c.units),
           new_ref(c.over),
           PyLong_FromLongLong(c.processes),
           PyLong_FromLongLong(c.ranks),
           PyLong_FromLongLong(c.pairs),
           PyFloat_FromDouble(c.median_difference_ms)}));
      if (one.p == nullptr || PyDict_SetItem(costs.p, c.name, one.p) != 0) {
        return nullptr;
      }
    }
  }
  PyObject* passes = Py_None;
  Py_INCREF(Py_None);
  if (s.has_passes) {
    Py_DECREF(passes);
    passes = items_of(
        s.passes,
        true,
        [&](size_t i) { return shape.classes[i]; },
        [&](size_t i) { return PyLong_FromLongLong(s.passes[i]); });
  }
  PyObject* torch = PyList_New(static_cast<Py_ssize_t>(s.torch.size()));
  for (size_t i = 0; torch != nullptr && i < s.torch.size(); ++i) {
    PyList_SET_ITEM(
        torch, static_cast<Py_ssize_t>(i), new_ref(s.torch[i].second));
  }
  return dict_of(
      {n.processes,
       n.ranks,
       n.processes_with,
       n.passes_per_class,
       n.processes_counting_passes,
       n.torch,
       n.left_out,
       n.threading_cost},
      {PyLong_FromLongLong(s.processes),
       PyLong_FromLongLong(s.ranks),
       items_of(
           s.with_event,
           true,
           [&](size_t i) { return shape.events[i]; },
           [&](size_t i) { return PyLong_FromLongLong(s.with_event[i]); }),
       passes,
       PyLong_FromLongLong(s.counting),
       torch,
       items_of(
           s.left_out,
           true,
           [&](size_t i) { return s.left_out[i].second.first; },
           [&](size_t i) {
             return PyLong_FromLongLong(s.left_out[i].second.second);
           }),
       costs.release()});
}

// light_of(summary), of the summary's own objects (borrowed from it).
PyObject* light_of(const Names& n, PyObject* summary) {
  auto get = [&](PyObject* key) { return PyDict_GetItem(summary, key); };
  auto items = [](PyObject* dict) -> PyObject* {
    if (dict == Py_None) {
      return new_ref(Py_None);
    }
    Ref list(PyDict_Items(dict));
    return list.p == nullptr ? nullptr : PyList_AsTuple(list.p);
  };
  PyObject* costs = get(n.threading_cost);
  Ref votes(new_ref(Py_None));
  if (costs != Py_None) {
    Py_DECREF(votes.release());
    votes.p = PyTuple_New(PyDict_GET_SIZE(costs));
    if (votes.p == nullptr) {
      return nullptr;
    }
    Py_ssize_t at = 0, i = 0;
    PyObject *name = nullptr, *v = nullptr;
    while (PyDict_Next(costs, &at, &name, &v)) {
      PyObject* vote = tuple_of(
          {new_ref(PyDict_GetItem(v, n.median_percent)),
           new_ref(PyDict_GetItem(v, n.processes)),
           new_ref(PyDict_GetItem(v, n.ranks)),
           new_ref(PyDict_GetItem(v, n.pairs)),
           new_ref(PyDict_GetItem(v, n.median_difference_ms))});
      PyObject* pair =
          vote == nullptr ? nullptr : tuple_of({new_ref(name), vote});
      if (pair == nullptr) {
        return nullptr;
      }
      PyTuple_SET_ITEM(votes.p, i++, pair);
    }
  }
  PyObject* torch = get(n.torch);
  return tuple_of(
      {new_ref(get(n.processes)),
       new_ref(get(n.ranks)),
       items(get(n.processes_with)),
       items(get(n.passes_per_class)),
       new_ref(get(n.processes_counting_passes)),
       PyList_AsTuple(torch),
       items(get(n.left_out)),
       votes.release()});
}

// tuple(sorted(container.pop(job, ()))) of a dict; nullptr with an
// exception set.
PyObject* sorted_popped(PyObject* container, PyObject* job) {
  if (!PyDict_Check(container)) {
    PyErr_SetString(PyExc_TypeError, "parents and agents must be dicts");
    return nullptr;
  }
  PyObject* named = PyDict_GetItemWithError(container, job);
  if (named == nullptr) {
    return PyErr_Occurred() ? nullptr : PyTuple_New(0);
  }
  Ref list(PySequence_List(named));
  if (list.p == nullptr || PyList_Sort(list.p) != 0 ||
      PyDict_DelItem(container, job) != 0) {
    return nullptr;
  }
  return PyList_AsTuple(list.p);
}

// container.pop(job, 0) of a dict (a Counter); nullptr with an exception
// set.
PyObject* count_popped(PyObject* container, PyObject* job) {
  if (!PyDict_Check(container)) {
    PyErr_SetString(PyExc_TypeError, "filtered must be a dict");
    return nullptr;
  }
  PyObject* count = PyDict_GetItemWithError(container, job);
  if (count == nullptr) {
    return PyErr_Occurred() ? nullptr : PyLong_FromLong(0);
  }
  Py_INCREF(count);
  if (PyDict_DelItem(container, job) != 0) {
    Py_DECREF(count);
    return nullptr;
  }
  return count;
}

// The job's KeptJob, made here; nullptr with an exception set, or with
// none where the job is not of the plain shape (nothing of it popped).
PyObject* finish_one(
    const Names& n,
    const Shape& shape,
    PyObject* job,
    PyObject* jobs,
    PyObject* parents,
    PyObject* agents,
    PyObject* filtered,
    PyObject* release_names) {
  PyObject* t = PyDict_GetItemWithError(jobs, job);
  if (t == nullptr) {
    return nullptr; // no counts: the Python path's summary None
  }
  // Held until the summary is made: `s` borrows its strs.
  Ref counts(new_ref(t));
  JobSummary s;
  if (job_summary(n, shape, t, release_names, &s) != 1) {
    return nullptr;
  }
  // The line, for the job's own agents (kept_job's), before anything is
  // popped: a count it cannot add in 64 bits leaves the job to Python.
  if (!PyDict_Check(agents)) {
    PyErr_SetString(PyExc_TypeError, "parents and agents must be dicts");
    return nullptr;
  }
  PyObject* own_agents = PyDict_GetItemWithError(agents, job);
  if (own_agents == nullptr && PyErr_Occurred()) {
    return nullptr;
  }
  const Py_ssize_t joined =
      own_agents == nullptr ? 0 : PyObject_Length(own_agents);
  std::string text;
  if (joined < 0 || !line_of(shape, s, joined, &text)) {
    return nullptr;
  }
  // Everything read: popped as FleetTotals.results pops.
  if (PyDict_DelItem(jobs, job) != 0) {
    return nullptr;
  }
  const Ref sorted_parents(sorted_popped(parents, job));
  const Ref sorted_agents(
      sorted_parents.p == nullptr ? nullptr : sorted_popped(agents, job));
  const Ref filtered_out(
      sorted_agents.p == nullptr ? nullptr : count_popped(filtered, job));
  if (filtered_out.p == nullptr) {
    return nullptr;
  }
  const Ref summary(summary_dict(n, shape, s));
  if (summary.p == nullptr) {
    return nullptr;
  }
  Ref rows(PyDict_New());
  if (rows.p == nullptr) {
    return nullptr;
  }
  for (const auto& release : s.rows) {
    const Ref row(list_of(release.row));
    if (row.p == nullptr || PyDict_SetItem(rows.p, release.name, row.p) != 0) {
      return nullptr;
    }
  }
  // The counts let go before the summary is marshalled, as in Python,
  // where they are gone by then (marshal marks what other objects hold
  // too).
  Py_DECREF(counts.release());
  // Held twice, as Python holds it there (in the job's result and in
  // kept_job): marshal writes the same bytes.
  const Ref again(new_ref(summary.p));
  PyObject* marshalled =
      PyMarshal_WriteObjectToString(summary.p, Py_MARSHAL_VERSION);
  return tuple_of(
      {marshalled,
       rows.release(),
       new_ref(sorted_parents.p),
       new_ref(sorted_agents.p),
       new_ref(filtered_out.p),
       marshalled == nullptr ? nullptr : light_of(n, summary.p),
       PyUnicode_FromStringAndSize(
           text.data(), static_cast<Py_ssize_t>(text.size())),
       PyLong_FromLongLong(joined),
       PyObject_CallOneArg(shape.group_of, job)});
}

} // namespace

PyObject* finish_jobs(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_SetString(
        PyExc_TypeError,
        "finish_jobs(counted, jobs, parents, agents, filtered, names, one, "
        "out, shape)");
    return nullptr;
  }
  PyObject* counted = args[0];
  PyObject* jobs = args[1];
  PyObject* parents = args[2];
  PyObject* agents = args[3];
  PyObject* filtered = args[4];
  PyObject* release_names = args[5];
  PyObject* one = args[6];
  PyObject* out = args[7];
  if (!PyList_Check(counted) || !PyDict_Check(jobs) || !PyDict_Check(out)) {
    PyErr_SetString(
        PyExc_TypeError, "counted must be a list, jobs and out dicts");
    return nullptr;
  }
  const Names* n = names();
  Shape shape;
  if (n == nullptr || !shape_of(args[8], &shape)) {
    return nullptr;
  }
  Py_ssize_t made = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(counted); ++i) {
    PyObject* job = PyList_GET_ITEM(counted, i);
    Ref kept(finish_one(
        *n, shape, job, jobs, parents, agents, filtered, release_names));
    if (kept.p != nullptr) {
      ++made;
    } else if (PyErr_Occurred()) {
      return nullptr;
    } else {
      kept.p = PyObject_CallOneArg(one, job);
      if (kept.p == nullptr) {
        return nullptr;
      }
    }
    if (PyDict_SetItem(out, job, kept.p) != 0) {
      return nullptr;
    }
  }
  return PyLong_FromSsize_t(made);
}

} // namespace autograd_device_logging_report
