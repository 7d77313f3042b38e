// preempt._C — module definition and the Status → Python exception mapping.
#include <array>

#include "bindings.h"

namespace preempt::python {
namespace {

struct ErrorClass {
  StatusCode code;
  const char* name;
  PyObject* extra_base;  // a builtin the class also derives from (nullptr: none)
};

// Indexed by StatusCode; filled at import.
std::array<PyObject*, static_cast<size_t>(StatusCode::kInternal) + 1> g_classes{};
PyObject* g_base = nullptr;

}  // namespace

void RegisterErrors(py::module_& m) {
  g_base = PyErr_NewExceptionWithDoc("preempt._C.Error",
                                     "A preempt operation failed; the message names the file, tensor or field.",
                                     PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::reinterpret_borrow<py::object>(g_base);
  const ErrorClass classes[] = {
      {StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {StatusCode::kNotFound, "NotFoundError", nullptr},
      {StatusCode::kCorruption, "CorruptionError", nullptr},
      {StatusCode::kVersionMismatch, "VersionMismatchError", nullptr},
      {StatusCode::kMismatch, "MismatchError", nullptr},
      {StatusCode::kIoError, "IoError", PyExc_OSError},
      {StatusCode::kNoSpace, "NoSpaceError", PyExc_OSError},
      {StatusCode::kDeadlineExceeded, "DeadlineExceededError", PyExc_TimeoutError},
      {StatusCode::kAborted, "AbortedError", nullptr},
      {StatusCode::kUnavailable, "UnavailableError", nullptr},
      {StatusCode::kInternal, "InternalError", nullptr},
  };
  for (const auto& c : classes) {
    std::string qualified = std::string("preempt._C.") + c.name;
    PyObject* bases = c.extra_base ? PyTuple_Pack(2, g_base, c.extra_base) : PyTuple_Pack(1, g_base);
    PyObject* cls = PyErr_NewException(qualified.c_str(), bases, nullptr);
    Py_DECREF(bases);
    if (!cls) throw py::error_already_set();
    g_classes[static_cast<size_t>(c.code)] = cls;
    m.attr(c.name) = py::reinterpret_borrow<py::object>(cls);
  }
}

void SetStatusError(const Status& s) {
  const size_t i = static_cast<size_t>(s.code());
  PyObject* cls = i < g_classes.size() && g_classes[i] ? g_classes[i] : g_base;
  PyErr_SetString(cls, s.message().c_str());
}

void RaiseStatus(const Status& s) {
  SetStatusError(s);
  throw py::error_already_set();
}

void RaiseInvalid(const std::string& message) { RaiseStatus(Status(StatusCode::kInvalidArgument, message)); }

DType ParseDType(const std::string& name, const std::string& what) {
  DType t;
  if (!DTypeFromName(name, &t)) RaiseInvalid(what + ": unknown dtype '" + name + "'");
  return t;
}

}  // namespace preempt::python

PYBIND11_MODULE(_C, m) {
  namespace pp = preempt::python;
  m.doc() = "Private native part of the preempt package (store, signal handler). Use `import preempt`.";
  pp::RegisterErrors(m);
  // A preempt::Error escaping a binding (a constructor that throws) keeps its code.
  pybind11::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const preempt::Error& e) {
      pp::SetStatusError(e.status());
    }
  });
  pp::BindStore(m);
  pp::BindSignal(m);
  pp::BindHints(m);
  pp::BindRecords(m);
}
