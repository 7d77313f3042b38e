// preempt/torch/training_state.h — what a LibTorch trainer registers so that its training can be
// checkpointed asynchronously and restored bit for bit.
//
//   preempt::torch::TrainingState state;
//   state.track("model", model);            // every parameter and buffer, by qualified name
//   state.track("optim", optimizer);        // SGD, Adam, AdamW, RMSprop, Adagrad
//   state.track("lr", scheduler);           // torch::optim::StepLR (any LRScheduler): its step count
//   state.track("sampler", sampler);        // Sequential/Distributed*/ResumableRandomSampler
//   state.track("cursor", cursor);          // DataCursor: epoch, batch, samples seen
//   state.track_extra("sched", my_sched);   // any cereal-serializable value
//   int64_t step = state.restore(store).value_or(0);
//   for (; step < total; ++step) {
//     train_one_step();
//     if ((step + 1) % 500 == 0) state.checkpoint_async(store, step + 1);  // stalls for the copy only
//   }
// (preempt::Runtime decides when to checkpoint — periodically, on request, on SIGTERM — and calls
// checkpoint_async / checkpoint_in_place itself.)
//
// Entries in the checkpoint (names as SaveItem names, see preempt/store.h):
//   <model>:<qualified.name>               parameters and buffers, dtype and shape of the tensor
//   <optim>:meta                            optimizer kind, param groups' options, per-param steps
//   <optim>:state.<i>.<key>                 per-parameter state (exp_avg, momentum_buffer, sum, ...),
//                                           i = index of the parameter across all param groups
//   <lr>:state                              LR scheduler step count and the learning rates it saw
//   <sampler>:state, <sampler>:perm         sampler position (and permutation)
//   <extra>                                 cereal portable-binary bytes of a user value / cursor
//   rng:cpu, rng:cuda.<d>                   default generators' states (when capture_rng)
// More kinds: subclass Tracked (preempt/torch/tracked.h) and pass it to track(unique_ptr).
//
// Snapshot policy. Staging memory (pre-faulted, huge pages where the kernel gives them; pinned
// when CUDA is available) is prepared on a background thread by prepare_staging() (reserve()
// waits for it), or allocated by the first snapshot that finds none, and then reused; with
// `staging_buffers = 2` a snapshot can be taken while the previous one is still being persisted. When every buffer
// belongs to a save that is still running, WhenBusy decides: kSkip takes no snapshot this time
// (result.skipped, counted in stats().skipped); kWait blocks until the oldest save finishes
// (bounded by the deadline). Extra memory is therefore bounded by staging_buffers × state bytes.
//
// Overlapped checkpoints. checkpoint_overlapped() copies at once only what the next forward
// pass may change (buffers, blobs); parameters and optimizer state (Entry::until_update) are
// copied by a background thread (CPU) or on a CUDA stream of their own (device tensors) while
// the next step's forward and backward run. The trainer calls before_update() right before the
// optimizer update (and before any other in-place change of tracked parameters or optimizer
// state): it returns once those copies no longer read the live tensors, so the checkpoint holds
// exactly the state after the step it is named for. For CUDA tensors the wait is placed on the
// current stream (the update's kernels wait; the host does not). The save is submitted to the
// store when the copy is complete. Every other call of this class that reads or writes tracked
// state (snapshot, checkpoint_*, restore, wait_all) fences first.
//
// Errors. The torch layer reports failure by throwing preempt::Error (LibTorch reports its own by
// exception and these calls return values): track(), snapshot(), persist_async(), checkpoint_*(),
// reserve() and restore() throw, with a message naming the entry; exceptions from LibTorch or
// cereal inside them come out as preempt::Error. A skipped snapshot is not an error. What runs in
// the background — persisting a save — is reported as a Status on its SaveHandle, as in the store;
// wait_all() returns the first such Status and never throws.
//
// Thread-safety: a TrainingState is used by the training thread only (tracked objects are read
// during snapshot() and written during restore()). SaveHandles it returns may be used anywhere.
// Its own background threads prepare staging memory and run the overlapped copies; they read
// tracked tensors only between checkpoint_overlapped() and the next before_update().
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cereal/types/string.hpp>  // extras commonly hold strings and vectors
#include <cereal/types/vector.hpp>
#include <torch/data/samplers/distributed.h>
#include <torch/data/samplers/random.h>
#include <torch/data/samplers/sequential.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include "preempt/deadline.h"
#include "preempt/status.h"
#include "preempt/store.h"
#include "preempt/torch/sampler.h"
#include "preempt/torch/tracked.h"

namespace preempt::torch {

namespace internal {
class StagingPool;
}

enum class WhenBusy {
  kSkip,  // no snapshot this time (SnapshotResult::skipped)
  kWait,  // wait for the oldest running save to finish, up to the deadline
};

struct TrainingStateOptions {
  int staging_buffers = 2;              // 1 or 2
  bool capture_rng = true;              // default CPU generator and every CUDA generator
  bool pin_memory = true;               // pinned staging when CUDA is available
  std::map<std::string, std::string> metadata;  // added to every checkpoint's manifest
};

// What one snapshot did.
struct SnapshotResult {
  int64_t step = -1;
  bool skipped = false;    // kSkip with every staging buffer busy: nothing was staged
  bool in_place = false;   // checkpoint_in_place: entries point at live memory, nothing copied
  uint64_t bytes = 0;      // payload bytes
  size_t entries = 0;
  double stall_s = 0;      // copy into staging: the training stall (in place: collecting entries)
  double wait_s = 0;       // waiting for a free staging buffer (kWait)
  double alloc_s = 0;      // staging (re)allocation or waiting for its preparation (0 once warm)
  bool overlapped = false; // checkpoint_overlapped: stall_s is the part copied before it returned;
                           // the rest is copied until before_update()
};

// A snapshot and the save that persists it (handle is null when the snapshot was skipped).
struct CheckpointResult {
  SnapshotResult snapshot;
  std::shared_ptr<SaveHandle> handle;
};

// Totals since construction.
struct TrainingStateStats {
  int64_t snapshots = 0;
  int64_t skipped = 0;           // snapshots skipped because staging was busy (kSkip)
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
  // The extension point: any Tracked kind (preempt/torch/tracked.h).
  void track(std::unique_ptr<Tracked> object);
  void track(const std::string& name, ::torch::nn::Module& module);
  template <class M>
  void track(const std::string& name, ::torch::nn::ModuleHolder<M>& module) {
    track(name, static_cast<::torch::nn::Module&>(*module.ptr()));
  }
  void track(const std::string& name, const std::shared_ptr<::torch::nn::Module>& module) {
    track(name, *module);
  }
  void track(const std::string& name, ::torch::optim::Optimizer& optimizer);
  // Its step count (a protected member of LRScheduler) and the learning rates of its optimizer,
  // which must be tracked too: restore checks that the optimizer's restored rates are those the
  // scheduler saw (kMismatch otherwise). State a custom subclass adds is not seen: track_extra it.
  void track(const std::string& name, ::torch::optim::LRScheduler& scheduler);
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
        name, [&value] { return ToCerealBytes(value); },
        [&value, name](const std::string& bytes) { FromCerealBytes(bytes, name, &value); });
  }
  // Lowest level: an opaque byte blob produced at snapshot and consumed at restore.
  void track_blob(const std::string& name, std::function<std::string()> save,
                  std::function<void(const std::string&)> load);

  // ---- checkpointing ------------------------------------------------------------------------
  // Copies every tracked entry into a free staging buffer: the only part that stalls training.
  // With every buffer busy: kSkip returns result.skipped; kWait waits for the oldest save until
  // `deadline` (then throws Error kDeadlineExceeded). A staged snapshot that was never persisted
  // is replaced by the next one.
  SnapshotResult snapshot(int64_t step, WhenBusy when_busy = WhenBusy::kWait,
                          Deadline deadline = Deadline::Never());
  // Submits the last staged snapshot to `store` (returns at once). Throws Error when nothing is
  // staged.
  std::shared_ptr<SaveHandle> persist_async(Store& store);
  // snapshot(step) + persist_async(store); no handle when the snapshot was skipped.
  CheckpointResult checkpoint_async(Store& store, int64_t step, WhenBusy when_busy = WhenBusy::kWait,
                                    Deadline deadline = Deadline::Never());
  // The stop checkpoint: the caller will not modify tracked state until the returned save is
  // done, so CPU-contiguous tensors are written straight from their own memory and the copy into
  // staging (the stall) is skipped. Falls back to checkpoint_async(kWait) when any entry is on a
  // device or not contiguous. Waits (until `deadline`) for the previous in-place save.
  CheckpointResult checkpoint_in_place(Store& store, int64_t step, Deadline deadline = Deadline::Never());
  // The overlapped checkpoint (see "Overlapped checkpoints" above): returns after copying what
  // the next forward pass may change; the handle reports the save, which is submitted once the
  // background copy is complete. With every staging buffer busy, as checkpoint_async. Staging
  // that is still being prepared is waited for by the background copy (and so by
  // before_update()), not here.
  CheckpointResult checkpoint_overlapped(Store& store, int64_t step, WhenBusy when_busy = WhenBusy::kWait,
                                         Deadline deadline = Deadline::Never());
  // The fence before the optimizer update: waits until the overlapped checkpoint in flight no
  // longer reads live parameters and optimizer state, copying what is left of them alongside the
  // copy thread. Returns the seconds waited (0 when nothing
  // was in flight). Never throws: a failed copy is reported on the checkpoint's handle.
  double before_update();
  // Waits for every save started by this object; returns the first error.
  Status wait_all(Deadline deadline = Deadline::Never());
  // Starts allocating and pre-faulting staging for the current layout on a background thread
  // and returns at once; snapshots adopt the memory when it is ready. Call it once the layout is
  // complete (optimizer state appears after the first optimizer step).
  void prepare_staging();
  // prepare_staging(), then waits until the staging memory is ready.
  void reserve();

  // ---- restore ------------------------------------------------------------------------------
  // Restores every tracked object from the newest valid checkpoint of `store` (or opts.step).
  // Tensors are read directly into the existing parameters, buffers and optimizer state (CPU,
  // contiguous); entries that have no tensor yet (optimizer state before the first step) are read
  // into new memory that the new tensors adopt. Name, dtype and shape are checked; with
  // opts.strict (default) the store refuses a checkpoint that lacks a tracked entry or holds one
  // nothing tracks, naming it; non-strict, those are logged and skipped. Returns the
  // checkpoint's step, or nullopt when the store holds no committed checkpoint.
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

 private:
  std::vector<Entry> collect() const;
  SaveRequest request_for(int64_t step) const;  // the request's metadata; items left empty

  TrainingStateOptions options_;
  std::vector<std::unique_ptr<Tracked>> tracked_;  // ordered by Tracked::stage(), then registration
  std::unique_ptr<internal::StagingPool> pool_;
  int64_t snapshots_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace preempt::torch
