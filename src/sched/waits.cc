#include "pass_steps.h"
#include "reasons.h"

namespace preempt::sched {

void EstimateWaits(PassState* pass, const ClusterRules& rules) {
  PassState& p = *pass;
  const PolicyOptions& cfg = p.cfg;
  for (const auto& [ji, left] : p.waiting_high) {
    WaitEstimate w;
    w.job = p.jobs[ji].id;
    w.job_index = ji;
    w.cause = WaitCause::kVictimsLeaving;
    w.waited_s = p.now - p.jobs[ji].submit_time;
    w.est_wait_s = w.waited_s + left;
    p.out.waits.push_back(std::move(w));
  }
  const bool lower_running = p.placed_by_class[0] + p.placed_by_class[1] > 0;
  for (const auto& [ji, cause] : p.blocked_high) {
    const Job& j = p.jobs[ji];
    WaitEstimate w;
    w.job = j.id;
    w.job_index = ji;
    w.cause = cause;
    if (cause == WaitCause::kMinRuntime && p.hint && cfg.high_min_runtime_override_s > 0)
      p.recheck(j.submit_time + cfg.high_min_runtime_override_s);
    w.waited_s = p.now - j.submit_time;
    if (j.gpus > p.max_node) {
      w.est_wait_s = kInf;
      w.suggestion = Fmt("add capacity: %s needs %d GPUs on one node, the largest node has %d", j.id.c_str(), j.gpus,
                         p.max_node);
    } else if (!cfg.preempts_lower[static_cast<int>(j.cls)] || cfg.kind == PolicyKind::kFcfs || !lower_running) {
      w.est_wait_s = kInf;
      if (!lower_running)
        w.suggestion = Fmt("add capacity: all GPUs are held by high-priority jobs; %d more GPU(s) on one node "
                           "would start %s", j.gpus, j.id.c_str());
      else
        w.suggestion = Fmt("policy does not preempt for %s; add capacity (%d GPU(s)) or enable preemption",
                           j.id.c_str(), j.gpus);
    } else if (rules.budget_blocked) {
      w.est_wait_s = w.waited_s + std::max(0.0, p.out.recheck_at - p.now);
      w.suggestion = Fmt("queue '%s' preemption budget exhausted; raise its budget (accept a higher priority "
                         "cost) or add capacity (%d GPU(s))", rules.budget_queue.c_str(), j.gpus);
    } else if (p.min_runtime_release < kInf) {
      w.est_wait_s = w.waited_s + (p.min_runtime_release - p.now);
      w.suggestion = Fmt("lower-priority jobs are within their minimum run time; a victim frees up in %.0f s",
                         p.min_runtime_release - p.now);
    } else {
      w.est_wait_s = kInf;
      w.suggestion = Fmt("no node can free %d GPU(s) from lower-priority jobs; add capacity", j.gpus);
    }
    if (!(w.est_wait_s > cfg.wait_alert_s)) w.suggestion.clear();
    p.out.waits.push_back(std::move(w));
  }
}

}  // namespace preempt::sched
