// Tracked kind: a torch::nn::Module's parameters and buffers, by qualified name.
#include <utility>

#include "torch/kinds.h"

namespace preempt::torch::internal {
namespace {

class TrackedModule : public Tracked {
 public:
  TrackedModule(std::string name, ::torch::nn::Module& m) : Tracked(std::move(name)), m_(m) {}

  // Parameters change only at the optimizer update; buffers (running statistics) change in the
  // forward pass, so an overlapped snapshot copies them at once.
  void collect(std::vector<Entry>* out) override {
    for (const auto& kv : m_.named_parameters(/*recurse=*/true))
      if (kv.value().defined()) out->push_back(Entry::Tensor(entry(kv.key()), kv.value().detach(), /*until_update=*/true));
    for (const auto& kv : m_.named_buffers(/*recurse=*/true))
      if (kv.value().defined()) out->push_back(Entry::Tensor(entry(kv.key()), kv.value().detach()));
  }
  void expect(std::vector<RestoreTarget>* out) override {
    for (auto& [n, t] : tensors()) ExpectTensor(out, entry(n), t);
  }
  void apply(RestoreContext& ctx) override {
    for (auto& [n, t] : tensors()) {
      at::Tensor live = t.detach();  // shares storage with the parameter
      ctx.restore_into(entry(n), live);
    }
  }

 private:
  std::vector<std::pair<std::string, at::Tensor>> tensors() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& kv : m_.named_parameters(/*recurse=*/true))
      if (kv.value().defined()) out.emplace_back(kv.key(), kv.value());
    for (const auto& kv : m_.named_buffers(/*recurse=*/true))
      if (kv.value().defined()) out.emplace_back(kv.key(), kv.value());
    return out;
  }

  ::torch::nn::Module& m_;
};

}  // namespace

std::unique_ptr<Tracked> TrackModule(const std::string& name, ::torch::nn::Module& module) {
  return std::make_unique<TrackedModule>(name, module);
}

}  // namespace preempt::torch::internal
