// The optimizers the torch layer can capture, described by one table (optimizer_kinds.cc):
// adding an optimizer is one entry there. Each entry names the kind as stored in "<optim>:meta"
// and exposes, by reference, what a checkpoint keeps: the per-parameter step count and state
// tensors, and the param-group options. The capture itself (tracked_optimizer.cc) is generic.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

namespace preempt::torch::internal {

// The key of parameter `p` in an optimizer's state map (Map: decltype(optimizer.state())).
// LibTorch 1.x keys state by the TensorImpl address as text (c10::guts::to_string); 2.x by the
// address itself.
template <class Map>
auto StateKey(const at::Tensor& p) {
  using Key = typename std::decay_t<Map>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << static_cast<const void*>(p.unsafeGetTensorImpl());
    return os.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// One param-group option: a number, or a flag (stored as 0 / 1).
struct OptionRef {
  const char* key;
  double* value = nullptr;
  bool* flag = nullptr;
};

// A parameter's state: its step count (null when the kind keeps none) and named tensors.
struct ParamStateRefs {
  int64_t* step = nullptr;
  std::vector<std::pair<const char*, at::Tensor*>> tensors;
};

struct OptimizerKind {
  std::string name;
  std::function<bool(::torch::optim::Optimizer&)> matches;
  std::function<std::unique_ptr<::torch::optim::OptimizerParamState>()> new_state;
  std::function<ParamStateRefs(::torch::optim::OptimizerParamState&)> state;
  std::function<std::vector<OptionRef>(::torch::optim::OptimizerOptions&)> options;
};

const std::vector<OptimizerKind>& OptimizerKinds();
// The entry for `optimizer`; Error (kInvalidArgument) naming `tracked` when none matches.
const OptimizerKind& KindOf(::torch::optim::Optimizer& optimizer, const std::string& tracked);

}  // namespace preempt::torch::internal
