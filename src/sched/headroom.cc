#include <algorithm>
#include <utility>
#include <vector>

#include "pass_steps.h"
#include "reasons.h"

namespace preempt::sched {

void RefillHeadroom(PassState* pass, ClusterRules* rules, const VictimCosts& costs) {
  PassState& p = *pass;
  int deficit = p.reserve - p.free_sum() - p.leaving_unclaimed;
  if (!p.hint || !p.cfg.refill_headroom || deficit <= 0 || !rules->headroom_kept_free()) return;
  const std::vector<Job>& jobs = p.jobs;
  const CostView cost_of = costs.ordinary();
  std::vector<std::pair<double, int>> cands;  // (class-major cost per GPU, job)
  for (int node = 0; node < p.n_nodes; ++node) {
    for (int vi : p.running_on[node]) {
      const Job& v = jobs[vi];
      if (p.chosen[vi] || v.cls == PriorityClass::kHigh) continue;
      if (rules->in_min_runtime(v, /*note_release=*/true)) continue;
      cands.emplace_back(static_cast<int>(v.cls) * 1e12 + cost_of[vi].rank_gpu_s / v.gpus, vi);
    }
  }
  std::sort(cands.begin(), cands.end());
  for (const auto& [key, vi] : cands) {
    if (deficit <= 0) break;
    const Job& v = jobs[vi];
    if (v.cls == PriorityClass::kLow && p.placed_by_class[0] - v.gpus < p.low_share) continue;
    const VictimCost& vc = cost_of[vi];
    if (rules->exceeds_budget({vi}, {vc})) continue;
    p.evict(VictimAction(p, vi, v.node, "", -1, vc, RefillReason(p.free_sum(), p.reserve, vc)));
    deficit -= v.gpus;
    rules->charge_budget(v, vc);
  }
}

}  // namespace preempt::sched
