// preempt/torch/sampler.h — data-loader position that a checkpoint can capture and restore exactly.
//
// DataCursor is the trainer's own position in the data (epoch, batch within the epoch, samples
// consumed); track it with TrainingState::track(name, cursor).
//
// ResumableRandomSampler is a drop-in replacement for torch::data::samplers::RandomSampler whose
// permutation can be captured without pickle. LibTorch's RandomSampler keeps its permutation in a
// private tensor that is only reachable through torch::serialize archives (TorchScript pickle in a
// zip), and its permutation comes from the global RNG at reset() time, so it cannot be rebuilt from
// an index and a seed. ResumableRandomSampler draws the permutation the same way (torch::randperm
// from the default CPU generator, or from its own generator when constructed with a seed) and
// exposes it, so TrainingState stores it as an ordinary int64 tensor entry.
//
// LibTorch's SequentialSampler, DistributedSequentialSampler and DistributedRandomSampler are
// tracked directly (their order is a pure function of size, rank, world size and epoch; the
// checkpoint keeps epoch and index and restore replays reset() + next(index)).
//
// Thread-safety: none; a sampler belongs to the thread that draws from it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <torch/data/samplers/base.h>
#include <torch/types.h>

namespace preempt::torch {

// The trainer's position in its data. Kept up to date by the trainer; restored exactly.
struct DataCursor {
  int64_t epoch = 0;
  int64_t batch_index = 0;     // batches already taken in this epoch
  int64_t samples_seen = 0;    // samples taken since the start of training

  template <class Archive>
  void serialize(Archive& ar) {
    ar(epoch, batch_index, samples_seen);
  }
};

class ResumableRandomSampler : public ::torch::data::samplers::Sampler<> {
 public:
  // Without a seed, reset() draws the permutation from the default CPU generator (exactly like
  // LibTorch's RandomSampler, so the global random stream advances the same way). With a seed,
  // the permutation of epoch e comes from a private generator seeded with seed + e.
  explicit ResumableRandomSampler(int64_t size, std::optional<uint64_t> seed = std::nullopt);

  // Draws a new permutation (of `new_size` when given) and starts the next epoch.
  void reset(c10::optional<size_t> new_size = c10::nullopt) override;
  c10::optional<std::vector<size_t>> next(size_t batch_size) override;
  // torch::serialize archives (for LibTorch APIs that require them; preempt never uses these).
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

  size_t index() const noexcept { return static_cast<size_t>(index_); }
  int64_t size() const noexcept { return size_; }
  // Number of reset() calls so far (0 before the first).
  int64_t epoch() const noexcept { return epoch_; }
  std::optional<uint64_t> seed() const noexcept { return seed_; }
  // The current permutation (int64, [size]); restore writes into it in place when sizes agree.
  const at::Tensor& permutation() const noexcept { return perm_; }

  // Used by TrainingState::restore: adopts `permutation` (1-d int64) and the position. Throws
  // preempt::Error on a wrong dtype/rank or an index outside the permutation.
  void restore_state(at::Tensor permutation, int64_t index, int64_t epoch);
  at::Tensor& mutable_permutation() noexcept { return perm_; }

 private:
  int64_t size_ = 0;
  std::optional<uint64_t> seed_;
  at::Tensor perm_;
  int64_t index_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace preempt::torch
