// preempt._C.publish_hints / read_hints — the preempt.hints/1 file a scheduler reads — and the
// checkpoint-request channel a scheduler writes (include/preempt/hints.h); the schemas, the atomic
// replace and the change detection stay in C++.
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
  Get(d, "request_ack", &h.request_ack);
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
  m.def("request_path_for", &RequestPathFor, py::arg("hints_path"));
  m.def("write_checkpoint_request", [](const std::string& path, int64_t id) {
    if (id <= 0) RaiseInvalid("write_checkpoint_request: id must be > 0, got " + std::to_string(id));
    RaiseIfError(WriteCheckpointRequest(path, CheckpointRequest{id, "checkpoint"}));
  }, py::arg("path"), py::arg("id"));
  // poll(): the id of a new request, or None (one stat() per min_interval_ms; see hints.h).
  py::class_<RequestChannel>(m, "RequestChannel")
      .def(py::init([](std::string path, int64_t min_interval_ms, int64_t last_handled, double fulfilled_before_unix) {
             if (min_interval_ms < 0) RaiseInvalid("RequestChannel: min_interval_ms must be >= 0");
             return std::make_unique<RequestChannel>(std::move(path), std::chrono::milliseconds(min_interval_ms),
                                                     last_handled, fulfilled_before_unix);
           }),
           py::arg("path"), py::arg("min_interval_ms") = 5, py::arg("last_handled") = 0,
           py::arg("fulfilled_before_unix") = 0.0)
      .def("poll", [](RequestChannel& c) -> std::optional<int64_t> {
        if (auto r = c.poll()) return r->id;
        return std::nullopt;
      })
      .def_property_readonly("fulfilled_id", &RequestChannel::fulfilled_id)
      .def_property_readonly("path", &RequestChannel::path);
}

}  // namespace preempt::python
