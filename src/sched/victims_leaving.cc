#include <algorithm>
#include <string>

#include "pass_steps.h"
#include "reasons.h"

namespace preempt::sched {

Awaiting EvictCheckpointedVictims(PassState* pass) {
  PassState& p = *pass;
  const std::vector<Job>& jobs = p.jobs;
  Awaiting out;
  // Job index by id, only for jobs someone is waiting on (victims name their preemptor).
  std::unordered_map<std::string, int> index_of;
  bool any_leaving = false;
  for (const Job& j : jobs) any_leaving |= j.phase == JobPhase::kCheckpointing || j.phase == JobPhase::kEvicting;
  for (int i = 0; any_leaving && i < static_cast<int>(jobs.size()); ++i)
    if (jobs[i].phase == JobPhase::kPending) index_of.emplace(jobs[i].id, i);
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i) {
    const Job& v = jobs[i];
    if (v.phase != JobPhase::kCheckpointing && v.phase != JobPhase::kEvicting) continue;
    auto pre = index_of.find(v.preemptor);
    const int for_index = pre != index_of.end() ? pre->second : -1;
    if (for_index >= 0) {  // (only pending jobs are indexed)
      out.node[for_index] = v.node;
      double left = 0;  // expected time until this victim's commit is durable
      if (v.phase == JobPhase::kCheckpointing && v.hints)
        left = std::max(0.0, v.request_time + v.hints->checkpoint_s() - p.now);
      double& w = out.left[for_index];
      w = std::max(w, left);
    }
    if (v.phase != JobPhase::kCheckpointing) continue;
    const bool acked = v.hints && v.hints->request_ack >= v.request_id;
    const double deadline = v.request_time + p.cfg.checkpoint_deadline_s;
    if (!acked && p.now < deadline) {
      p.recheck(deadline);
      continue;
    }
    VictimCost vc;
    vc.mode = acked ? EvictionMode::kAfterCommit : EvictionMode::kAfterDeadline;
    vc.lost_gpu_s = v.gpus * (EstimatedLostWork(v, p.now, p.cfg) + RestoreOf(v, p.cfg));
    // The commit is durable: kill at once rather than wait for a second save on SIGTERM.
    if (acked && p.hint && p.cfg.kill_after_commit) vc.grace_s = 0;
    std::string reason = acked ? CommittedReason(v, vc.grace_s == 0) : DeadlineReason(v, p.cfg.checkpoint_deadline_s);
    p.out.actions.push_back(VictimAction(p, i, v.node, v.preemptor, for_index, vc, std::move(reason)));
  }
  return out;
}

}  // namespace preempt::sched
