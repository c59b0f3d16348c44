// One owned reference to a Python object, for the report's extensions
// (record_files.cpp, record_decoding.cpp): released on every path, a C++
// exception's included. Include after <Python.h>.
#pragma once

namespace autograd_device_logging_report {

struct Ref {
  PyObject* p;
  explicit Ref(PyObject* object) : p(object) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  ~Ref() {
    Py_XDECREF(p);
  }
  // The reference, no longer owned here.
  PyObject* release() {
    PyObject* object = p;
    p = nullptr;
    return object;
  }
};

} // namespace autograd_device_logging_report
