// The models bench_torch checkpoints and the plain copy every snapshot figure is compared with.
// Header-only (small, used by every section); nothing here is thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "preempt/buffer.h"

namespace bench_torch {

using Clock = std::chrono::steady_clock;
inline double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Parameters of `param_bytes` (Adam adds exp_avg and exp_avg_sq) in 16 MiB .. 64 MiB tensors
// plus a few small ones (biases), like a transformer's mix.
struct BigModel : torch::nn::Module {
  explicit BigModel(uint64_t param_bytes) {
    const int64_t cols = 4096;
    uint64_t left = param_bytes;
    for (int i = 0; left >= 4096 * 4; ++i) {
      const int64_t rows = std::min<int64_t>((i % 3 == 0 ? 4096 : 1024), static_cast<int64_t>(left / (cols * 4)));
      register_parameter("layer" + std::to_string(i) + "_weight",
                         torch::full({rows, cols}, 0.01f * static_cast<float>(i + 1)));
      left -= static_cast<uint64_t>(rows * cols * 4);
      register_parameter("layer" + std::to_string(i) + "_bias", torch::zeros({cols}));
    }
  }
};

// The training loop's model: 4096-wide layers holding `param_bytes` of parameters; with Adam the
// state is three times that.
struct WideMlp : torch::nn::Module {
  explicit WideMlp(uint64_t param_bytes) {
    const int64_t width = 4096;
    const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(param_bytes / (width * width * 4)));
    for (int64_t i = 0; i < n; ++i)
      layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(width, width)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : layers) x = torch::relu(l(x));
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};

// Every tensor of a model and its Adam state (what a snapshot copies).
inline std::vector<at::Tensor> StateTensors(torch::nn::Module& model, torch::optim::Adam& adam) {
  std::vector<at::Tensor> ts;
  for (auto& p : model.parameters()) ts.push_back(p);
  for (auto& p : model.parameters()) {
    auto it = adam.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == adam.state().end()) continue;
    auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
    ts.push_back(s.exp_avg());
    ts.push_back(s.exp_avg_sq());
  }
  return ts;
}

// Destination of plain copies: pre-allocated and pre-faulted, laid out like staging.
inline preempt::AlignedBuffer CopyDestination(const std::vector<at::Tensor>& ts) {
  uint64_t bytes = 0;
  for (const auto& t : ts) bytes = preempt::AlignUp(bytes, preempt::kIoAlignment) + t.numel() * t.element_size();
  return preempt::AlignedBuffer(bytes + preempt::kIoAlignment, true);
}

// Seconds of one plain memcpy of `ts` into `dst` (from CopyDestination).
inline double PlainCopy(const std::vector<at::Tensor>& ts, preempt::AlignedBuffer& dst) {
  const auto t0 = Clock::now();
  uint64_t off = 0;
  for (const auto& t : ts) {
    const size_t n = t.numel() * t.element_size();
    off = preempt::AlignUp(off, preempt::kIoAlignment);
    std::memcpy(dst.data() + off, t.data_ptr(), n);
    off += n;
  }
  return Since(t0);
}

}  // namespace bench_torch
