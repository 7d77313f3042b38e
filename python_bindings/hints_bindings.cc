// preempt._C.publish_hints / read_hints — the preempt.hints/1 file a scheduler reads
// (include/preempt/hints.h); the schema and the atomic replace stay in C++.
#include <pybind11/stl.h>

#include "bindings.h"
#include "preempt/hints.h"

namespace preempt::python {
namespace {

template <class T>
void Get(const py::dict& d, const char* key, T* out) {
  if (d.contains(key)) *out = d[key].cast<T>();
}

Hints FromDict(const py::dict& d) {
  Hints h;
  Get(d, "job", &h.job);
  if (h.job.empty()) RaiseInvalid("hints: field 'job' must be a non-empty string");
  std::string state = "training";
  Get(d, "state", &state);
  if (!ParseJobState(state, &h.state)) RaiseInvalid("hints: field 'state': unknown state '" + state + "'");
  Get(d, "step", &h.step);
  Get(d, "step_time_s", &h.step_time_s);
  if (d.contains("last_commit")) {
    py::dict c = d["last_commit"];
    Get(c, "step", &h.last_commit.step);
    Get(c, "unix", &h.last_commit.committed_at);
    Get(c, "path", &h.last_commit.path);
  }
  if (d.contains("cost")) {
    py::dict c = d["cost"];
    Get(c, "bytes", &h.cost.bytes);
    Get(c, "drain_s", &h.cost.drain_s);
    Get(c, "stall_s", &h.cost.stall_s);
    Get(c, "persist_s", &h.cost.persist_s);
  }
  if (d.contains("grace")) {
    py::dict g = d["grace"];
    Get(g, "needed_s", &h.grace.needed_s);
    Get(g, "granted_s", &h.grace.granted_s);
  }
  Get(d, "lost_work_s", &h.lost_work_s);
  Get(d, "gpus", &h.gpus);
  h.updated_unix = NowUnix();
  return h;
}

}  // namespace

void BindHints(py::module_& m) {
  m.def("publish_hints", [](const std::string& path, const py::dict& fields) {
    Hints h = FromDict(fields);
    Status s;
    {
      py::gil_scoped_release nogil;  // fsync of the file and its directory
      s = WriteHintsAtomic(path, h);
    }
    RaiseIfError(s);
  }, py::arg("path"), py::arg("fields"));
  m.def("read_hints_json", [](const std::string& path) {
    Hints h;
    RaiseIfError(ReadHints(path, &h));
    return HintsToJson(h);
  }, py::arg("path"));
  m.def("hints_path_from_env", &HintsPathFromEnv);
}

}  // namespace preempt::python
