// Checkpoints requested ahead of need (PolicyOptions::ahead_checkpoints, pass_steps.h).
//
// A high preemptor that takes a victim whose save does not fit its grace waits for a requested
// checkpoint (a 320 GB job: ~3 minutes). When high-priority demand is in sight, the jobs it would
// wait for are asked to checkpoint now: a later preemption then finds the save in flight (the
// preemptor waits only for its rest) or done (its uncommitted work is small, so it may be killed at
// once). Each request costs the job its stall; the bounds keep that from repeating: saves in flight
// at once, the job's last commit older than one save, one request per job per interval.
#include <algorithm>
#include <utility>
#include <vector>

#include "pass_steps.h"
#include "reasons.h"

namespace preempt::sched {

void RequestCheckpointsAhead(PassState* pass, ClusterRules* rules, const VictimCosts& costs) {
  PassState& p = *pass;
  const PolicyOptions& cfg = p.cfg;
  constexpr int kHigh = static_cast<int>(PriorityClass::kHigh);
  if (!p.hint || cfg.ahead_checkpoints <= 0 || !cfg.preempts_lower[kHigh] || !cfg.checkpoint_then_evict) return;
  const bool high_pending = p.pending_by_class[kHigh] > p.started_by_class[kHigh];
  const bool headroom_short = p.free_sum() + p.leaving_unclaimed < p.reserve;
  if (!high_pending && !(cfg.ahead_when == AheadTrigger::kHeadroomShort && headroom_short)) return;
  const CostView cost_of = costs.for_high(1);  // as a 1-GPU high preemptor would see them
  int in_flight = 0;
  std::vector<std::pair<double, int>> cands;  // (rank cost, job)
  for (int node = 0; node < p.n_nodes; ++node) {
    for (int vi : p.running_on[node]) {
      const Job& v = p.jobs[vi];
      if (SaveInFlight(v, p.now, cfg)) {
        in_flight++;
        continue;
      }
      if (p.chosen[vi] || v.cls == PriorityClass::kHigh) continue;
      if (v.request_id > 0 && p.now < v.request_time + cfg.ahead_interval_s) continue;
      // Inside its minimum run time: a high job past the override takes it only last, so it is
      // not likely next.
      if (rules->in_min_runtime(v, /*note_release=*/false)) continue;
      const VictimCost& vc = cost_of[vi];
      // Only jobs a high preemptor would wait for, whose last commit is older than one save.
      if (vc.mode != EvictionMode::kCheckpointFirst || costs.lost_work_s(vi) < vc.save_s) continue;
      cands.emplace_back(vc.rank_gpu_s, vi);
    }
  }
  const int room = std::min(cfg.ahead_checkpoints - in_flight, static_cast<int>(cands.size()));
  if (room <= 0) return;
  std::partial_sort(cands.begin(), cands.begin() + room, cands.end());
  for (int k = 0; k < room; ++k) {
    const int vi = cands[k].second;
    const Job& v = p.jobs[vi];
    JobAction a;
    a.kind = ActionKind::kCheckpointAhead;
    a.job = v.id;
    a.job_index = vi;
    a.node = v.node;
    a.est_lost_gpu_s = v.gpus * v.hints->cost.stall_s;  // what the request costs: training paused
    a.reason = Fmt("likely victim for high-priority work: checkpoint now, ahead of need (%.0f s save, %.0f s "
                   "uncommitted), so that a preemption finds it saved",
                   cost_of[vi].save_s, costs.lost_work_s(vi));
    p.chosen[vi] = 1;
    p.out.actions.push_back(std::move(a));
  }
}

}  // namespace preempt::sched
