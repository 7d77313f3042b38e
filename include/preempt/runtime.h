// preempt/runtime.h — the façade a LibTorch trainer calls once per step for preemption safety.
//
//   preempt::RuntimeOptions opts;
//   opts.dir = "/nvme/ckpt/job-42";
//   opts.every_steps = 500;                         // grace: PREEMPT_GRACE_S (default 30 s)
//   preempt::Runtime rt(opts);
//   rt.use_process_group(pg);                       // optional: data-parallel job (gloo / NCCL)
//   rt.track("model", model); rt.track("optim", optimizer); rt.track("data", sampler);
//   int64_t step = rt.restore();                    // 0 when there is nothing to resume
//   for (; step < total; ++step) {
//     forward_backward();                           // rt.register_work(pg->allreduce(...)) if async
//     rt.before_update();                           // the fence that lets checkpoints overlap
//     optimizer.step();
//     if (rt.step_end(step) == preempt::Action::kStop) break;   // agreed, drained, committed
//   }
//   return rt.exit_code();
//
// Step numbering (one convention everywhere): a step number counts COMPLETED training steps.
// The loop variable `step` is therefore both the 0-based index of the step being run and the
// number of steps completed before it. restore() returns the number of steps the restored
// checkpoint holds (the next index to run); step_end(step) is called after step `step` ran, so
// step + 1 steps are complete and a checkpoint taken there is checkpoint step + 1 (directory
// step-<step + 1>). Logs, hints (`step`, `last_commit.step`) and RuntimeStats use the same count.
//
// What step_end does (see docs/runtime.md for the timeline):
//   * every check step (CoordOptions::check_every): one all-reduce(MAX) of [stop, checkpoint,
//     −remaining_ms] — all ranks learn the same decision at the same step;
//   * stop (any rank got a stop signal): drain registered collectives (deadline = receipt + grace
//     − reserve, the earliest of all ranks, and never later than this rank's own receipt of the
//     decision + grace − reserve), snapshot, persist, all ranks' manifests durable, rank 0 writes
//     COMMIT, then every rank learns whether the stop checkpoint is committed (one more
//     all-reduce, bounded by the deadline + half the reserve); returns kStop. A periodic save
//     still persisting is finished first (it is the fallback). A save that misses the deadline is
//     cancelled; whether the checkpoint counts as committed is decided from what is on disk, so
//     every rank reports the same truth (exit code, log, hints).
//   * checkpoint (every_steps, every_seconds / adaptive interval, a checkpoint signal, or a
//     request file): snapshot, persist in the background; returns kCheckpoint. A request that
//     arrives while a save is persisting is answered by that save (acknowledged at its commit)
//     instead of a new one queued behind it. When the step
//     that just ended called before_update() (and RuntimeOptions::overlap_snapshot), only what
//     the next forward pass may change is copied now; parameters and optimizer state are copied
//     in the background while the next step's forward and backward run, and that step's
//     before_update() waits for the copy (TrainingState::checkpoint_overlapped). Otherwise the
//     whole copy happens here (the stall).
//
// Exit codes (exit_code()):
//   0    training ended without a stop request (pending saves waited for)
//   143  (RuntimeOptions::exit_code_preempted, = 128 + SIGTERM) stopped on a signal and the stop
//        checkpoint is committed: the launcher should requeue/restart the job
//   75   (exit_code_failed, EX_TEMPFAIL) stopped, but the stop checkpoint was not committed
//        (deadline, I/O error, a stuck rank): the previous committed checkpoint will be restored
//
// Signals: the Runtime installs the stop/checkpoint handlers (RuntimeOptions::signals) unless
// they are already installed, in which case it adopts them and any stop already recorded (see
// preempt/signal.h for installing them first thing in main, before the Runtime exists).
//
// Hints: rank 0 publishes preempt.hints/1 (include/preempt/hints.h) to options.hints_path or
// $PREEMPT_HINTS_FILE at start-up, every commit and every state change. Hints are output only:
// what the runtime needs back after a restart (measured costs, the last acknowledged checkpoint
// request) is stored in every checkpoint as the entry "preempt.runtime".
//
// Errors: the constructor and restore() throw preempt::Error (bad options; checkpoints that exist
// but cannot be restored); step_end() never throws: a failure on the stop path is reported by
// exit_code() and stats().stop_problem.
//
// Thread-safety: the training thread only (register_work may be called from any thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "preempt/coord.h"
#include "preempt/coord_c10d.h"
#include "preempt/hints.h"
#include "preempt/signal.h"
#include "preempt/store.h"
#include "preempt/torch/training_state.h"

namespace preempt {

enum class Action {
  kContinue,    // nothing happened (the common case)
  kCheckpoint,  // a checkpoint was snapshotted at this step and is persisting in the background
  kStop,        // every rank stops after this step; the stop checkpoint is done (see exit_code())
};
const char* ActionName(Action a);

inline constexpr int kExitPreempted = 143;
inline constexpr int kExitStopFailed = 75;

struct RuntimeOptions {
  std::string dir;                 // checkpoint root (required); the store's root
  int64_t every_steps = 0;         // periodic checkpoint every N steps (0: off)
  double every_seconds = 0;        // periodic checkpoint every T seconds (0: off)
  // The store (keep_last, io_backend, direct_io, chunk_bytes, ...). root, rank and world_size are
  // set by the runtime (from `dir` and the process group) and must be left at their defaults.
  StoreOptions store;
  // The state capture (staging_buffers, capture_rng, metadata, ...). Its own periodic schedule
  // (every_steps, every_seconds) must stay 0: the runtime's fields above are the schedule.
  torch::TrainingStateOptions state;
  std::string job;                 // hints "job"; default $PREEMPT_JOB or the dir's last component
  std::string hints_path;          // default $PREEMPT_HINTS_FILE ("" and unset: no hints)
  std::string request_path;        // default RequestPathFor(hints_path) when hints are on
  SignalOptions signals;           // stop/checkpoint signals, grace, reserve
  bool install_signal_handlers = true;  // false: none (and none adopted); stops come from RequestStop()
  CoordOptions coord;              // check_every, collective timeout
  // Young/Daly adaptive interval: when preemptions_per_hour > 0, the periodic interval is
  // sqrt(2 · stall_p95 · MTBP) seconds (MTBP = 3600 / rate), clamped to [min, max]; it replaces
  // every_seconds once a checkpoint cost was measured.
  double preemptions_per_hour = 0;
  double min_interval_s = 10;
  double max_interval_s = 3600;
  // Grace needed = margin × (time to notice a stop + p95(drain + stall + persist)), all measured:
  // noticing takes up to check_every step times (twice that when pipelined).
  double grace_margin = 1.25;
  int exit_code_preempted = kExitPreempted;
  int exit_code_failed = kExitStopFailed;
  // Allocate and pre-fault the staging buffers on a background thread from the end of the first
  // step (optimizer state exists then), so that no step waits for it (seconds per GiB on a VM).
  bool reserve_staging = true;
  // Overlap the copy of a periodic checkpoint with the next step's forward and backward when the
  // trainer calls before_update() (see Runtime::before_update).
  bool overlap_snapshot = true;
  int gpus = 0;                    // hints "gpus"
};

// Step numbers count completed steps (see the top of this file).
struct RuntimeStats {
  int64_t steps = 0;               // step_end calls in this process
  int64_t checkpoints_started = 0;
  int64_t checkpoints_committed = 0;
  int64_t last_commit_step = -1;
  double step_time_s = 0;          // EWMA
  int64_t checkpoints_overlapped = 0;  // of checkpoints_started: copied while the next step ran
  double fence_wait_s = 0;         // total time before_update() waited for those copies
  CoordStats coord;
  // The stop path (valid after a stop).
  int64_t stop_step = -1;          // completed steps at the stop = the stop checkpoint's step
  double signal_to_decision_s = 0; // receipt → agreement (0 on ranks that got no signal)
  double drain_s = 0, stall_s = 0, persist_s = 0;
  double signal_to_commit_s = 0;   // receipt → commit known on this rank
  bool stop_committed = false;
  std::string stop_problem;        // why the stop checkpoint did not commit
};

// Young/Daly: the interval that minimizes checkpoint overhead plus expected lost work,
// sqrt(2 · cost · mtbp), clamped to [min_s, max_s]. cost_s <= 0 or mtbp_s <= 0 → max_s.
double YoungDalyInterval(double cost_s, double mtbp_s, double min_s, double max_s);

class Runtime {
 public:
  // Installs signal handlers (or adopts installed ones) and reads configuration. Throws Error on
  // bad options, naming the field.
  explicit Runtime(RuntimeOptions options);
  // Waits for background saves (bounded by the stop path's deadline after a stop); uninstalls the
  // handlers it installed itself (adopted ones stay).
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // ---- job wiring (before restore) ----------------------------------------------------------
  // A c10d process group (1.x ProcessGroup; 2.x ProcessGroup or Backend): rank, world size and
  // the stop agreement come from it.
  template <class PG>
  void use_process_group(c10::intrusive_ptr<PG> pg) {
    use_collective(MakeC10dCollective(std::move(pg)));
  }
  void use_collective(std::unique_ptr<Collective> collective);
  // A collective the trainer launched asynchronously; waited (with the deadline) before a stop
  // snapshot. Completed handles are dropped automatically.
  void register_work(c10::intrusive_ptr<c10d::Work> work, std::string what = "collective");
  // Waits for every registered collective (e.g. the gradient all_reduce before the optimizer
  // step). No deadline of its own, but bounded by the stop deadline once a stop signal arrived
  // (also one that arrives during the wait). When a collective cannot
  // complete by then (a peer is stuck), the runtime gives up: the job is marked stopped without a
  // new checkpoint (exit_code() = exit_code_failed) and the error is returned; break out of the
  // training loop then.
  Status wait_registered();
  // Another drain source (e.g. NcclDrain); must outlive the runtime.
  void add_drain(DrainSource* source);

  // ---- state --------------------------------------------------------------------------------
  template <class T>
  void track(const std::string& name, T& object) {
    state_->track(name, object);
  }
  template <class T>
  void track_extra(const std::string& name, T& value) {
    state_->track_extra(name, value);
  }
  torch::TrainingState& state() { return *state_; }

  // Restores every tracked object from the newest checkpoint all ranks can read; returns its step
  // (the next step index to run; 0 when the directory holds no checkpoint). Every checkpoint it
  // skips is logged with the reason. Throws Error (on every rank alike), touching nothing on
  // disk, when checkpoints exist but none can be restored (another world size, every COMMIT
  // corrupt, ...), and at once on a mismatch (a tensor's shape or dtype, a missing entry): an
  // older checkpoint cannot fix that. Logs (and publishes in hints) whether the grace period fits
  // the measured costs.
  int64_t restore();

  // ---- per step -----------------------------------------------------------------------------
  // The fence before the optimizer update. Call it in every step right before optimizer.step()
  // (and before any other in-place change of tracked parameters or optimizer state): it waits
  // until the copy of the last checkpoint no longer reads them (on CUDA the update's kernels
  // wait for the device-to-host copy; the host does not). A step that called it lets the
  // checkpoint taken at its step_end overlap with the next step's forward and backward; the
  // runtime relies on the next step calling it too. Never throws; O(ns) when nothing is copying.
  void before_update();
  // After step `step` (0-based index) ran: step + 1 steps are complete.
  Action step_end(int64_t step);
  // True once a stop was decided (step_end returned kStop).
  bool stopped() const { return stopped_; }
  // Waits for pending saves (normal end) and returns the documented exit code.
  int exit_code();
  // Waits for background saves until `deadline`; first error.
  Status wait(Deadline deadline = Deadline::Never());
  // The grace period a stop checkpoint needs from the signal, from measured costs (0 before any
  // checkpoint was measured); published as hints grace.needed_s.
  double grace_needed_s() const;

  int rank() const;
  int world_size() const;
  const RuntimeStats& stats() const { return stats_; }
  const RuntimeOptions& options() const { return options_; }
  Store* store() { return store_.get(); }
  // The periodic interval in seconds currently in force (every_seconds or adaptive; 0: none).
  double interval_seconds() const;
  Hints hints() const { return hints_; }

 private:
  struct Pending;
  struct RestorePlan;
  void ensure_store();
  void start_requests();
  void track_runtime_record();
  // restore() steps (src/runtime/restore.cc).
  Status agree_on_candidate(RestorePlan* plan);
  Status restore_agreed(const RestorePlan& plan, int64_t* restored);
  void adopt_restored(int64_t step, const std::string& path);
  // stop path steps (src/runtime/stop.cc).
  Action stop_path(int64_t step, const StopDecision& d);
  Status write_stop_checkpoint(int64_t ckpt_step, std::shared_ptr<SaveHandle>* handle);
  bool confirm_stop_commit(int64_t ckpt_step, const std::shared_ptr<SaveHandle>& handle, Status* result);
  bool committed_on_disk(int64_t ckpt_step);
  void stop_without_checkpoint(const Status& why);
  void start_checkpoint(int64_t step, bool requested, bool overlap);
  void answer_request(int64_t id);
  void reap(bool block, Deadline deadline);
  void note_commit(int64_t ckpt_step, const std::string& path);
  void warn_if_grace_short(const char* when);
  void publish(JobState state);

  RuntimeOptions options_;
  GraceConfig grace_;
  std::unique_ptr<torch::TrainingState> state_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Collective> collective_;
  std::unique_ptr<StopCoordinator> coord_;
  WorkDrain work_drain_;
  std::vector<DrainSource*> drains_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::unique_ptr<RequestChannel> requests_;
  CostTracker costs_;
  Hints hints_;
  RuntimeStats stats_;
  uint64_t checkpoint_signals_seen_ = 0;
  uint64_t stop_bytes_ = 0;  // bytes of the stop checkpoint's snapshot
  int64_t request_to_ack_ = 0;
  int64_t record_request_ack_ = 0;  // the request a snapshot being taken fulfils (saved with it)
  Deadline stop_deadline_ = Deadline::Never();  // the stop path's deadline, once stopped
  std::chrono::steady_clock::time_point last_step_end_{};
  std::chrono::steady_clock::time_point last_checkpoint_time_{};
  std::chrono::steady_clock::time_point last_commit_time_{};
  int64_t overlapped_step_ = -1;  // the checkpoint whose copy may still be running
  bool fence_in_step_ = false;    // before_update() was called since the last step_end
  bool stopped_ = false;
  bool want_checkpoint_ = false;
  bool grace_warned_ = false;
  bool handlers_installed_ = false;  // by this runtime (uninstalled by the destructor)
  bool restored_ = false;
  bool requests_started_ = false;
};

}  // namespace preempt
