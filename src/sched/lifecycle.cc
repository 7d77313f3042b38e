// The job lifecycle shared by every executor (preempt/sched/executor.h).
#include "preempt/sched/executor.h"

#include <algorithm>

namespace preempt::sched {

namespace {
// A victim evicted for a pending preemptor (not a move, not a headroom refill): the preemptor
// claims the victim's node.
void ClaimNode(const JobAction& a, ClusterState* state) {
  if (a.to_node >= 0 || a.for_index < 0 || a.for_index >= static_cast<int>(state->jobs.size())) return;
  Job& pre = state->jobs[a.for_index];
  if (pre.phase == JobPhase::kPending && pre.id == a.for_job) pre.claimed_node = a.node;
}

// A high job's first start joins ClusterState::high_starts; first starts older than the longest
// guard window are forgotten.
void RecordHighStart(const Job& j, double now, ClusterState* state) {
  if (j.cls != PriorityClass::kHigh || j.preemptions > 0 || j.moves > 0) return;
  std::deque<HighStartRecord>& log = state->high_starts;
  log.push_back({now, std::max(0.0, now - j.submit_time)});
  while (!log.empty() && log.front().time < now - kHighStartLogSpanS) log.pop_front();
}
}  // namespace

void ApplyDecision(const JobAction& a, double now, int64_t request_id, ClusterState* state) {
  Job& j = state->jobs[a.job_index];
  switch (a.kind) {
    case ActionKind::kStart:
      RecordHighStart(j, now, state);
      j.phase = JobPhase::kRunning;
      j.node = a.node;
      j.start_time = now;
      j.move_to = -1;
      j.claimed_node = -1;
      j.hints.reset();  // the new run publishes its own
      return;
    case ActionKind::kRequestCheckpoint:
      state->history.push_back({now, j.queue, a.est_lost_gpu_s / 3600.0});
      if (a.to_node >= 0) j.move_to = a.to_node;
      j.phase = JobPhase::kCheckpointing;
      j.request_id = request_id;
      j.request_time = now;
      j.preemptor = a.for_job;
      ClaimNode(a, state);
      return;
    case ActionKind::kEvict:
      // A checkpointing victim was counted when its checkpoint was requested.
      if (j.phase == JobPhase::kRunning) state->history.push_back({now, j.queue, a.est_lost_gpu_s / 3600.0});
      if (a.to_node >= 0) j.move_to = a.to_node;
      j.phase = JobPhase::kEvicting;
      j.preemptor = a.for_job;
      ClaimNode(a, state);
      return;
    case ActionKind::kCheckpointAhead:
      // Still running, promised to nobody; the request is remembered (no budget record: nothing
      // is preempted).
      j.request_id = request_id;
      j.request_time = now;
      return;
    case ActionKind::kWithdraw:
      // Running again, promised to nobody; its request id stays (an acknowledgement of it later
      // is harmless: only a kCheckpointing job's acknowledgement is read).
      j.phase = JobPhase::kRunning;
      j.preemptor.clear();
      return;
  }
}

bool RequeueAfterExit(double now, Job* job) {
  const bool moved = job->move_to >= 0;
  if (moved) job->requeue_after_move(now);
  else job->requeue_after_preemption(now);
  job->request_id = 0;
  return moved;
}

Status ExecuteDecisions(const Decisions& decisions, double now, Executor* executor, ClusterState* state,
                        int64_t* next_request_id) {
  Status first;
  for (const JobAction& a : decisions.actions) {
    const Job& j = state->jobs[a.job_index];
    int64_t request_id = 0;
    Status s;
    switch (a.kind) {
      case ActionKind::kStart: s = executor->start(j, a); break;
      case ActionKind::kRequestCheckpoint:
      case ActionKind::kCheckpointAhead:
        request_id = ++*next_request_id;
        s = executor->request_checkpoint(j, request_id, a);
        break;
      case ActionKind::kEvict: s = executor->evict(j, a); break;
      case ActionKind::kWithdraw: break;  // nothing to tell the job: it commits as asked and trains on
    }
    if (s.ok()) ApplyDecision(a, now, request_id, state);
    else if (first.ok()) first = s;
  }
  return first;
}

}  // namespace preempt::sched
