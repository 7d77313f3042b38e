#include <algorithm>
#include <string>
#include <unordered_set>

#include "job_index.h"
#include "pass_steps.h"
#include "reasons.h"

namespace preempt::sched {

Awaiting EvictCheckpointedVictims(PassState* pass) {
  PassState& p = *pass;
  const std::vector<Job>& jobs = p.jobs;
  Awaiting out;
  std::unordered_set<int> not_withdrawable;  // preemptors with a victim evicting or evicted now
  // Job index by id, only for jobs someone is waiting on (victims name their preemptor); with a
  // JobIndex, its lookup and its list of jobs holding GPUs.
  std::unordered_map<std::string, int> index_of;
  std::vector<int> leaving;
  if (p.index) {
    for (int i : p.index->placed())
      if (jobs[i].phase == JobPhase::kCheckpointing || jobs[i].phase == JobPhase::kEvicting) leaving.push_back(i);
  } else {
    for (int i = 0; i < static_cast<int>(jobs.size()); ++i)
      if (jobs[i].phase == JobPhase::kCheckpointing || jobs[i].phase == JobPhase::kEvicting) leaving.push_back(i);
    for (int i = 0; !leaving.empty() && i < static_cast<int>(jobs.size()); ++i)
      if (jobs[i].phase == JobPhase::kPending) index_of.emplace(jobs[i].id, i);
  }
  // Jobs being moved (leaving their node for a high job, to restart on move_to): victims evicted
  // on their destination are still awaited, though their preemptor is not pending yet.
  std::unordered_set<std::string> moving;
  for (int i : leaving)
    if (jobs[i].move_to >= 0) moving.insert(jobs[i].id);
  auto pending_index = [&](const std::string& id) {
    if (p.index) {
      const int k = p.index->find(id);
      return k >= 0 && jobs[k].phase == JobPhase::kPending ? k : -1;
    }
    auto pre = index_of.find(id);
    return pre != index_of.end() ? pre->second : -1;
  };
  for (int i : leaving) {
    const Job& v = jobs[i];
    const int for_index = pending_index(v.preemptor);
    if (for_index >= 0) {  // (only pending jobs are indexed)
      out.node[for_index] = v.node;
      double left = 0;  // expected time until this victim's commit is durable
      if (v.phase == JobPhase::kCheckpointing && v.hints)
        left = std::max(0.0, v.request_time + v.hints->checkpoint_s() - p.now);
      double& w = out.left[for_index];
      w = std::max(w, left);
      // Still checkpointing after this pass (not committed, not past its deadline, not a move):
      // the eviction can be withdrawn if the preemptor finds GPUs elsewhere.
      const bool stays = p.hint && v.phase == JobPhase::kCheckpointing && v.move_to < 0 &&
                         !(v.hints && v.hints->request_ack >= v.request_id) &&
                         p.now < v.request_time + p.cfg.checkpoint_deadline_s;
      if (stays) out.withdrawable[for_index].push_back(i);
      else not_withdrawable.insert(for_index);
    }
    // FCFS never preempts: a job asked to checkpoint under another policy keeps running.
    if (v.phase != JobPhase::kCheckpointing || p.cfg.kind == PolicyKind::kFcfs) continue;
    // Its preemptor is no longer pending (started elsewhere, e.g. by a cluster scheduler that
    // starts jobs itself, or left): evicting it, even after its commit, would free GPUs nobody was
    // promised. Withdrawn; a later pass may choose it again, cheaply right after that commit. (A
    // victim without a preemptor frees headroom, a moved job restarts on the GPUs held for it, and
    // a victim making room for a job still on its way off another node is awaited by it: all
    // leave as planned.)
    if (for_index < 0 && !v.preemptor.empty() && v.move_to < 0 && !moving.count(v.preemptor)) {
      p.withdraw(i, v.preemptor, -1,
                 Fmt("not evicted after all: %s no longer waits (started elsewhere or left); keeps running",
                     v.preemptor.c_str()));
      continue;
    }
    const bool acked = v.hints && v.hints->request_ack >= v.request_id;
    const double deadline = v.request_time + p.cfg.checkpoint_deadline_s;
    if (!acked && p.before(deadline)) continue;
    VictimCost vc;
    vc.mode = acked ? EvictionMode::kAfterCommit : EvictionMode::kAfterDeadline;
    vc.lost_gpu_s = v.gpus * (EstimatedLostWork(v, p.now, p.cfg) + RestoreOf(v, p.cfg));
    // The commit is durable: kill at once rather than wait for a second save on SIGTERM.
    if (acked && p.hint && p.cfg.kill_after_commit) vc.grace_s = 0;
    std::string reason = acked ? CommittedReason(v, vc.grace_s == 0) : DeadlineReason(v, p.cfg.checkpoint_deadline_s);
    p.out.actions.push_back(VictimAction(p, i, v.node, v.preemptor, for_index, vc, std::move(reason)));
  }
  for (int f : not_withdrawable) out.withdrawable.erase(f);
  return out;
}

}  // namespace preempt::sched
