// preempt._C codecs for the torch layer's blob entries (src/torch/records.h), so that Python
// writes and reads "<optim>:meta" and "<sched>:state" exactly as the C++ trainer does, through
// the same cereal types: a checkpoint resumes in either language.
//
//   encode_optimizer_meta(kind, groups, params) -> bytes
//       groups: [(keys, values, num_params)], params: [(has_state, step, tensor_keys)]
//   decode_optimizer_meta(data, entry) -> {"kind", "groups", "params"} with the same tuples
//   encode_lr_scheduler_state(step_count, rates) -> bytes
//   decode_lr_scheduler_state(data, entry) -> (step_count, rates)
// Bytes that do not parse raise CorruptionError naming `entry`; a record newer than this build
// raises VersionMismatchError.
#include <pybind11/stl.h>

#include <cereal/archives/portable_binary.hpp>
#include <sstream>

#include "bindings.h"
#include "torch/records.h"

namespace preempt::python {
namespace {

namespace rec = preempt::torch::records;

template <class T>
py::bytes Encode(const T& value) {
  std::ostringstream os;
  {
    cereal::PortableBinaryOutputArchive ar(os);
    ar(value);
  }
  return py::bytes(std::move(os).str());
}

template <class T>
T Decode(const std::string& data, const std::string& entry) {
  T value;
  std::istringstream is(data);
  try {
    cereal::PortableBinaryInputArchive ar(is);
    ar(value);
  } catch (const std::exception& e) {  // cereal::Exception, and a corrupt length's bad_alloc
    RaiseStatus(Status(StatusCode::kCorruption, "restore: entry '" + entry + "' does not parse: " + e.what()));
  }
  if (value.version > T::kVersion)
    RaiseStatus(Status(StatusCode::kVersionMismatch, "restore: entry '" + entry + "' has record version " +
                                                         std::to_string(value.version) + ", this build reads up to " +
                                                         std::to_string(T::kVersion)));
  return value;
}

using GroupTuple = std::tuple<std::vector<std::string>, std::vector<double>, int64_t>;
using ParamTuple = std::tuple<bool, int64_t, std::vector<std::string>>;

py::bytes EncodeOptimizerMeta(const std::string& kind, const std::vector<GroupTuple>& groups,
                              const std::vector<ParamTuple>& params) {
  rec::OptimRecord r;
  r.kind = kind;
  for (const auto& [keys, values, num_params] : groups) {
    if (keys.size() != values.size()) RaiseInvalid("encode_optimizer_meta: a group has " + std::to_string(keys.size()) +
                                                   " keys and " + std::to_string(values.size()) + " values");
    r.groups.push_back({keys, values, num_params});
  }
  for (const auto& [has_state, step, tensors] : params) r.params.push_back({has_state, step, tensors});
  return Encode(r);
}

py::dict DecodeOptimizerMeta(const std::string& data, const std::string& entry) {
  const auto r = Decode<rec::OptimRecord>(data, entry);
  std::vector<GroupTuple> groups;
  for (const auto& g : r.groups) {
    if (g.keys.size() != g.values.size() || g.num_params < 0)
      RaiseStatus(Status(StatusCode::kCorruption, "restore: entry '" + entry + "' has a malformed param group"));
    groups.emplace_back(g.keys, g.values, g.num_params);
  }
  std::vector<ParamTuple> params;
  params.reserve(r.params.size());
  for (const auto& p : r.params) params.emplace_back(p.has_state, p.step, p.tensors);
  py::dict d;
  d["kind"] = r.kind;
  d["groups"] = std::move(groups);
  d["params"] = std::move(params);
  return d;
}

py::bytes EncodeSchedulerState(int64_t step_count, const std::vector<double>& rates) {
  rec::SchedulerRecord r;
  r.step_count = step_count;
  r.rates = rates;
  return Encode(r);
}

std::tuple<int64_t, std::vector<double>> DecodeSchedulerState(const std::string& data, const std::string& entry) {
  const auto r = Decode<rec::SchedulerRecord>(data, entry);
  if (r.step_count < 0)
    RaiseStatus(Status(StatusCode::kCorruption, "restore: entry '" + entry + "': step count " +
                                                    std::to_string(r.step_count) + " out of range"));
  return {r.step_count, r.rates};
}

}  // namespace

void BindRecords(py::module_& m) {
  m.def("encode_optimizer_meta", &EncodeOptimizerMeta, py::arg("kind"), py::arg("groups"), py::arg("params"));
  m.def("decode_optimizer_meta", &DecodeOptimizerMeta, py::arg("data"), py::arg("entry"));
  m.def("encode_lr_scheduler_state", &EncodeSchedulerState, py::arg("step_count"), py::arg("rates"));
  m.def("decode_lr_scheduler_state", &DecodeSchedulerState, py::arg("data"), py::arg("entry"));
}

}  // namespace preempt::python
