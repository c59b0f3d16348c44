// The fleet report's values of a record's measured pairs, from the pairs'
// JSON text (Note [The pairs' values in compiled code], record_decoder.py).
// A CPython extension of its own: the report loads neither torch nor the
// library, so this links neither.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <simdjson.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Each of a pair's durations, and their difference, is an integer a double
// holds exactly up to here; then a ratio and a median below are the very
// doubles cost_statistics.process_value's int arithmetic gives.
constexpr uint64_t kExactInDouble = uint64_t{1} << 53;

struct Scratch {
  simdjson::dom::parser parser;
  std::string padded;
  std::vector<double> ratios;
  std::vector<int64_t> differences;
};

// Owns one reference, so that no path, a C++ exception's included, leaks it.
struct Ref {
  PyObject* p;
  explicit Ref(PyObject* object) : p(object) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  ~Ref() {
    Py_XDECREF(p);
  }
};

Scratch& scratch() {
  // Used only with the GIL held (nothing here releases it).
  static Scratch s;
  return s;
}

// cost_statistics.process_value of the pairs in `ratios`/`differences`: the
// same middle elements, found by selection rather than a full sort.
void median_values(Scratch& s, double* percent, double* difference) {
  auto& r = s.ratios;
  auto& d = s.differences;
  const size_t n = r.size();
  const size_t m = n / 2;
  std::nth_element(r.begin(), r.begin() + m, r.end());
  std::nth_element(d.begin(), d.begin() + m, d.end());
  if (n % 2) {
    *percent = 100.0 * r[m];
    *difference = static_cast<double>(d[m]);
  } else {
    // The largest of those below the middle is the (m - 1)-th smallest.
    const double r_low = *std::max_element(r.begin(), r.begin() + m);
    const int64_t d_low = *std::max_element(d.begin(), d.begin() + m);
    *percent = 50.0 * (r_low + r[m]);
    *difference = static_cast<double>(d_low + d[m]) / 2.0;
  }
}

// Fills `out` with {class: (percent, difference in ns, pairs)} for each
// class with pairs, as record_decoder's Python path does; false to leave the
// record to that path: anything but classes of [off, on] pairs of integers
// from 1 to 2^53, at most `max_pairs` of them, each class named once.
bool values_of(
    Scratch& s,
    std::string_view text,
    size_t max_pairs,
    PyObject* out) {
  s.padded.assign(text.data(), text.size());
  s.padded.append(simdjson::SIMDJSON_PADDING, ' ');
  simdjson::dom::element root;
  if (s.parser.parse(s.padded.data(), text.size(), false).get(root)) {
    return false;
  }
  simdjson::dom::object classes;
  if (root.get_object().get(classes)) {
    return false;
  }
  const Ref seen(PySet_New(nullptr));
  if (seen.p == nullptr) {
    return false;
  }
  for (auto [name, value] : classes) {
    simdjson::dom::array pairs;
    if (value.get_array().get(pairs) || pairs.size() > max_pairs) {
      return false;
    }
    s.ratios.clear();
    s.differences.clear();
    for (simdjson::dom::element item : pairs) {
      simdjson::dom::array pair;
      uint64_t off = 0, on = 0;
      if (item.get_array().get(pair) || pair.size() != 2 ||
          pair.at(0).get_uint64().get(off) || pair.at(1).get_uint64().get(on) ||
          off < 1 || on < 1 || off > kExactInDouble || on > kExactInDouble) {
        return false;
      }
      const int64_t d = static_cast<int64_t>(off) - static_cast<int64_t>(on);
      s.differences.push_back(d);
      s.ratios.push_back(static_cast<double>(d) / static_cast<double>(on));
    }
    const Ref key(PyUnicode_DecodeUTF8(name.data(), name.size(), nullptr));
    if (key.p == nullptr || PySet_Contains(seen.p, key.p) != 0 ||
        PySet_Add(seen.p, key.p) != 0) {
      // A class named twice: which pairs count is the Python path's call.
      return false;
    }
    if (!s.ratios.empty()) {
      double percent = 0, difference = 0;
      median_values(s, &percent, &difference);
      const Ref v(Py_BuildValue(
          "(ddn)", percent, difference, Py_ssize_t(s.ratios.size())));
      if (v.p == nullptr || PyDict_SetItem(out, key.p, v.p) != 0) {
        return false;
      }
    }
  }
  return true;
}

PyObject* pairs_values(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "pairs_values(text, max_pairs)");
    return nullptr;
  }
  Py_buffer buffer;
  if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) != 0) {
    return nullptr;
  }
  const Py_ssize_t max_pairs = PyLong_AsSsize_t(args[1]);
  if (max_pairs < 0) {
    PyBuffer_Release(&buffer);
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "max_pairs must not be negative");
    }
    return nullptr;
  }
  PyObject* out = PyDict_New();
  bool valued = false;
  try {
    valued = out != nullptr &&
        values_of(
                 scratch(),
                 {static_cast<const char*>(buffer.buf), size_t(buffer.len)},
                 size_t(max_pairs),
                 out);
  } catch (const std::bad_alloc&) {
    // No C++ exception crosses into the interpreter.
    Py_XDECREF(out);
    PyBuffer_Release(&buffer);
    return PyErr_NoMemory();
  }
  PyBuffer_Release(&buffer);
  if (out != nullptr && !valued) {
    Py_CLEAR(out);
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return out;
}

PyMethodDef kMethods[] = {
    {"pairs_values",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(pairs_values)),
     METH_FASTCALL,
     "pairs_values(text, max_pairs) -> {class: (percent, difference, pairs)} "
     "or None"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "_threading_cost_values",
    "The measured pairs' values, for the fleet report.",
    -1,
    kMethods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

} // namespace

PyMODINIT_FUNC PyInit__threading_cost_values() {
  PyObject* module = PyModule_Create(&kModule);
  // The simdjson it was built with, for whoever reports a timing.
  if (module != nullptr &&
      PyModule_AddObject(
          module,
          "simdjson_version",
          PyUnicode_FromFormat(
              "%d.%d.%d",
              int(simdjson::SIMDJSON_VERSION_MAJOR),
              int(simdjson::SIMDJSON_VERSION_MINOR),
              int(simdjson::SIMDJSON_VERSION_REVISION))) != 0) {
    Py_CLEAR(module);
  }
  return module;
}
