// xlang_main — the C++ side of the cross-language resume test (tests/python/test_cross_language.py).
//
//   xlang_main save DIR STEP   fills the model with a known pattern, seeds the CPU generator with
//                              42, and checkpoints "model" (+ rng) through preempt::torch
//   xlang_main load DIR STEP   restores strictly into a zeroed model; exits 0 when every parameter
//                              and buffer holds the pattern, the restored step is STEP, and the
//                              next torch::rand values are those after manual_seed(42)
// The model is the LibTorch twin of the Python test's: Sequential(Linear(4, 8), BatchNorm1d(8),
// Linear(8, 2)), whose entry names are "model:0.weight" ... "model:1.num_batches_tracked".
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "preempt/store.h"
#include "preempt/torch/training_state.h"

namespace {

torch::nn::Sequential MakeModel() {
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 2));
}

// Tensor i (parameters then buffers, module order) holds arange(numel) * 0.25 + i.
std::vector<at::Tensor> Tensors(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (auto& kv : m.named_parameters(true)) out.push_back(kv.value());
  for (auto& kv : m.named_buffers(true)) out.push_back(kv.value());
  return out;
}

at::Tensor Pattern(const at::Tensor& t, int64_t i) {
  return (torch::arange(t.numel(), torch::kDouble) * 0.25 + static_cast<double>(i)).reshape(t.sizes()).to(t.scalar_type());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: xlang_main save|load DIR STEP\n");
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  const int64_t step = std::stoll(argv[3]);
  auto model = MakeModel();
  preempt::Store store({.root = dir});
  preempt::torch::TrainingState state;
  state.track("model", model);
  torch::NoGradGuard no_grad;
  auto tensors = Tensors(*model);
  try {
    if (mode == "save") {
      for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(Pattern(tensors[i], static_cast<int64_t>(i)));
      torch::manual_seed(42);
      (void)state.snapshot(step, preempt::torch::WhenBusy::kWait);  // throws on error
      preempt::ThrowIfError(state.persist_async(store)->wait());
      std::printf("saved %zu tensors at step %lld\n", tensors.size(), static_cast<long long>(step));
      return 0;
    }
    if (mode == "load") {
      for (auto& t : tensors) t.zero_();
      torch::manual_seed(7);
      auto got = state.restore(store);
      if (!got || *got != step) {
        std::fprintf(stderr, "restored step %lld, expected %lld\n", static_cast<long long>(got.value_or(-1)),
                     static_cast<long long>(step));
        return 1;
      }
      for (size_t i = 0; i < tensors.size(); ++i) {
        if (!torch::equal(tensors[i], Pattern(tensors[i], static_cast<int64_t>(i)))) {
          std::fprintf(stderr, "tensor %zu differs\n", i);
          return 1;
        }
      }
      at::Tensor next = torch::rand({3});
      torch::manual_seed(42);
      if (!torch::equal(next, torch::rand({3}))) {
        std::fprintf(stderr, "the CPU generator was not restored\n");
        return 1;
      }
      std::printf("restored %zu tensors at step %lld\n", tensors.size(), static_cast<long long>(step));
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
