// The cereal records inside the torch layer's blob entries, without LibTorch:
//   "<optim>:meta"   OptimRecord     (tracked_optimizer.cc)
//   "<sched>:state"  SchedulerRecord (tracked_lr_scheduler.cc)
// The Python package's native module encodes and decodes these same types, so a checkpoint
// written by either language resumes in the other and the format has one definition.
// Portable-binary cereal archives (little-endian on disk whatever the host).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>

namespace preempt::torch::records {

// Per-group options, kept by name so a newer LibTorch (or Python) with more options still loads.
struct GroupRecord {
  std::vector<std::string> keys;
  std::vector<double> values;  // flags are 0 / 1
  int64_t num_params = 0;
  template <class A>
  void serialize(A& ar) { ar(keys, values, num_params); }
};

struct ParamRecord {
  bool has_state = false;
  int64_t step = 0;
  std::vector<std::string> tensors;  // keys of the state tensors present, each the entry "<optim>:state.<i>.<key>"
  template <class A>
  void serialize(A& ar) { ar(has_state, step, tensors); }
};

// Parameters are numbered across all param groups in order (PyTorch's state_dict numbering).
struct OptimRecord {
  static constexpr uint32_t kVersion = 1;
  uint32_t version = kVersion;
  std::string kind;  // "adam", "adamw", "sgd", "rmsprop", "adagrad"
  std::vector<GroupRecord> groups;
  std::vector<ParamRecord> params;
  template <class A>
  void serialize(A& ar) { ar(version, kind, groups, params); }
};

// An LR scheduler's position: how many times step() was called after construction (PyTorch's
// last_epoch), and the learning rates it left in its optimizer, per param group.
struct SchedulerRecord {
  static constexpr uint32_t kVersion = 1;
  uint32_t version = kVersion;
  int64_t step_count = 0;
  std::vector<double> rates;
  template <class A>
  void serialize(A& ar) { ar(version, step_count, rates); }
};

}  // namespace preempt::torch::records
