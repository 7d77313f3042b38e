// ResumableRandomSampler (preempt/torch/sampler.h).
#include "preempt/torch/sampler.h"

#include <algorithm>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/archive.h>

#include "preempt/status.h"

namespace preempt::torch {
namespace {

[[noreturn]] void Fail(StatusCode code, const std::string& msg) { throw Error(Status(code, msg)); }

}  // namespace

ResumableRandomSampler::ResumableRandomSampler(int64_t size, std::optional<uint64_t> seed)
    : size_(size), seed_(seed) {
  if (size < 0) Fail(StatusCode::kInvalidArgument, "ResumableRandomSampler: negative size");
  perm_ = at::arange(size_, at::TensorOptions().dtype(at::kLong));
}

void ResumableRandomSampler::reset(c10::optional<size_t> new_size) {
  if (new_size) size_ = static_cast<int64_t>(*new_size);
  if (seed_) {
    auto gen = at::detail::createCPUGenerator(*seed_ + static_cast<uint64_t>(epoch_));
    perm_ = at::randperm(size_, gen, at::TensorOptions().dtype(at::kLong));
  } else {
    perm_ = at::randperm(size_, at::TensorOptions().dtype(at::kLong));
  }
  index_ = 0;
  ++epoch_;
}

c10::optional<std::vector<size_t>> ResumableRandomSampler::next(size_t batch_size) {
  const int64_t left = size_ - index_;
  if (left <= 0) return c10::nullopt;
  const int64_t n = std::min<int64_t>(left, static_cast<int64_t>(batch_size));
  std::vector<size_t> out(static_cast<size_t>(n));
  const int64_t* p = perm_.data_ptr<int64_t>() + index_;
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<size_t>(p[i]);
  index_ += n;
  return out;
}

void ResumableRandomSampler::save(::torch::serialize::OutputArchive& archive) const {
  archive.write("index", at::tensor(index_), /*is_buffer=*/true);
  archive.write("epoch", at::tensor(epoch_), /*is_buffer=*/true);
  archive.write("perm", perm_, /*is_buffer=*/true);
}

void ResumableRandomSampler::load(::torch::serialize::InputArchive& archive) {
  at::Tensor idx = at::empty({}, at::kLong), ep = at::empty({}, at::kLong), perm;
  archive.read("index", idx, /*is_buffer=*/true);
  archive.read("epoch", ep, /*is_buffer=*/true);
  archive.read("perm", perm, /*is_buffer=*/true);
  restore_state(perm, idx.item<int64_t>(), ep.item<int64_t>());
}

void ResumableRandomSampler::restore_state(at::Tensor permutation, int64_t index, int64_t epoch) {
  if (!permutation.defined() || permutation.dim() != 1 || permutation.scalar_type() != at::kLong)
    Fail(StatusCode::kMismatch, "ResumableRandomSampler: permutation must be a 1-d int64 tensor");
  const int64_t n = permutation.size(0);
  if (index < 0 || index > n || epoch < 0)
    Fail(StatusCode::kCorruption, "ResumableRandomSampler: index " + std::to_string(index) +
                                      " out of range for size " + std::to_string(n));
  perm_ = permutation.contiguous();
  size_ = n;
  index_ = index;
  epoch_ = epoch;
}

}  // namespace preempt::torch
