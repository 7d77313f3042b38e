// preempt/runtime.h — the façade a LibTorch trainer calls once per step for preemption safety.
//
//   preempt::Runtime rt({.dir = "/nvme/ckpt/job-42", .every_steps = 500});  // grace from env
//   rt.use_process_group(pg);                       // optional: data-parallel job (gloo / NCCL)
//   rt.track("model", model); rt.track("optim", optimizer); rt.track("cursor", cursor);
//   int64_t step = rt.restore();                    // 0 when there is nothing to resume
//   for (; step < total; ++step) {
//     train_one_step();                             // rt.register_work(pg->allreduce(...)) if async
//     if (rt.step_end(step) == preempt::Action::kStop) break;   // agreed, drained, committed
//   }
//   return rt.exit_code();
//
// step_end(step) is called by every rank after step `step` (0-based) completed. A checkpoint taken
// there holds the state after `step + 1` completed steps and is stored as step `step + 1`, which
// is what restore() returns: the index of the next step to run.
//
// What step_end does (see docs/runtime.md for the timeline):
//   * every check step (CoordOptions::check_every): one all-reduce(MAX) of [stop, checkpoint,
//     −remaining_ms] — all ranks learn the same decision at the same step;
//   * stop (any rank got a stop signal): drain registered collectives (deadline = receipt + grace
//     − reserve, the earliest of all ranks), snapshot, persist, all ranks' manifests durable, rank 0
//     writes COMMIT, every rank learns that it committed (one more all-reduce), hints updated;
//     returns kStop. A periodic save still persisting is finished first (it is the fallback);
//     the emergency save queues behind it. A save that cannot finish by the deadline is cancelled,
//     so the last committed checkpoint stays the one restored.
//   * checkpoint (every_steps, every_seconds / adaptive interval, a checkpoint signal, or a
//     request file): snapshot now (the stall), persist in the background; returns kCheckpoint.
//
// Exit codes (exit_code()):
//   0    training ended without a stop request (pending saves waited for)
//   143  (RuntimeOptions::exit_code_preempted, = 128 + SIGTERM) stopped on a signal and the stop
//        checkpoint is committed: the launcher should requeue/restart the job
//   75   (exit_code_failed, EX_TEMPFAIL) stopped, but the stop checkpoint was not committed
//        (deadline, I/O error, a stuck rank): the previous committed checkpoint will be restored
//
// Hints: rank 0 publishes preempt.hints/1 (include/preempt/hints.h) to options.hints_path or
// $PREEMPT_HINTS_FILE at start-up, every commit and every state change.
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
  std::string dir;                 // checkpoint root (required)
  int64_t every_steps = 0;         // periodic checkpoint every N steps (0: off)
  double every_seconds = 0;        // periodic checkpoint every T seconds (0: off)
  int keep_last = 3;
  std::string job;                 // hints "job"; default $PREEMPT_JOB or the dir's last component
  std::string hints_path;          // default $PREEMPT_HINTS_FILE ("" and unset: no hints)
  std::string request_path;        // default RequestPathFor(hints_path) when hints are on
  SignalOptions signals;           // stop/checkpoint signals, grace, reserve
  bool install_signal_handlers = true;
  CoordOptions coord;              // check_every, collective timeout
  // Young/Daly adaptive interval: when preemptions_per_hour > 0, the periodic interval is
  // sqrt(2 · stall_p95 · MTBP) seconds (MTBP = 3600 / rate), clamped to [min, max]; it replaces
  // every_seconds once a checkpoint cost was measured.
  double preemptions_per_hour = 0;
  double min_interval_s = 10;
  double max_interval_s = 3600;
  double grace_margin = 1.25;      // grace needed = margin × p95(drain + stall + persist) + 1 s
  int exit_code_preempted = kExitPreempted;
  int exit_code_failed = kExitStopFailed;
  int staging_buffers = 2;         // 1: less memory, but a save must finish before the next snapshot
  // Allocate and pre-fault the staging buffers at the end of the first step (optimizer state
  // exists then), so the stop path never pays for the allocation (it can take seconds on a VM).
  bool reserve_staging = true;
  int gpus = 0;                    // hints "gpus"
  IoBackend io_backend = IoBackend::kAuto;
  DirectIo direct_io = DirectIo::kAuto;
  std::map<std::string, std::string> metadata;  // stored in every checkpoint's manifest
};

struct RuntimeStats {
  int64_t steps = 0;
  int64_t checkpoints_started = 0;
  int64_t checkpoints_committed = 0;
  int64_t last_commit_step = -1;
  double step_time_s = 0;          // EWMA
  CoordStats coord;
  // The stop path (valid after a stop).
  int64_t stop_step = -1;
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
  // Installs signal handlers (unless disabled) and reads configuration. Throws Error on bad options.
  explicit Runtime(RuntimeOptions options);
  // Waits for background saves (bounded by the stop deadline after a stop); uninstalls handlers.
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
  // step), honouring the stop deadline once a stop signal arrived. When a collective cannot
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

  // Restores every tracked object from the newest checkpoint all ranks have; returns the step to
  // run next (0 when there is none). Throws Error on a checkpoint that exists but cannot be
  // restored. Logs (and publishes in hints) whether the grace period fits the measured costs.
  int64_t restore();

  // ---- per step -----------------------------------------------------------------------------
  Action step_end(int64_t step);
  // True once a stop was decided (step_end returned kStop).
  bool stopped() const { return stopped_; }
  // Waits for pending saves (normal end) and returns the documented exit code.
  int exit_code();
  // Waits for background saves until `deadline`; first error.
  Status wait(Deadline deadline = Deadline::Never());

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
  void ensure_store();
  Action stop_path(int64_t step, const StopDecision& d);
  void start_checkpoint(int64_t step, bool requested);
  void reap(bool block, Deadline deadline);
  void publish(JobState state);
  bool checkpoint_fits(double remaining_s, double* needed_s) const;

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
  int64_t request_to_ack_ = 0;
  std::chrono::steady_clock::time_point last_step_end_{};
  std::chrono::steady_clock::time_point last_checkpoint_time_{};
  std::chrono::steady_clock::time_point last_commit_time_{};
  bool stopped_ = false;
  bool want_checkpoint_ = false;
  bool grace_warned_ = false;
  bool handlers_installed_ = false;
  bool restored_ = false;
};

}  // namespace preempt
