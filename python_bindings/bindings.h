// python_bindings/bindings.h — shared pieces of the preempt._C module.
//
// Errors: every non-OK Status becomes an instance of the Python exception class registered for
// its StatusCode (preempt._C.CorruptionError, MismatchError, ...; all derive from
// preempt._C.Error, a RuntimeError), with the Status message, which names the file, tensor or
// field. RaiseStatus must be called with the GIL held.
#pragma once

#include <pybind11/pybind11.h>

#include "preempt/buffer.h"
#include "preempt/status.h"

namespace preempt::python {

namespace py = pybind11;

// Creates the exception classes as attributes of `m`.
void RegisterErrors(py::module_& m);
// Sets the Python error for `s` (no throw), or sets it and throws py::error_already_set.
void SetStatusError(const Status& s);
[[noreturn]] void RaiseStatus(const Status& s);
inline void RaiseIfError(const Status& s) {
  if (!s.ok()) RaiseStatus(s);
}
[[noreturn]] void RaiseInvalid(const std::string& message);

// "float32" <-> DType; unknown names raise InvalidArgumentError naming `what`.
DType ParseDType(const std::string& name, const std::string& what);

void BindStore(py::module_& m);
void BindSignal(py::module_& m);
void BindHints(py::module_& m);
void BindRecords(py::module_& m);

}  // namespace preempt::python
