#include "job_index.h"
#include "pass_steps.h"
#include "reasons.h"

namespace preempt::sched {

void SuspendInWindow(PassState* pass, const VictimCosts& costs) {
  PassState& p = *pass;
  const SuspendWindow& w = p.cfg.suspend;
  if (!w.on || p.cfg.kind == PolicyKind::kFcfs) return;
  const int cls = static_cast<int>(w.cls);
  const double change_at = w.next_change(p.now);
  const bool open = p.suspended[cls];
  for (int node = 0; node < p.n_nodes; ++node) {
    for (int vi : p.running_on[node]) {
      const Job& v = p.jobs[vi];
      if (static_cast<int>(v.cls) != cls || p.chosen[vi]) continue;
      p.recheck(change_at);
      if (!open) continue;
      const VictimCost& vc = costs.ordinary()[vi];
      p.evict(VictimAction(p, vi, node, "", -1, vc,
                           Fmt("%s priority is suspended until t=%.0f (time window): %s, loses %.0f GPU-s incl. restore",
                               PriorityClassName(w.cls), change_at, HowText(vc), vc.lost_gpu_s)));
    }
  }
  // Pending jobs of the class wait for the window to close (Placer; the indexed pass may not visit them).
  if (open && p.index && !p.index->pending(cls).empty()) p.recheck(change_at);
}

}  // namespace preempt::sched
