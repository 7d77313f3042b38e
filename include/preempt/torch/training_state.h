// preempt/torch/training_state.h — what a LibTorch trainer registers so that its training can be
// checkpointed asynchronously and restored bit for bit.
//
//   preempt::torch::TrainingState state({.every_steps = 500});
//   state.track("model", model);            // every parameter and buffer, by qualified name
//   state.track("optim", optimizer);        // SGD, Adam, AdamW, RMSprop, Adagrad
//   state.track("sampler", sampler);        // Sequential/Distributed*/ResumableRandomSampler
//   state.track("cursor", cursor);          // DataCursor: epoch, batch, samples seen
//   state.track_extra("sched", my_sched);   // any cereal-serializable value
//   int64_t step = state.restore(store).value_or(0);
//   for (; step < total; ++step) {
//     train_one_step();
//     state.maybe_checkpoint(store, step + 1);   // periodic; stalls only for the copy to staging
//   }
//
// Entries in the checkpoint (names as SaveItem names, see preempt/store.h):
//   <model>:<qualified.name>               parameters and buffers, dtype and shape of the tensor
//   <optim>:meta                            optimizer kind, param groups' options, per-param steps
//   <optim>:state.<i>.<key>                 per-parameter state (exp_avg, momentum_buffer, sum, ...),
//                                           i = index of the parameter across all param groups
//   <sampler>:state, <sampler>:perm         sampler position (and permutation)
//   <extra>                                 cereal portable-binary bytes of a user value / cursor
//   rng:cpu, rng:cuda.<d>                   default generators' states (when capture_rng)
//
// Snapshot policy. Staging memory (pre-faulted; pinned when CUDA is available) is allocated the
// first time a layout needs it and then reused; with `staging_buffers = 2` a snapshot can be taken
// while the previous one is still being persisted. When every buffer belongs to a save that is
// still running, `when_busy` decides: kSkip (periodic default) takes no checkpoint this time and
// counts it in stats().skipped; kWait blocks until the oldest save finishes (bounded by the
// deadline). Extra memory is therefore bounded by staging_buffers × state bytes.
//
// Thread-safety: a TrainingState is used by the training thread only (tracked objects are read
// during snapshot() and written during restore()). SaveHandles it returns may be used anywhere.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <cereal/archives/portable_binary.hpp>
#include <cereal/types/string.hpp>  // extras commonly hold strings and vectors
#include <cereal/types/vector.hpp>
#include <torch/data/samplers/distributed.h>
#include <torch/data/samplers/random.h>
#include <torch/data/samplers/sequential.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include "preempt/deadline.h"
#include "preempt/status.h"
#include "preempt/store.h"
#include "preempt/torch/sampler.h"

namespace preempt::torch {

enum class WhenBusy {
  kSkip,  // no checkpoint this time (counted in stats().skipped)
  kWait,  // wait for the oldest running save to finish, up to the deadline
};

struct TrainingStateOptions {
  // Periodic checkpoints (maybe_checkpoint): every `every_steps` steps and/or every
  // `every_seconds` seconds since the last one; 0 disables that trigger.
  int64_t every_steps = 0;
  double every_seconds = 0;
  int staging_buffers = 2;              // 1 or 2
  WhenBusy when_busy = WhenBusy::kSkip;  // policy of maybe_checkpoint()
  bool capture_rng = true;              // default CPU generator and every CUDA generator
  bool pin_memory = true;               // pinned staging when CUDA is available
  std::map<std::string, std::string> metadata;  // added to every checkpoint's manifest
};

struct TrainingStateStats {
  int64_t snapshots = 0;
  int64_t skipped = 0;           // periodic checkpoints skipped because staging was busy
  uint64_t last_bytes = 0;       // payload bytes of the last snapshot
  size_t last_entries = 0;
  double last_stall_s = 0;       // copy into staging (the training stall) of the last snapshot
  double last_wait_s = 0;        // time waited for a free staging buffer (kWait)
  double last_alloc_s = 0;       // staging (re)allocation during the last snapshot (0 once warm)
  uint64_t staging_bytes = 0;    // allocated staging, all buffers together
  Status first_error;            // first failed background save, kept
};

class TrainingState {
 public:
  explicit TrainingState(TrainingStateOptions options = {});
  // Waits for the saves this object started (their staging memory is ours).
  ~TrainingState();
  TrainingState(const TrainingState&) = delete;
  TrainingState& operator=(const TrainingState&) = delete;

  // ---- registration (names must be valid entry names without ':'; each name once) ----------
  void track(const std::string& name, ::torch::nn::Module& module);
  template <class M>
  void track(const std::string& name, ::torch::nn::ModuleHolder<M>& module) {
    track(name, static_cast<::torch::nn::Module&>(*module.ptr()));
  }
  void track(const std::string& name, const std::shared_ptr<::torch::nn::Module>& module) {
    track(name, *module);
  }
  void track(const std::string& name, ::torch::optim::Optimizer& optimizer);
  void track(const std::string& name, ::torch::data::samplers::SequentialSampler& sampler);
  void track(const std::string& name, ::torch::data::samplers::DistributedSequentialSampler& sampler);
  void track(const std::string& name, ::torch::data::samplers::DistributedRandomSampler& sampler);
  void track(const std::string& name, ResumableRandomSampler& sampler);
  // LibTorch's RandomSampler exposes its permutation only through pickle archives; use
  // ResumableRandomSampler instead (same draw from the global generator).
  void track(const std::string& name, ::torch::data::samplers::RandomSampler& sampler) = delete;
  void track(const std::string& name, DataCursor& cursor) { track_extra(name, cursor); }

  // Any value cereal can serialize; saved as portable-binary bytes and loaded back into `value`.
  template <class T>
  void track_extra(const std::string& name, T& value) {
    track_blob(
        name,
        [&value] {
          std::ostringstream os;
          {
            cereal::PortableBinaryOutputArchive ar(os);
            ar(value);
          }
          return std::move(os).str();
        },
        [&value](const std::string& bytes) {
          std::istringstream is(bytes);
          cereal::PortableBinaryInputArchive ar(is);
          ar(value);
        });
  }
  // Lowest level: an opaque byte blob produced at snapshot and consumed at restore.
  void track_blob(const std::string& name, std::function<std::string()> save,
                  std::function<void(const std::string&)> load);

  // ---- checkpointing ------------------------------------------------------------------------
  // Copies every tracked entry into a free staging buffer: the only part that stalls training.
  // Waits (kWait, until `deadline`) for a running save when every buffer is busy. Returns OK when
  // staged, kAborted when skipped (kSkip), kDeadlineExceeded when the wait ran out. A staged
  // snapshot that was never persisted is replaced by the next one.
  Status snapshot(int64_t step, WhenBusy when_busy = WhenBusy::kWait,
                  Deadline deadline = Deadline::Never());
  // Submits the last staged snapshot to `store` (returns at once). Throws Error when nothing is
  // staged.
  std::shared_ptr<SaveHandle> persist_async(Store& store);
  // snapshot(step) + persist_async(store). Returns nullptr when the snapshot was skipped; throws
  // Error on a failed snapshot or when the wait ran past `deadline`.
  std::shared_ptr<SaveHandle> checkpoint_async(Store& store, int64_t step,
                                               WhenBusy when_busy = WhenBusy::kWait,
                                               Deadline deadline = Deadline::Never());
  // The stop checkpoint: the caller will not modify tracked state until the returned save is
  // done, so CPU-contiguous tensors are written straight from their own memory and the copy into
  // staging (the stall) is skipped. Falls back to checkpoint_async(kWait) when any entry is on a
  // device or not contiguous. Throws Error like checkpoint_async.
  std::shared_ptr<SaveHandle> checkpoint_in_place(Store& store, int64_t step,
                                                  Deadline deadline = Deadline::Never());
  // True when the periodic policy wants a checkpoint at `step`.
  bool checkpoint_due(int64_t step) const;
  // checkpoint_async with options().when_busy when checkpoint_due(step), else nullptr.
  std::shared_ptr<SaveHandle> maybe_checkpoint(Store& store, int64_t step);
  // Waits for every save started by this object; returns the first error.
  Status wait_all(Deadline deadline = Deadline::Never());
  // Allocates (and pre-faults) staging for the current layout now, so that the first snapshot
  // does not pay for it. Optimizer state appears after the first optimizer step.
  void reserve();

  // ---- restore ------------------------------------------------------------------------------
  // Restores every tracked object from the newest valid checkpoint of `store` (or opts.step).
  // Tensors are read directly into the existing parameters, buffers and optimizer state (CPU,
  // contiguous); entries that have no tensor yet (optimizer state before the first step) are read
  // into new memory that the new tensors adopt. Name, dtype and shape are checked; with
  // opts.strict (default) any missing or unexpected entry is an error naming it. Returns the
  // checkpoint's step, or nullopt when the store holds no committed checkpoint. Throws Error.
  // Blocks until every byte is read and verified (no deadline: a restore has nothing to race).
  std::optional<int64_t> restore(Store& store, const RestoreOptions& opts = {},
                                 RestoreResult* result = nullptr);

  // ---- introspection ------------------------------------------------------------------------
  const TrainingStateOptions& options() const { return options_; }
  TrainingStateStats stats() const;
  // Total payload bytes of the current layout (enumerates the tracked objects).
  uint64_t state_bytes() const;
  // Entry names of the current layout, in snapshot order.
  std::vector<std::string> entry_names() const;

  class Tracked;  // one registered object (internal)

 private:
  struct Staging;
  void add(std::unique_ptr<Tracked> t);
  Staging* acquire(WhenBusy when_busy, Deadline deadline, Status* st);

  TrainingStateOptions options_;
  std::vector<std::unique_ptr<Tracked>> tracked_;
  std::vector<std::unique_ptr<Staging>> staging_;
  Staging* staged_ = nullptr;  // snapshot staged and not yet persisted
  std::unique_ptr<Staging> in_place_;  // the last checkpoint_in_place: its entries and handle
  TrainingStateStats stats_;
  std::chrono::steady_clock::time_point last_checkpoint_;
  bool have_last_checkpoint_ = false;
};

// at::ScalarType <-> preempt::DType; throws Error for types the store cannot name.
DType ToDType(at::ScalarType t);
at::ScalarType ToScalarType(DType t);

}  // namespace preempt::torch
