// Tracked kinds: data samplers. LibTorch's sequential and distributed samplers are replayed from
// (epoch, index); ResumableRandomSampler also stores its permutation.
#include <algorithm>
#include <type_traits>
#include <utility>

#include "torch/kinds.h"

namespace preempt::torch::internal {
namespace {

namespace ds = ::torch::data::samplers;

[[noreturn]] void Fail(StatusCode code, const std::string& msg) { throw Error(Status(code, msg)); }

struct SamplerRecord {
  uint32_t version = 1;
  std::string kind;
  int64_t index = 0;
  int64_t epoch = 0;
  int64_t size = 0;
  template <class A>
  void serialize(A& ar) { ar(version, kind, index, epoch, size); }
};

// Parses "<name>:state" and checks that it was written by the same kind of sampler.
SamplerRecord ReadRecord(RestoreContext& ctx, const std::string& entry_name, const std::string& tracked,
                         const std::string& kind) {
  SamplerRecord r;
  FromCerealBytes(ctx.take_blob(entry_name), entry_name, &r);
  if (r.kind != kind) Fail(StatusCode::kMismatch, "restore: '" + tracked + "' is a " + kind + " sampler, checkpoint has " + r.kind);
  return r;
}

// Samplers whose order is a pure function of their configuration and epoch: restore replays
// reset() and skips `index` samples.
template <class S>
class TrackedReplaySampler : public Tracked {
 public:
  static constexpr bool kDistributed = std::is_base_of_v<ds::DistributedSampler<>, S>;

  TrackedReplaySampler(std::string name, S& s, std::string kind)
      : Tracked(std::move(name)), s_(s), kind_(std::move(kind)) {}

  void collect(std::vector<Entry>* out) override {
    int64_t epoch = 0;
    if constexpr (kDistributed) epoch = static_cast<int64_t>(s_.epoch());
    SamplerRecord r{1, kind_, static_cast<int64_t>(s_.index()), epoch, 0};
    out->push_back(Entry::Blob(entry("state"), ToCerealBytes(r)));
  }
  void expect(std::vector<RestoreTarget>* out) override { ExpectOwned(out, entry("state")); }
  void apply(RestoreContext& ctx) override {
    if (!ctx.has(entry("state"))) return;
    const SamplerRecord r = ReadRecord(ctx, entry("state"), name(), kind_);
    if constexpr (kDistributed) s_.set_epoch(static_cast<size_t>(r.epoch));
    s_.reset();
    // Distributed samplers count index() from their rank's first sample.
    const int64_t base = static_cast<int64_t>(s_.index());
    if (r.index < base)
      Fail(StatusCode::kMismatch, "restore: '" + name() + "': checkpoint index " + std::to_string(r.index) +
                                      " is before this sampler's first index " + std::to_string(base));
    int64_t left = r.index - base;
    while (left > 0) {
      const size_t n = static_cast<size_t>(std::min<int64_t>(left, 1 << 16));
      auto b = s_.next(n);
      if (!b || b->empty())
        Fail(StatusCode::kMismatch, "restore: '" + name() + "': sampler ended before index " + std::to_string(r.index));
      left -= static_cast<int64_t>(b->size());
    }
  }

 private:
  S& s_;
  std::string kind_;
};

class TrackedResumableSampler : public Tracked {
 public:
  TrackedResumableSampler(std::string name, ResumableRandomSampler& s) : Tracked(std::move(name)), s_(s) {}

  void collect(std::vector<Entry>* out) override {
    SamplerRecord r{1, kKind, static_cast<int64_t>(s_.index()), s_.epoch(), s_.size()};
    out->push_back(Entry::Blob(entry("state"), ToCerealBytes(r)));
    out->push_back(Entry::Tensor(entry("perm"), s_.permutation()));
  }
  void expect(std::vector<RestoreTarget>* out) override {
    ExpectOwned(out, entry("state"));
    ExpectTensor(out, entry("perm"), s_.permutation());
  }
  void apply(RestoreContext& ctx) override {
    if (!ctx.has(entry("state")) || !ctx.has(entry("perm"))) return;
    const SamplerRecord r = ReadRecord(ctx, entry("state"), name(), kKind);
    // A direct target already holds the checkpoint's permutation (the store checked its shape).
    at::Tensor perm = IsDirectTarget(s_.permutation()) ? s_.permutation() : ctx.take_tensor(entry("perm"), nullptr);
    s_.restore_state(perm, r.index, r.epoch);
  }

 private:
  static constexpr const char* kKind = "resumable_random";
  ResumableRandomSampler& s_;
};

}  // namespace

std::unique_ptr<Tracked> TrackSampler(const std::string& name, ds::SequentialSampler& s) {
  return std::make_unique<TrackedReplaySampler<ds::SequentialSampler>>(name, s, "sequential");
}
std::unique_ptr<Tracked> TrackSampler(const std::string& name, ds::DistributedSequentialSampler& s) {
  return std::make_unique<TrackedReplaySampler<ds::DistributedSequentialSampler>>(name, s, "distributed_sequential");
}
std::unique_ptr<Tracked> TrackSampler(const std::string& name, ds::DistributedRandomSampler& s) {
  return std::make_unique<TrackedReplaySampler<ds::DistributedRandomSampler>>(name, s, "distributed_random");
}
std::unique_ptr<Tracked> TrackSampler(const std::string& name, ResumableRandomSampler& s) {
  return std::make_unique<TrackedResumableSampler>(name, s);
}

}  // namespace preempt::torch::internal
