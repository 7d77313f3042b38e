// The preemption runtime: glue between signal, coord, the torch state layer, the store and hints.
// This file: construction, wiring and the per-step path (checkpoints without stopping, hints).
// restore() is in restore.cc, the stop path in stop.cc. See include/preempt/runtime.h and
// docs/runtime.md.
#include "preempt/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "preempt/log.h"
#include "runtime/internal.h"
#include "preempt/slurm_env.h"

namespace preempt {

using runtime_internal::SecondsSince;

namespace {

std::string DefaultJobName(const std::string& dir) {
  const char* env = std::getenv("PREEMPT_JOB");
  if (env && *env) return env;
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  size_t slash = d.rfind('/');
  std::string name = slash == std::string::npos ? d : d.substr(slash + 1);
  return name.empty() ? "job" : name;
}

// Options the runtime sets itself, or that would silently do nothing, are refused by name.
Status CheckOptions(const RuntimeOptions& o) {
  auto bad = [](const std::string& field, const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "RuntimeOptions." + field + ": " + why);
  };
  if (o.dir.empty()) return bad("dir", "is required (the checkpoint root)");
  if (o.every_steps < 0) return bad("every_steps", "must be >= 0 (0: off)");
  if (!(o.every_seconds >= 0)) return bad("every_seconds", "must be >= 0 (0: off)");
  if (!o.store.root.empty() && o.store.root != o.dir) return bad("store.root", "leave it empty; the root is `dir`");
  if (o.store.rank != 0 || o.store.world_size != 1) {
    return bad("store.rank/world_size", "leave them at 0/1; they come from the process group");
  }
  if (o.state.staging_buffers < 1 || o.state.staging_buffers > 2) return bad("state.staging_buffers", "must be 1 or 2");
  if (!(o.grace_margin >= 1)) return bad("grace_margin", "must be >= 1");
  if (o.preemptions_per_hour < 0) return bad("preemptions_per_hour", "must be >= 0 (0: off)");
  if (!(o.min_interval_s > 0) || !(o.max_interval_s >= o.min_interval_s)) {
    return bad("min_interval_s/max_interval_s", "need 0 < min_interval_s <= max_interval_s");
  }
  return Status::OK();
}

}  // namespace

const char* ActionName(Action a) {
  switch (a) {
    case Action::kContinue: return "continue";
    case Action::kCheckpoint: return "checkpoint";
    case Action::kStop: return "stop";
  }
  return "?";
}

double YoungDalyInterval(double cost_s, double mtbp_s, double min_s, double max_s) {
  if (!(cost_s > 0) || !(mtbp_s > 0)) return max_s;
  double t = std::sqrt(2.0 * cost_s * mtbp_s);
  return std::min(max_s, std::max(min_s, t));
}

struct Runtime::Pending {
  std::shared_ptr<SaveHandle> handle;
  int64_t step = 0;
  double stall_s = 0;
  uint64_t bytes = 0;
  int64_t request_id = 0;
};

Runtime::Runtime(RuntimeOptions options) : options_(std::move(options)) {
  ThrowIfError(CheckOptions(options_));
  if (options_.job.empty()) options_.job = DefaultJobName(options_.dir);
  if (options_.hints_path.empty()) options_.hints_path = HintsPathFromEnv();
  if (options_.request_path.empty() && !options_.hints_path.empty()) {
    options_.request_path = RequestPathFor(options_.hints_path);
  }
  if (options_.install_signal_handlers && SignalHandlersInstalled()) {
    // Installed first thing in main (preempt/signal.h): keep them, and any stop they recorded.
    grace_ = {GraceSeconds(), ReserveSeconds(), "the installed signal handlers"};
    const SignalOptions& so = options_.signals;
    if (!so.stop_signals.empty() || !so.checkpoint_signals.empty() || so.grace_s >= 0 || so.reserve_s >= 0) {
      PREEMPT_LOG_WARN("RuntimeOptions.signals is not used: the signal handlers were installed before the Runtime "
                       "(grace %.1f s, reserve %.1f s); pass these options to InstallSignalHandlers instead",
                       grace_.grace_s, grace_.reserve_s);
    }
    PREEMPT_LOG_DEBUG("adopting the installed signal handlers (stop recorded: %d)", StopRequested() ? 1 : 0);
  } else {
    grace_ = ResolveGrace(options_.signals);
    if (options_.install_signal_handlers) {
      ThrowIfError(InstallSignalHandlers(options_.signals).with_context("Runtime"));
      handlers_installed_ = true;
    }
  }
  checkpoint_signals_seen_ = CheckpointRequestCount();
  torch::TrainingStateOptions so = options_.state;
  state_ = std::make_unique<torch::TrainingState>(so);
  track_runtime_record();
  drains_.push_back(&work_drain_);
  hints_.job = options_.job;
  hints_.grace.granted_s = grace_.grace_s;
  hints_.gpus = options_.gpus;
}

Runtime::~Runtime() {
  if (stopped_) reap(true, runtime_internal::SettleDeadline(stop_deadline_, grace_));
  else reap(true, Deadline::Never());
  if (stopped_ && (!stats_.stop_committed || !pending_.empty())) {
    // A failed stop may leave a save waiting for a peer that will never write its manifest, or a
    // collective that never completes; destroying those would block the exit. The process is
    // about to end: leave them (their .tmp directory is removed at the next start).
    (void)store_.release();
    (void)state_.release();
    (void)coord_.release();
    for (auto& p : pending_) (void)p.release();
  }
  if (handlers_installed_) UninstallSignalHandlers();
}

void Runtime::use_collective(std::unique_ptr<Collective> collective) {
  if (store_) throw Error(Status(StatusCode::kInvalidArgument, "use_process_group/use_collective after restore()"));
  collective_ = std::move(collective);
}

void Runtime::register_work(c10::intrusive_ptr<c10d::Work> work, std::string what) {
  work_drain_.add(std::move(work), std::move(what));
}

Status Runtime::wait_registered() {
  Status st = work_drain_.wait_until_stop_deadline();
  if (!st.ok()) stop_without_checkpoint(st);
  return st;
}

void Runtime::add_drain(DrainSource* source) { drains_.push_back(source); }

int Runtime::rank() const { return collective_ ? collective_->rank() : 0; }
int Runtime::world_size() const { return collective_ ? collective_->world_size() : 1; }

void Runtime::ensure_store() {
  if (store_) return;
  if (!collective_) collective_ = std::make_unique<LocalCollective>();
  coord_ = std::make_unique<StopCoordinator>(collective_.get(), options_.coord);
  StoreOptions so = options_.store;
  so.root = options_.dir;
  so.rank = collective_->rank();
  so.world_size = collective_->world_size();
  // The store's file-based commit barrier (rank 0 waits for every manifest) keeps background
  // saves off the trainer's process group, whose collective order must stay identical on every
  // rank.
  store_ = std::make_unique<Store>(so);
  last_checkpoint_time_ = last_commit_time_ = std::chrono::steady_clock::now();
}

void Runtime::start_requests() {
  if (requests_started_) return;
  requests_started_ = true;
  if (rank() == 0 && !options_.request_path.empty()) {
    // Requests up to the restored acknowledgement were fulfilled by the restored checkpoint.
    // A request older than the commit this job resumed from was answered by that commit.
    const double resumed_commit_unix = hints_.last_commit.step >= 0 ? hints_.last_commit.committed_at : 0;
    requests_ = std::make_unique<RequestChannel>(options_.request_path, std::chrono::milliseconds(5),
                                                 hints_.request_ack, resumed_commit_unix);
  }
}

void Runtime::track_runtime_record() {
  state_->track_blob(
      runtime_internal::kRecordEntry,
      [this] {
        runtime_internal::Record r;
        r.request_ack = std::max(hints_.request_ack, record_request_ack_);
        r.costs = costs_.samples();
        return runtime_internal::EncodeRecord(r);
      },
      [this](const std::string& bytes) {
        runtime_internal::Record r;
        ThrowIfError(runtime_internal::DecodeRecord(bytes, &r));
        hints_.request_ack = r.request_ack;
        costs_.clear();
        for (const auto& c : r.costs) costs_.add(c);
      });
}

double Runtime::grace_needed_s() const {
  if (costs_.count() == 0) return 0;
  Hints::Cost c = costs_.p95_cost();
  // A stop is noticed at the next check step: up to check_every steps (pipelined: one more
  // check period for the exchange in flight).
  double notice_s = stats_.step_time_s * options_.coord.check_every * (options_.coord.pipelined ? 2 : 1);
  return options_.grace_margin * (notice_s + c.drain_s + c.stall_s + c.persist_s);
}

void Runtime::warn_if_grace_short(const char* when) {
  double needed = grace_needed_s();
  double available = grace_.grace_s - grace_.reserve_s;
  if (grace_warned_ || needed <= available) return;
  grace_warned_ = true;
  PREEMPT_LOG_WARN("grace period %.1f s (%s) minus reserve %.1f s is shorter than the %.3f s a stop checkpoint "
                   "needs (measured %s: %.2f × (notice + p95 drain + stall + persist)): a preemption will keep the "
                   "last committed checkpoint",
                   grace_.grace_s, grace_.grace_source.c_str(), grace_.reserve_s, needed, when, options_.grace_margin);
}

double Runtime::interval_seconds() const {
  if (options_.preemptions_per_hour > 0 && costs_.count() > 0) {
    Hints::Cost c = costs_.p95_cost();
    return YoungDalyInterval(c.stall_s, 3600.0 / options_.preemptions_per_hour, options_.min_interval_s,
                             options_.max_interval_s);
  }
  return options_.every_seconds;
}

Action Runtime::step_end(int64_t step) {
  if (stopped_) return Action::kStop;
  ensure_store();
  start_requests();
  auto now = std::chrono::steady_clock::now();
  if (stats_.steps > 0) {
    double dt = std::chrono::duration<double>(now - last_step_end_).count();
    stats_.step_time_s = stats_.steps == 1 ? dt : 0.9 * stats_.step_time_s + 0.1 * dt;
  }
  last_step_end_ = now;
  stats_.steps++;
  hints_.step = step + 1;
  reap(false, Deadline::Never());
  const bool overlap = options_.overlap_snapshot && fence_in_step_;
  fence_in_step_ = false;
  if (options_.reserve_staging && stats_.steps == 1) {
    try {
      state_->prepare_staging();
      PREEMPT_LOG_INFO("preparing staging in the background: %d buffer(s) of %.1f MiB", options_.state.staging_buffers,
                       state_->state_bytes() / 1048576.0);
    } catch (const Error& e) {
      PREEMPT_LOG_WARN("could not prepare staging now (it will be allocated at the first checkpoint): %s", e.what());
    }
  }

  // What this rank saw; sticky until the next exchange.
  bool local_stop = StopRequested();
  uint64_t sig = CheckpointRequestCount();
  if (sig != checkpoint_signals_seen_) {
    checkpoint_signals_seen_ = sig;
    want_checkpoint_ = true;
    PREEMPT_LOG_INFO("checkpoint requested by signal");
  }
  if (requests_) {
    if (auto r = requests_->poll()) {
      request_to_ack_ = std::max(request_to_ack_, r->id);
      answer_request(r->id);
    }
    if (requests_->fulfilled_id() > hints_.request_ack) {  // answered by the commit this job resumed from
      hints_.request_ack = request_to_ack_ = std::max(request_to_ack_, requests_->fulfilled_id());
      publish(pending_.empty() ? JobState::kTraining : JobState::kCheckpointing);
    }
  }
  double interval = interval_seconds();
  if (interval > 0 && SecondsSince(last_checkpoint_time_) >= interval) want_checkpoint_ = true;

  StopDecision d;
  Status st = coord_->check(step, local_stop, want_checkpoint_, StopDeadline(), UntilStop::kYes, &d);
  stats_.coord = coord_->stats();
  if (!st.ok()) {
    stats_.stop_step = step + 1;
    stop_without_checkpoint(st);
    return Action::kStop;
  }
  if (d.stop) return stop_path(step, d);
  bool due = options_.every_steps > 0 && (step + 1) % options_.every_steps == 0;
  if (d.checked) want_checkpoint_ = false;
  if (d.checkpoint || due) {
    start_checkpoint(step, d.checkpoint, overlap);
    return Action::kCheckpoint;
  }
  return Action::kContinue;
}

// A save already in flight answers a request: its commit comes sooner than a new save's would
// (which would wait for it first), and the work since its snapshot is all the requester loses.
// Only rank 0 reads requests, and rank 0's save completes with the COMMIT, so this is its own
// decision: the other ranks never see it.
void Runtime::answer_request(int64_t id) {
  Pending* in_flight = pending_.empty() ? nullptr : pending_.back().get();
  if (in_flight && !in_flight->handle->done()) {
    in_flight->request_id = std::max(in_flight->request_id, id);
    PREEMPT_LOG_INFO("checkpoint request %lld from %s: answered by the save of step %lld already in flight",
                     static_cast<long long>(id), requests_->path().c_str(), static_cast<long long>(in_flight->step));
    return;
  }
  want_checkpoint_ = true;
  PREEMPT_LOG_INFO("checkpoint request %lld from %s", static_cast<long long>(id), requests_->path().c_str());
}

void Runtime::before_update() {
  fence_in_step_ = true;
  if (overlapped_step_ < 0) return;
  const double waited = state_->before_update();
  stats_.fence_wait_s += waited;
  for (auto& p : pending_)
    if (p->step == overlapped_step_) p->stall_s += waited;  // the stall this checkpoint cost
  overlapped_step_ = -1;
}

void Runtime::start_checkpoint(int64_t step, bool requested, bool overlap) {
  auto p = std::make_unique<Pending>();
  p->step = step + 1;
  if (rank() == 0 && requested) p->request_id = request_to_ack_;
  record_request_ack_ = p->request_id;  // saved in this checkpoint: restoring it fulfils the request
  try {
    // kWait on every rank alike: a rank that skipped while the others saved would leave rank 0
    // waiting for a manifest that never comes.
    const torch::CheckpointResult started =
        overlap ? state_->checkpoint_overlapped(*store_, p->step, torch::WhenBusy::kWait, StopDeadline())
                : state_->checkpoint_async(*store_, p->step, torch::WhenBusy::kWait, StopDeadline());
    p->handle = started.handle;
    p->stall_s = started.snapshot.stall_s;
    p->bytes = started.snapshot.bytes;
  } catch (const Error& e) {
    PREEMPT_LOG_ERROR("checkpoint step %lld failed to start: %s", static_cast<long long>(p->step), e.what());
    return;
  }
  if (!p->handle) return;
  last_checkpoint_time_ = std::chrono::steady_clock::now();
  stats_.checkpoints_started++;
  if (overlap) {
    stats_.checkpoints_overlapped++;
    overlapped_step_ = p->step;
  }
  pending_.push_back(std::move(p));
  if (pending_.size() == 1) publish(JobState::kCheckpointing);
}

void Runtime::note_commit(int64_t ckpt_step, const std::string& path) {
  stats_.checkpoints_committed++;
  last_commit_time_ = std::chrono::steady_clock::now();
  // Saves can finish out of order (a periodic save finishing during the stop path): the hints
  // and stats always name the newest commit.
  if (ckpt_step <= stats_.last_commit_step) return;
  stats_.last_commit_step = ckpt_step;
  if (rank() == 0) hints_.last_commit = {ckpt_step, NowUnix(), path};
}

void Runtime::reap(bool block, Deadline deadline) {
  bool changed = false;
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = **it;
    if (!block && !p.handle->done()) {
      ++it;
      continue;
    }
    Status st = p.handle->wait(deadline);
    if (st.code() == StatusCode::kDeadlineExceeded) {
      ++it;
      continue;
    }
    if (st.ok()) {
      SaveStats ss = p.handle->stats();
      costs_.add({p.bytes, 0.0, p.stall_s, ss.total_s});
      note_commit(p.step, p.handle->path());
      if (rank() == 0 && p.request_id > hints_.request_ack) hints_.request_ack = p.request_id;
      PREEMPT_LOG_INFO("checkpoint step %lld durable: %.1f MiB, stall %.3f s, persist %.3f s (%s)",
                       static_cast<long long>(p.step), ss.bytes / 1048576.0, p.stall_s, ss.total_s, ss.backend.c_str());
      warn_if_grace_short("by this run's checkpoints");
    } else {
      PREEMPT_LOG_ERROR("checkpoint step %lld failed: %s", static_cast<long long>(p.step), st.to_string().c_str());
      // A request it was answering still needs a commit: ask for a new checkpoint.
      if (rank() == 0 && p.request_id > hints_.request_ack) want_checkpoint_ = true;
    }
    changed = true;
    it = pending_.erase(it);
  }
  if (changed && !stopped_) publish(pending_.empty() ? JobState::kTraining : JobState::kCheckpointing);
}

Status Runtime::wait(Deadline deadline) {
  Status first;
  for (auto& p : pending_) {
    Status st = p->handle->wait(deadline);
    if (!st.ok() && first.ok()) first = st;
  }
  reap(false, deadline);
  return first;
}

int Runtime::exit_code() {
  if (!stopped_) {
    reap(true, Deadline::Never());
    publish(JobState::kStopped);
    return 0;
  }
  // Under SLURM, a wall-time stop (--signal=USR1@N) requeues the job so its next run resumes.
  if (rank() == 0) RequeueAfterStopFromEnv(StopSignal(), stats_.stop_committed);
  return stats_.stop_committed ? options_.exit_code_preempted : options_.exit_code_failed;
}

void Runtime::publish(JobState state) {
  if (options_.hints_path.empty() || rank() != 0) return;
  hints_.state = state;
  hints_.updated_unix = NowUnix();
  hints_.step_time_s = stats_.step_time_s;
  if (costs_.count() > 0) hints_.cost = costs_.p95_cost();
  hints_.grace.needed_s = grace_needed_s();
  hints_.grace.granted_s = grace_.grace_s;
  hints_.lost_work_s = state == JobState::kStopped && stats_.stop_committed ? 0 : SecondsSince(last_commit_time_);
  Status st = WriteHintsAtomic(options_.hints_path, hints_);
  if (!st.ok()) PREEMPT_LOG_WARN("hints: %s", st.to_string().c_str());
}

}  // namespace preempt
