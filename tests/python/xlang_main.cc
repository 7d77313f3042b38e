// xlang_main — the C++ side of the cross-language resume test (tests/python/test_cross_language.py).
//
//   xlang_main save DIR STEP   fills the model with a known pattern, seeds the CPU generator with
//                              42, and checkpoints "model" (+ rng) through preempt::torch
//   xlang_main load DIR STEP   restores strictly into a zeroed model; exits 0 when every parameter
//                              and buffer holds the pattern, the restored step is STEP, and the
//                              next torch::rand values are those after manual_seed(42)
//   xlang_main train DIR FROM TO adamw|sgd
//                              the deterministic training of test_cross_language.py: model,
//                              optimizer (AdamW or SGD with momentum) and StepLR tracked; resumes
//                              DIR's checkpoint of step FROM (strict) unless FROM is 0, trains
//                              steps FROM..TO-1, checkpoints step TO
// The model is the LibTorch twin of the Python test's: Sequential(Linear(4, 8), BatchNorm1d(8),
// Linear(8, 2)), whose entry names are "model:0.weight" ... "model:1.num_batches_tracked".
#include <torch/torch.h>

#include <cstdio>
#include <memory>
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

// Step s's batch: exact small rationals (the Python test computes the same values).
std::pair<at::Tensor, at::Tensor> Batch(int64_t s) {
  auto i = torch::arange(64, torch::kLong);
  at::Tensor x = ((i * 7 + s * 13) % 17 - 8).to(torch::kFloat).div(8).reshape({16, 4});
  at::Tensor y = ((i.slice(0, 0, 32) * 5 + s * 3) % 11 - 5).to(torch::kFloat).div(4).reshape({16, 2});
  return {x, y};
}

int Train(const std::string& dir, int64_t from, int64_t to, const std::string& kind) {
  auto model = MakeModel();
  {
    torch::NoGradGuard no_grad;
    // Parameter i = ((arange * 37 + i * 11) % 23 - 11) / 64: exact in both languages.
    int64_t i = 0;
    for (auto& p : model->parameters()) {
      p.copy_(((torch::arange(p.numel(), torch::kLong) * 37 + i * 11) % 23 - 11).to(torch::kFloat).div(64).reshape(p.sizes()));
      ++i;
    }
  }
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (kind == "adamw") opt = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  else if (kind == "sgd") opt = std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  else return 2;
  torch::optim::StepLR sched(*opt, /*step_size=*/1000, /*gamma=*/0.5);
  preempt::Store store({.root = dir});
  preempt::torch::TrainingState state;
  state.track("model", model);
  state.track("optim", *opt);
  state.track("sched", sched);
  if (from > 0) {
    auto got = state.restore(store);
    if (!got || *got != from) {
      std::fprintf(stderr, "restored step %lld, expected %lld\n", static_cast<long long>(got.value_or(-1)),
                   static_cast<long long>(from));
      return 1;
    }
  }
  model->train();
  for (int64_t s = from; s < to; ++s) {
    auto [x, y] = Batch(s);
    opt->zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt->step();
    sched.step();
  }
  (void)state.snapshot(to, preempt::torch::WhenBusy::kWait);
  preempt::ThrowIfError(state.persist_async(store)->wait());
  std::printf("trained %lld..%lld\n", static_cast<long long>(from), static_cast<long long>(to));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "train") {
    try {
      return Train(argv[2], std::stoll(argv[3]), std::stoll(argv[4]), argv[5]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  if (argc != 4) {
    std::fprintf(stderr, "usage: xlang_main save|load DIR STEP | train DIR FROM TO adamw|sgd\n");
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
