// The stop path: every rank stops after the agreed step, drains, writes the stop checkpoint and
// learns whether it committed. Every wait here has a finite deadline, also on a rank that got no
// signal, and the committed/not-committed verdict comes from the disk, so every rank reports the
// same truth.
#include <time.h>

#include "preempt/log.h"
#include "preempt/runtime.h"
#include "runtime/internal.h"

namespace preempt {

using runtime_internal::SecondsSince;
using runtime_internal::SettleDeadline;

namespace {
int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace

void Runtime::stop_without_checkpoint(const Status& why) {
  PREEMPT_LOG_ERROR("%s; stopping without a new checkpoint (checkpoint step %lld stays the one restored)",
                    why.to_string().c_str(), static_cast<long long>(stats_.last_commit_step));
  stopped_ = true;
  if (stop_deadline_.is_never()) stop_deadline_ = Deadline::InSeconds(grace_.grace_s - grace_.reserve_s);
  stats_.stop_problem = why.to_string();
  if (collective_) collective_->abandon();
  publish(JobState::kStopped);
}

Action Runtime::stop_path(int64_t step, const StopDecision& d) {
  const int64_t ckpt_step = step + 1;
  stopped_ = true;
  stats_.stop_step = ckpt_step;
  const int64_t receipt = StopReceiptMonotonicNs();
  if (receipt > 0) stats_.signal_to_decision_s = (MonoNs() - receipt) / 1e9;
  // The agreed deadline (the earliest any rank reported), but never later than this rank's own
  // grace from now: the remaining time another rank sent may be stale by the time it arrives.
  stop_deadline_ = d.deadline.min(Deadline::InSeconds(grace_.grace_s - grace_.reserve_s));
  publish(JobState::kStopping);
  const double needed = grace_needed_s();
  if (needed > stop_deadline_.remaining_seconds()) {
    PREEMPT_LOG_WARN("stop at step %lld: a checkpoint needs ~%.3f s but only %.3f s are left before the deadline; "
                     "trying anyway — if it does not finish, checkpoint step %lld stays the one restored",
                     static_cast<long long>(ckpt_step), needed, stop_deadline_.remaining_seconds(),
                     static_cast<long long>(stats_.last_commit_step));
  } else {
    PREEMPT_LOG_INFO("stop agreed at step %lld (%s from pid %d, %d signal(s)); %.3f s left before the deadline",
                     static_cast<long long>(ckpt_step), StopSignal() > 0 ? SignalName(StopSignal()) : "peer",
                     StopSenderPid(), StopSignalCount(), stop_deadline_.remaining_seconds());
  }
  record_request_ack_ = d.checkpoint && rank() == 0 ? request_to_ack_ : 0;
  std::shared_ptr<SaveHandle> handle;
  Status result = write_stop_checkpoint(ckpt_step, &handle);
  const bool committed = confirm_stop_commit(ckpt_step, handle, &result);
  if (receipt > 0) stats_.signal_to_commit_s = (MonoNs() - receipt) / 1e9;
  // Periodic saves that finished meanwhile (older than the stop checkpoint; the fallback if it
  // did not commit), so the log below names the checkpoint that will really be restored.
  reap(true, SettleDeadline(stop_deadline_, grace_));
  if (committed) {
    stats_.stop_committed = true;
    costs_.add({stop_bytes_, stats_.drain_s, stats_.stall_s, stats_.persist_s});
    note_commit(ckpt_step, handle ? handle->path() : options_.dir + "/" + StepDirName(ckpt_step));
    if (!result.ok()) PREEMPT_LOG_WARN("stop checkpoint step %lld: %s (it committed nevertheless)",
                                       static_cast<long long>(ckpt_step), result.to_string().c_str());
    PREEMPT_LOG_INFO("stop checkpoint step %lld committed: drain %.3f s, stall %.3f s, persist+commit %.3f s; "
                     "%.3f s after the signal, %.3f s before the deadline",
                     static_cast<long long>(ckpt_step), stats_.drain_s, stats_.stall_s, stats_.persist_s,
                     stats_.signal_to_commit_s, stop_deadline_.remaining_seconds());
  } else {
    if (result.ok()) result = Status(StatusCode::kAborted, "another rank could not write its part");
    stats_.stop_problem = result.to_string();
    PREEMPT_LOG_ERROR("stop checkpoint step %lld NOT committed: %s; checkpoint step %lld stays the one restored",
                      static_cast<long long>(ckpt_step), result.to_string().c_str(),
                      static_cast<long long>(stats_.last_commit_step));
  }
  publish(JobState::kStopped);
  return Action::kStop;
}

// Drain, snapshot (straight from the live tensors: training is over) and persist, by the
// deadline. A save that misses it is cancelled (it may still commit: see confirm_stop_commit).
Status Runtime::write_stop_checkpoint(int64_t ckpt_step, std::shared_ptr<SaveHandle>* handle) {
  auto t0 = std::chrono::steady_clock::now();
  Status st = DrainAll(drains_, stop_deadline_);
  stats_.drain_s = SecondsSince(t0);
  if (!st.ok()) return st;
  try {
    const torch::CheckpointResult started = state_->checkpoint_in_place(*store_, ckpt_step, stop_deadline_);
    *handle = started.handle;
    stats_.stall_s = started.snapshot.stall_s;
    stop_bytes_ = started.snapshot.bytes;
  } catch (const Error& e) {
    return e.status().with_context("stop snapshot");
  }
  auto t1 = std::chrono::steady_clock::now();
  st = (*handle)->wait(stop_deadline_);
  stats_.persist_s = SecondsSince(t1);
  if (!st.ok()) {
    (*handle)->cancel();
    return st.with_context("stop checkpoint step " + std::to_string(ckpt_step));
  }
  return Status::OK();
}

// Whether the stop checkpoint committed, the same answer on every rank: the disk decides (COMMIT
// is written only once every rank's part is durable). A cancelled save may have won the race
// with its cancellation, so it is given until the settle deadline to finish before looking; then
// the ranks exchange what they saw, and a rank whose exchange fails looks again itself.
bool Runtime::confirm_stop_commit(int64_t ckpt_step, const std::shared_ptr<SaveHandle>& handle, Status* result) {
  const Deadline settle = SettleDeadline(stop_deadline_, grace_);
  if (handle && !result->ok()) (void)handle->wait(settle);
  int64_t seen = committed_on_disk(ckpt_step) ? 1 : 0;
  Status ex = collective_->allreduce_max(&seen, 1, settle, UntilStop::kNo);
  if (ex.ok()) return seen != 0;
  collective_->abandon();
  if (result->ok()) *result = ex.with_context("confirming the stop checkpoint with the other ranks");
  return committed_on_disk(ckpt_step);
}

bool Runtime::committed_on_disk(int64_t ckpt_step) {
  std::vector<CheckpointInfo> all;
  if (!store_->list(&all).ok()) return false;
  for (const auto& c : all)
    if (c.step == ckpt_step) return c.valid;
  return false;
}

}  // namespace preempt
