// Runtime::restore(): every rank agrees on the newest checkpoint all of them can read, restores
// it, and falls back to older ones only for problems an older checkpoint can fix (a damaged
// file). Checkpoints that exist but that this job cannot use are an error, never a fresh start.
#include <sys/stat.h>

#include "preempt/log.h"
#include "preempt/runtime.h"
#include "runtime/internal.h"

namespace preempt {
namespace {

// The newest step in `valid` (newest first) older than `step`; -1 when none.
int64_t OlderThan(const std::vector<int64_t>& valid, int64_t step) {
  for (int64_t v : valid)
    if (v < step) return v;
  return -1;
}

// Problems an older checkpoint cannot fix: the job itself differs from what was saved.
bool IsJobMismatch(const Status& s) {
  return s.code() == StatusCode::kMismatch || s.code() == StatusCode::kInvalidArgument;
}

// When the checkpoint at `dir` became durable (its COMMIT's modification time), for the hints.
double CommittedAt(const std::string& dir) {
  struct stat st;
  if (::stat((dir + "/COMMIT").c_str(), &st) != 0) return NowUnix();
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
}

}  // namespace

struct Runtime::RestorePlan {
  std::vector<int64_t> valid;  // this rank's readable steps, newest first
  int64_t candidate = -1;      // the newest step every rank can read (-1: none anywhere)
};

int64_t Runtime::restore() {
  ensure_store();
  restored_ = true;
  RestorePlan plan;
  ThrowIfError(agree_on_candidate(&plan));
  int64_t restored = 0;
  if (plan.candidate >= 0) ThrowIfError(restore_agreed(plan, &restored));
  hints_.step = restored;
  start_requests();
  warn_if_grace_short("by earlier runs (restored with the checkpoint)");
  publish(JobState::kTraining);
  return restored;
}

// Lists the checkpoints (logging each one skipped, with why) and agrees with the other ranks.
Status Runtime::agree_on_candidate(RestorePlan* plan) {
  std::vector<CheckpointInfo> all;
  Status ls = store_->list(&all);
  if (!ls.ok() && ls.code() != StatusCode::kNotFound) return ls.with_context("restore: list checkpoints");
  std::string problems;
  StatusCode code = StatusCode::kCorruption;
  for (const auto& c : all) {
    if (c.valid) {
      plan->valid.push_back(c.step);
      continue;
    }
    // The store's check again, for its status code (no data is read for an invalid checkpoint).
    RestoreOptions probe;
    probe.step = c.step;
    probe.fallback = false;
    probe.strict = false;
    probe.allocate_untargeted = false;
    RestoreResult ignored;
    Status why = store_->restore({}, probe, &ignored);
    if (why.ok()) why = Status(StatusCode::kCorruption, c.problem);
    if (why.code() == StatusCode::kMismatch) code = StatusCode::kMismatch;
    PREEMPT_LOG_WARN("restore: skipping checkpoint %s: %s", c.path.c_str(), why.to_string().c_str());
    problems += (problems.empty() ? "" : "; ") + why.message();
  }
  const bool unreadable = !all.empty() && plan->valid.empty();
  // Newest step every rank has: MAX over −newest gives the minimum; MAX over newest tells whether
  // anyone has one at all; MAX over `unreadable` whether any rank has only unusable ones.
  const int64_t newest = plan->valid.empty() ? -1 : plan->valid.front();
  int64_t v[3] = {-newest, newest, unreadable ? 1 : 0};
  PREEMPT_RETURN_IF_ERROR(
      collective_->allreduce_max(v, 3, Deadline::InSeconds(options_.coord.collective_timeout_s), UntilStop::kNo)
          .with_context("restore: agree on a step"));
  const std::string keep = "; nothing was deleted (move the checkpoints away to start from scratch)";
  if (v[2] != 0) {
    if (!unreadable) {
      return Status(StatusCode::kMismatch, "restore: another rank cannot restore any checkpoint in " + options_.dir +
                                               " (see its log)" + keep);
    }
    return Status(code, "restore: " + std::to_string(all.size()) + " checkpoint(s) in " + options_.dir +
                            " but none can be restored by rank " + std::to_string(rank()) + " of " +
                            std::to_string(world_size()) + ": " + problems + keep);
  }
  plan->candidate = -v[0];
  if (v[1] >= 0 && plan->candidate < 0) {
    return Status(StatusCode::kMismatch, "restore: some ranks have committed checkpoints in " + options_.dir +
                                             " and others have none");
  }
  return Status::OK();
}

// Restores plan.candidate on every rank; on a damaged file, every rank falls back to the next
// older step all of them have. A mismatch ends the search on every rank at once.
Status Runtime::restore_agreed(const RestorePlan& plan, int64_t* restored) {
  int64_t candidate = plan.candidate;
  for (;;) {
    RestoreOptions ro;
    ro.step = candidate;
    ro.fallback = false;
    RestoreResult rr;
    Status st;
    try {
      if (!state_->restore(*store_, ro, &rr)) st = Status(StatusCode::kNotFound, StepDirName(candidate) + " not found");
    } catch (const Error& e) {
      st = e.status();
    }
    const bool mismatch = !st.ok() && IsJobMismatch(st);
    if (!st.ok()) {
      PREEMPT_LOG_ERROR("restore of checkpoint step %lld failed: %s", static_cast<long long>(candidate),
                        st.to_string().c_str());
    }
    int64_t f[3] = {st.ok() ? 0 : 1, -OlderThan(plan.valid, candidate), mismatch ? 1 : 0};
    PREEMPT_RETURN_IF_ERROR(
        collective_->allreduce_max(f, 3, Deadline::InSeconds(options_.coord.collective_timeout_s), UntilStop::kNo)
            .with_context("restore: agree on success"));
    if (f[2] != 0) {
      const std::string why = " (the job differs from the one that saved it; an older checkpoint cannot fix that)";
      if (mismatch) return Status(st.code(), "restore: checkpoint step " + std::to_string(candidate) + ": " + st.message() + why);
      return Status(StatusCode::kMismatch, "restore: another rank cannot restore checkpoint step " +
                                               std::to_string(candidate) + why + " (see its log)");
    }
    if (f[0] == 0) {
      adopt_restored(candidate, rr.path);
      *restored = candidate;
      return Status::OK();
    }
    const int64_t older = -f[1];
    if (older < 0) {
      return Status(StatusCode::kCorruption, "restore: no checkpoint in " + options_.dir +
                                                 " could be restored on every rank (last tried step " +
                                                 std::to_string(candidate) + ")");
    }
    PREEMPT_LOG_WARN("restore: falling back from checkpoint step %lld to the older step %lld",
                     static_cast<long long>(candidate), static_cast<long long>(older));
    candidate = older;
  }
}

void Runtime::adopt_restored(int64_t step, const std::string& path) {
  stats_.last_commit_step = step;
  if (rank() == 0) hints_.last_commit = {step, CommittedAt(path), path};
  PREEMPT_LOG_INFO("resumed from checkpoint step %lld (%s)", static_cast<long long>(step), path.c_str());
}

}  // namespace preempt
