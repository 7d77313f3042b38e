// The preemption runtime: glue between signal, coord, the torch state layer, the store and hints.
// See include/preempt/runtime.h and docs/runtime.md.
#include "preempt/runtime.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "preempt/log.h"
#include "preempt/slurm_env.h"

namespace preempt {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string DefaultJobName(const std::string& dir) {
  const char* env = std::getenv("PREEMPT_JOB");
  if (env && *env) return env;
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  size_t slash = d.rfind('/');
  std::string name = slash == std::string::npos ? d : d.substr(slash + 1);
  return name.empty() ? "job" : name;
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
  if (options_.dir.empty()) throw Error(Status(StatusCode::kInvalidArgument, "Runtime: options.dir is required"));
  if (options_.job.empty()) options_.job = DefaultJobName(options_.dir);
  if (options_.hints_path.empty()) options_.hints_path = HintsPathFromEnv();
  if (options_.request_path.empty() && !options_.hints_path.empty()) {
    options_.request_path = RequestPathFor(options_.hints_path);
  }
  grace_ = ResolveGrace(options_.signals);
  if (options_.install_signal_handlers) {
    ThrowIfError(InstallSignalHandlers(options_.signals).WithContext("Runtime"));
    handlers_installed_ = true;
  }
  checkpoint_signals_seen_ = CheckpointRequestCount();
  torch::TrainingStateOptions so;
  so.staging_buffers = options_.staging_buffers;
  so.when_busy = torch::WhenBusy::kWait;
  so.metadata = options_.metadata;
  state_ = std::make_unique<torch::TrainingState>(so);
  drains_.push_back(&work_drain_);
  hints_.job = options_.job;
  hints_.grace.granted_s = grace_.grace_s;
  hints_.gpus = options_.gpus;
}

Runtime::~Runtime() {
  if (stopped_ && !stats_.stop_committed) {
    // A failed stop may leave a save waiting for a peer that will never write its manifest, or a
    // collective that never completes; destroying those would block the exit. The process is
    // about to end: leave them (their .tmp directory is removed at the next start).
    (void)store_.release();
    (void)state_.release();
    (void)coord_.release();
  } else {
    reap(true, stopped_ ? StopDeadline() : Deadline::Never());
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
  Status st = work_drain_.drain(Deadline::Never());  // WaitWork also honours StopDeadline()
  if (!st.ok()) {
    PREEMPT_LOG_ERROR("%s; stopping without a new checkpoint (the newest committed one stays the one restored)",
                      st.ToString().c_str());
    stopped_ = true;
    stats_.stop_problem = st.ToString();
    if (collective_) collective_->abandon();
    publish(JobState::kStopped);
  }
  return st;
}

void Runtime::add_drain(DrainSource* source) { drains_.push_back(source); }

int Runtime::rank() const { return collective_ ? collective_->rank() : 0; }
int Runtime::world_size() const { return collective_ ? collective_->world_size() : 1; }

void Runtime::ensure_store() {
  if (store_) return;
  if (!collective_) collective_ = std::make_unique<LocalCollective>();
  coord_ = std::make_unique<StopCoordinator>(collective_.get(), options_.coord);
  StoreOptions so;
  so.root = options_.dir;
  so.rank = collective_->rank();
  so.world_size = collective_->world_size();
  so.keep_last = options_.keep_last;
  so.io_backend = options_.io_backend;
  so.direct_io = options_.direct_io;
  // No commit_barrier: the store's own file-based barrier (rank 0 waits for every manifest) keeps
  // background saves off the trainer's process group, whose collective order must stay identical
  // on every rank.
  store_ = std::make_unique<Store>(so);
  if (rank() == 0 && !options_.request_path.empty()) {
    requests_ = std::make_unique<RequestChannel>(options_.request_path, std::chrono::milliseconds(5), hints_.request_ack);
  }
  last_checkpoint_time_ = last_commit_time_ = std::chrono::steady_clock::now();
}

int64_t Runtime::restore() {
  // Previous hints (rank 0): measured costs for the start-up grace check, and the last
  // acknowledged request so a resumed job does not redo it.
  if (!options_.hints_path.empty()) {
    Hints old;
    if (ReadHints(options_.hints_path, &old).ok()) {
      hints_.request_ack = old.request_ack;
      hints_.last_commit = old.last_commit;
      if (old.cost.stall_s + old.cost.persist_s > 0) {
        costs_.Add({old.cost.bytes, old.cost.drain_s, old.cost.stall_s, old.cost.persist_s});
      }
    }
  }
  ensure_store();
  restored_ = true;
  std::vector<int64_t> steps;
  Status ls = store_->valid_steps(&steps);
  if (!ls.ok() && ls.code() != StatusCode::kNotFound) ThrowIfError(ls.WithContext("restore: list checkpoints"));
  int64_t result = 0;
  auto older_than = [&](int64_t s) {
    for (int64_t v : steps)
      if (v < s) return v;
    return int64_t{-1};
  };
  // Newest step every rank has: MAX over −newest gives the minimum; MAX over newest tells whether
  // anyone has one at all.
  int64_t newest = steps.empty() ? -1 : steps.front();
  int64_t v[2] = {-newest, newest};
  ThrowIfError(collective_->allreduce_max(v, 2, Deadline::InSeconds(options_.coord.collective_timeout_s))
                   .WithContext("restore: agree on a step"));
  int64_t candidate = -v[0];
  if (v[1] >= 0 && candidate < 0) {
    throw Error(Status(StatusCode::kMismatch, "restore: some ranks have committed checkpoints in " + options_.dir +
                                                  " and others have none"));
  }
  while (candidate >= 0) {
    RestoreOptions ro;
    ro.step = candidate;
    ro.fallback = false;
    bool ok = true;
    std::string why;
    try {
      auto got = state_->restore(*store_, ro);
      ok = got.has_value();
      if (!ok) why = "not found";
    } catch (const Error& e) {
      ok = false;
      why = e.what();
    }
    if (!ok) PREEMPT_LOG_ERROR("restore of step %lld failed: %s", static_cast<long long>(candidate), why.c_str());
    int64_t f[2] = {ok ? 0 : 1, -older_than(candidate)};
    ThrowIfError(collective_->allreduce_max(f, 2, Deadline::InSeconds(options_.coord.collective_timeout_s))
                     .WithContext("restore: agree on success"));
    if (f[0] == 0) {
      result = candidate;
      break;
    }
    candidate = -f[1];
    if (candidate < 0) {
      throw Error(Status(StatusCode::kCorruption,
                         "restore: no checkpoint in " + options_.dir + " could be restored on every rank"));
    }
    PREEMPT_LOG_WARN("falling back to the older checkpoint step %lld", static_cast<long long>(candidate));
  }
  if (result > 0) {
    stats_.last_commit_step = result;
    PREEMPT_LOG_INFO("resumed from step %lld (%s)", static_cast<long long>(result), options_.dir.c_str());
  }
  // Start-up grace check from measured costs.
  double needed = 0;
  if (costs_.count() > 0) {
    if (!checkpoint_fits(grace_.grace_s - grace_.reserve_s, &needed)) {
      grace_warned_ = true;
      PREEMPT_LOG_WARN("grace period %.1f s (%s) minus reserve %.1f s is shorter than the %.1f s a stop checkpoint "
                       "needs (measured p95 × %.2f + 1 s): a preemption will keep the last committed checkpoint",
                       grace_.grace_s, grace_.grace_source.c_str(), grace_.reserve_s, needed, options_.grace_margin);
    }
  }
  publish(JobState::kTraining);
  return result;
}

bool Runtime::checkpoint_fits(double remaining_s, double* needed_s) const {
  if (costs_.count() == 0) {
    *needed_s = 0;
    return true;
  }
  Hints::Cost c = costs_.P95Cost();
  *needed_s = options_.grace_margin * (c.drain_s + c.stall_s + c.persist_s) + 1.0;
  return *needed_s <= remaining_s;
}

double Runtime::interval_seconds() const {
  if (options_.preemptions_per_hour > 0 && costs_.count() > 0) {
    Hints::Cost c = costs_.P95Cost();
    return YoungDalyInterval(c.stall_s, 3600.0 / options_.preemptions_per_hour, options_.min_interval_s,
                             options_.max_interval_s);
  }
  return options_.every_seconds;
}

Action Runtime::step_end(int64_t step) {
  if (stopped_) return Action::kStop;
  if (!store_) ensure_store();
  auto now = std::chrono::steady_clock::now();
  if (stats_.steps > 0) {
    double dt = std::chrono::duration<double>(now - last_step_end_).count();
    stats_.step_time_s = stats_.steps == 1 ? dt : 0.9 * stats_.step_time_s + 0.1 * dt;
  }
  last_step_end_ = now;
  stats_.steps++;
  hints_.step = step + 1;
  reap(false, Deadline::Never());
  if (options_.reserve_staging && stats_.steps == 1) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      state_->reserve();
      PREEMPT_LOG_INFO("staging reserved: %d buffer(s) of %.1f MiB in %.3f s", options_.staging_buffers,
                       state_->state_bytes() / 1048576.0, SecondsSince(t0));
    } catch (const std::exception& e) {
      PREEMPT_LOG_WARN("could not reserve staging now (it will be allocated at the first checkpoint): %s", e.what());
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
      want_checkpoint_ = true;
      request_to_ack_ = std::max(request_to_ack_, r->id);
      PREEMPT_LOG_INFO("checkpoint request %lld from %s", static_cast<long long>(r->id), requests_->path().c_str());
    }
  }
  double interval = interval_seconds();
  if (interval > 0 && SecondsSince(last_checkpoint_time_) >= interval) want_checkpoint_ = true;

  StopDecision d;
  Status st = coord_->check(step, local_stop, want_checkpoint_, StopDeadline(), &d);
  stats_.coord = coord_->stats();
  if (!st.ok()) {
    PREEMPT_LOG_ERROR("%s; stopping without a new checkpoint (the newest committed one stays the one restored)",
                      st.ToString().c_str());
    stopped_ = true;
    stats_.stop_step = step;
    stats_.stop_problem = st.ToString();
    collective_->abandon();
    publish(JobState::kStopped);
    return Action::kStop;
  }
  if (d.stop) return stop_path(step, d);
  bool due = options_.every_steps > 0 && (step + 1) % options_.every_steps == 0;
  if (d.checked) want_checkpoint_ = false;
  if (d.checkpoint || due) {
    start_checkpoint(step, d.checkpoint);
    return Action::kCheckpoint;
  }
  return Action::kContinue;
}

void Runtime::start_checkpoint(int64_t step, bool requested) {
  auto p = std::make_unique<Pending>();
  p->step = step + 1;
  try {
    // kWait on every rank alike: a rank that skipped while the others saved would leave rank 0
    // waiting for a manifest that never comes.
    p->handle = state_->checkpoint_async(*store_, step + 1, torch::WhenBusy::kWait, StopDeadline());
  } catch (const Error& e) {
    PREEMPT_LOG_ERROR("checkpoint at step %lld failed to start: %s", static_cast<long long>(step + 1), e.what());
    return;
  }
  if (!p->handle) return;
  auto ts = state_->stats();
  p->stall_s = ts.last_stall_s;
  p->bytes = ts.last_bytes;
  if (rank() == 0 && requested) p->request_id = request_to_ack_;
  last_checkpoint_time_ = std::chrono::steady_clock::now();
  stats_.checkpoints_started++;
  pending_.push_back(std::move(p));
  if (pending_.size() == 1) publish(JobState::kCheckpointing);
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
      costs_.Add({p.bytes, 0.0, p.stall_s, ss.total_s});
      stats_.checkpoints_committed++;
      stats_.last_commit_step = p.step;
      last_commit_time_ = std::chrono::steady_clock::now();
      if (rank() == 0) {
        hints_.last_commit = {p.step, NowUnix(), p.handle->path()};
        if (p.request_id > hints_.request_ack) hints_.request_ack = p.request_id;
      }
      PREEMPT_LOG_INFO("checkpoint step %lld durable: %.1f MiB, stall %.3f s, persist %.3f s (%s)",
                       static_cast<long long>(p.step), ss.bytes / 1048576.0, p.stall_s, ss.total_s, ss.backend.c_str());
      double needed = 0;
      if (!grace_warned_ && !checkpoint_fits(grace_.grace_s - grace_.reserve_s, &needed)) {
        grace_warned_ = true;
        PREEMPT_LOG_WARN("grace period %.1f s (%s) minus reserve %.1f s is shorter than the %.1f s a stop checkpoint "
                         "needs (measured p95 × %.2f + 1 s): a preemption will keep the last committed checkpoint",
                         grace_.grace_s, grace_.grace_source.c_str(), grace_.reserve_s, needed, options_.grace_margin);
      }
    } else {
      PREEMPT_LOG_ERROR("checkpoint step %lld failed: %s", static_cast<long long>(p.step), st.ToString().c_str());
    }
    changed = true;
    it = pending_.erase(it);
  }
  if (changed && !stopped_) publish(pending_.empty() ? JobState::kTraining : JobState::kCheckpointing);
}

Action Runtime::stop_path(int64_t step, const StopDecision& d) {
  stopped_ = true;
  stats_.stop_step = step;
  const int64_t receipt = StopReceiptMonotonicNs();
  if (receipt > 0) stats_.signal_to_decision_s = (MonoNs() - receipt) / 1e9;
  Deadline deadline = d.deadline;
  if (deadline.is_never()) deadline = Deadline::InSeconds(grace_.grace_s - grace_.reserve_s);
  publish(JobState::kStopping);
  double needed = 0;
  if (!checkpoint_fits(deadline.remaining_seconds(), &needed)) {
    PREEMPT_LOG_WARN("stop at step %lld: a checkpoint needs ~%.1f s but only %.1f s are left before the deadline; "
                     "trying anyway — if it does not finish, the last committed checkpoint (step %lld) is the one "
                     "restored",
                     static_cast<long long>(step + 1), needed, deadline.remaining_seconds(),
                     static_cast<long long>(stats_.last_commit_step));
  } else {
    PREEMPT_LOG_INFO("stop agreed at step %lld (%s from pid %d, %d signal(s)); %.2f s left before the deadline",
                     static_cast<long long>(step + 1), StopSignal() > 0 ? SignalName(StopSignal()) : "peer",
                     StopSenderPid(), StopSignalCount(), deadline.remaining_seconds());
  }
  auto t0 = std::chrono::steady_clock::now();
  Status result = DrainAll(drains_, deadline);
  stats_.drain_s = SecondsSince(t0);
  std::shared_ptr<SaveHandle> handle;
  if (result.ok()) {
    try {
      // Training is over for this process: write straight from the live tensors (no staging copy).
      handle = state_->checkpoint_in_place(*store_, step + 1, deadline);
      stats_.stall_s = state_->stats().last_stall_s;
    } catch (const Error& e) {
      result = e.status().WithContext("stop snapshot");
    }
  }
  if (handle) {
    auto t1 = std::chrono::steady_clock::now();
    Status ws = handle->wait(deadline);
    stats_.persist_s = SecondsSince(t1);
    if (!ws.ok()) {
      handle->cancel();
      result = ws.WithContext("stop checkpoint step " + std::to_string(step + 1));
    }
  }
  // Every rank learns whether every part is durable (rank 0's save returns only after COMMIT).
  int64_t failed = result.ok() ? 0 : 1;
  Status as = collective_->allreduce_max(&failed, 1, deadline);
  if (!as.ok()) {
    collective_->abandon();
    if (result.ok()) result = as.WithContext("confirming the stop checkpoint");
  } else if (failed && result.ok()) {
    result = Status(StatusCode::kAborted, "another rank could not write its part of the stop checkpoint");
  }
  if (receipt > 0) stats_.signal_to_commit_s = (MonoNs() - receipt) / 1e9;
  if (result.ok()) {
    stats_.stop_committed = true;
    stats_.checkpoints_committed++;
    stats_.last_commit_step = step + 1;
    costs_.Add({state_->stats().last_bytes, stats_.drain_s, stats_.stall_s, stats_.persist_s});
    if (rank() == 0) hints_.last_commit = {step + 1, NowUnix(), handle->path()};
    PREEMPT_LOG_INFO("stop checkpoint step %lld committed: drain %.3f s, stall %.3f s, persist+commit %.3f s; "
                     "%.3f s after the signal, %.2f s before the deadline",
                     static_cast<long long>(step + 1), stats_.drain_s, stats_.stall_s, stats_.persist_s,
                     stats_.signal_to_commit_s, deadline.remaining_seconds());
  } else {
    stats_.stop_problem = result.ToString();
    PREEMPT_LOG_ERROR("stop checkpoint step %lld NOT committed: %s; the last committed checkpoint (step %lld) "
                      "stays the one restored",
                      static_cast<long long>(step + 1), result.ToString().c_str(),
                      static_cast<long long>(stats_.last_commit_step));
  }
  // Periodic saves that finished meanwhile (their commit is older than the stop one).
  if (result.ok()) reap(true, deadline);
  publish(JobState::kStopped);
  return Action::kStop;
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
  if (costs_.count() > 0) hints_.cost = costs_.P95Cost();
  double needed = 0;
  checkpoint_fits(0, &needed);
  hints_.grace.needed_s = needed;
  hints_.grace.granted_s = grace_.grace_s;
  hints_.lost_work_s = state == JobState::kStopped && stats_.stop_committed ? 0 : SecondsSince(last_commit_time_);
  Status st = WriteHintsAtomic(options_.hints_path, hints_);
  if (!st.ok()) PREEMPT_LOG_WARN("hints: %s", st.ToString().c_str());
}

}  // namespace preempt
