// cluster_rules.h — the hint-aware policy's cluster-wide rules, each implemented once.
//
//  * the minimum-run-time guard (with the long-waiting high job's override),
//  * the per-queue preemption budget (count and lost GPU-hours per window),
//  * low priority's guaranteed share and the GPUs reserved for high priority (headroom).
// They read and update one PassState; they change as the pass goes on, so they are checked when
// a victim set is used, never cached with it. With a baseline policy (fcfs, k8s) none applies.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pass_state.h"
#include "victim_cost.h"

namespace preempt::sched {

class ClusterRules {
 public:
  explicit ClusterRules(PassState* pass);

  // True while running job v may not be a victim: it started its current run less than
  // min_runtime_s ago. A preemptor past high_min_runtime_override_s may take it all the same (the
  // victim search takes such victims last). `note_release` records when v becomes preemptible
  // (PassState::min_runtime_release).
  bool in_min_runtime(const Job& v, bool note_release);
  // The preemptor has waited past high_min_runtime_override_s.
  bool overrides_min_runtime(const Job& j) const;
  // True when running job v has been preempted or moved protect_after_preemptions times: it is
  // protected like a job inside its minimum run time, for good. `note_release` records when
  // preemptor j may take it all the same (past its override; never for a job below high).
  bool serial_victim(const Job& v, const Job& j, bool note_release);

  // The budget check: the first queue whose window budget these victims would exceed (count or
  // lost GPU-hours, with what the pass has already charged), or nullopt. Asks for a recheck when
  // that queue's oldest preemption leaves the window.
  std::optional<std::string> exceeds_budget(const std::vector<int>& victims, const std::vector<VictimCost>& costs);
  void charge_budget(const Job& v, const VictimCost& vc);

  // A victim set that passes the local search must also keep low's guaranteed share, keep
  // non-high work under its cap (for a non-high preemptor), and fit the budgets. Notes which rule
  // said no (low_share_blocked, budget_blocked, budget_queue).
  bool feasible(const Job& preemptor, const std::vector<int>& victims, const std::vector<VictimCost>& costs,
                int low_taken, int freed_gpus);

  // May non-high job j start on free GPUs now (the reserved headroom, low's share)?
  bool headroom_allows(const Job& j) const;
  // From when may low job j start into the kept-free headroom (-inf: now; inf: never)? At once when
  // preempted before (headroom_low_restarts); headroom_low_wait_s after its submission when no
  // larger than the reserve and leaving all of the reserve but one GPU free (`left_free`: the free
  // GPUs, leaving-unclaimed ones included, once j started).
  double low_exempt_at(const Job& j, int left_free) const;
  // Is a reserved headroom kept free at all (a reserve, and headroom_keep_free or refill_headroom)?
  bool headroom_keep_free_on() const;
  // ... and now: a high job submitted within headroom_high_window_s present? Asks for a recheck
  // when that window closes.
  bool headroom_kept_free() const;
  // Is `node` (where non-high job j fits) one of the whole nodes reserved for high priority
  // (PolicyOptions::reserved_nodes) that j must stay off?
  bool keeps_off_reserved_node(const Job& j, int node);
  // Does the reserve bind j now: no whole node free beyond the reserved ones, j costly to restore,
  // high demand recent?
  bool reserve_binds(const Job& j);

  bool low_share_blocked = false;  // the current search set a victim set aside for low's share
  bool budget_blocked = false;     // a budget refused a victim set in this pass
  std::string budget_queue;        // the last queue whose budget did

 private:
  struct QueueBudget {
    int count = 0;
    double lost_gpu_h = 0;
    double oldest = kInf;  // oldest record in the window
  };
  // The latest submission among the high-priority jobs present (pending or placed); -inf if none.
  double last_high_submit() const;

  PassState& p_;
  bool budget_on_ = false;
  mutable bool last_high_known_ = false;
  mutable double last_high_submit_ = -kInf;
  std::map<std::string, QueueBudget> budget_;
};

}  // namespace preempt::sched
