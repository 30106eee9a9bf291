// The Python exception of a failed common::Status, for the package's
// extension modules (aggswitch._core, aggswitch._cache):
// aggswitch.errors.from_status chooses the class by the status code, and
// the message is the C++ message, word for word.
//
//   if (!status.ok()) aggswitch::python::Raise(status);
//   aggswitch::python::Check(status);   // the same, for any status
//
// Thread safety: with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include "common/status.h"

namespace aggswitch::python {

[[noreturn]] inline void Raise(const common::Status& status) {
  namespace py = pybind11;
  py::object error = py::module_::import("aggswitch.errors")
                         .attr("from_status")(common::StatusCodeName(status.code()),
                                              status.message());
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

inline void Check(const common::Status& status) {
  if (!status.ok()) Raise(status);
}

}  // namespace aggswitch::python
