// victim_cost.h — what preempting one running job would cost, and how it would leave.
//
// CostOf() is the per-victim rule of the hint-aware policy: from the victim's hints (uncommitted
// work, measured save cost, grace granted) it picks an EvictionMode and prices it in GPU-seconds
// lost (restore included) and seconds the preemptor waits. VictimCosts computes it once per pass
// for every running job, in the variants the victim search needs.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "pass_state.h"
#include "preempt/sched/policy.h"

namespace preempt::sched {

struct VictimCost {
  EvictionMode mode = EvictionMode::kSigterm;
  bool checkpoint_first = false;  // mode == kCheckpointFirst: ActionKind::kRequestCheckpoint
  double lost_gpu_s = 0;  // GPU-seconds lost including the restore
  // What the victim search ranks by: lost_gpu_s raised by the victim's preemption history
  // (PolicyOptions::repeat_victim_weight), so that a job just restarted is not the cheapest victim
  // again and again.
  double rank_gpu_s = 0;
  double wait_s = 0;      // how long the preemptor waits for this victim (expected save time)
  double grace_s = -1;    // for the evict action (JobAction::grace_s)
  double save_s = 0;      // expected save time when it saves (unknown_save_s when not measured)
};

// Restore time of a restart from the job's last commit (its own, else the policy's default).
double FullRestoreOf(const Job& job, const PolicyOptions& config);
// Restore time a restart after an eviction now costs: nothing when the job never committed
// (it restarts from scratch).
double RestoreOf(const Job& job, const PolicyOptions& config);
// The longest a high preemptor should wait for victim v's save (0 = no limit): a fixed value, or
// what Kubernetes would make it wait at most, the victim's termination grace period.
double TolerableWait(const Job& v, const PolicyOptions& config);
// The grace period of a SIGTERM eviction of v at `now` (JobAction::grace_s): -1 = its own, or
// sized from its fresh, measured hints with VictimGrace::kHintSized.
double SigtermGrace(const Job& v, double now, const PolicyOptions& config);
// A running job's last checkpoint request (ahead of need, or a withdrawn eviction's) is not yet
// acknowledged and was made less than checkpoint_deadline_s ago: its save is in flight.
bool SaveInFlight(const Job& v, double now, const PolicyOptions& config);
// The most uncommitted work a too-slow saver may have and still be killed for a high preemptor
// (0 = no limit): tolerable_kill_max_lost_s, raised to high_wait_guard_kill_max_lost_s while the
// high-wait guard is at risk (never lowered by it).
double KillMaxLost(const PolicyOptions& config, bool high_wait_at_risk);
// Each earlier preemption or move of v makes preempting it again dearer: every one cost it a
// restore and a wait, and a job the search keeps choosing would keep paying them (the next
// preemption is the likelier the more it was chosen before). 1 + repeat_victim_weight x count.
double RepeatFactor(const Job& v, const PolicyOptions& config);
// How victim v would leave at `now` and what it would cost; `for_high`: the preemptor is high
// priority (the kill-now rules apply). `preemptor_gpus` (> 0): a save too slow for the tolerable
// wait is killed only when that loses less than the save would, counting the preemptor's GPUs
// idle while it waits: v.gpus x lost <= v.gpus x save_lost + max(0, preemptor_gpus - v.gpus) x
// save_wait (a large job whose save cannot fit the grace still saves when its uncommitted work is
// worth more). The victim's own GPUs are not idle while it saves: what they do then is save_lost
// already, so only the preemptor's GPUs beyond the victim's count. With ahead checkpoints on, a save
// in flight (SaveInFlight) answers a checkpoint request: the preemptor waits only for its rest.
// `high_wait_at_risk` (HighWaitAtRisk, for a high preemptor with preemptor_gpus > 0): the too-slow
// saver is killed without that comparison, and up to KillMaxLost's raised limit.
VictimCost CostOf(const Job& v, double now, const PolicyOptions& config, bool for_high, int preemptor_gpus = 0,
                  bool high_wait_at_risk = false);

class JobIndex;
// The high-wait guard (PolicyOptions::high_wait_guard_s): are the high-priority first starts of
// the guard's window (ClusterState::high_starts), with the pending high jobs that never started,
// at risk of missing the wait target? `index` (may be null) lists the pending jobs.
bool HighWaitAtRisk(const ClusterState& state, const JobIndex* index, const PolicyOptions& config);

// One CostOf variant for the running jobs of a pass (CostView, VictimCosts): a cost per running
// job, computed on its first lookup.
struct CostTable {
  const PolicyOptions* config = nullptr;
  bool for_high = false;
  int preemptor_gpus = 0;
  std::vector<VictimCost> cost;  // by running position
  std::vector<uint8_t> done;     // by running position: cost[k] is computed
};

class VictimCosts;
// One CostOf variant looked up by job index (a job that is not running reads as a default
// VictimCost).
class CostView {
 public:
  CostView(const VictimCosts* owner, CostTable* table) : owner_(owner), table_(table) {}
  const VictimCost& operator[](int job) const;

 private:
  const VictimCosts* owner_;
  CostTable* table_;
};

// CostOf for the running jobs of one pass, in the variants the victim search needs. Storage is
// per running job, so a pass with thousands of pending jobs does not pay for them, and each cost
// is computed on its first lookup, so a pass that searches a few nodes (or none) does not pay for
// every running job either. Not thread-safe (lookups fill the tables).
class VictimCosts {
 public:
  // `high_wait_at_risk`: HighWaitAtRisk for this pass (costs for high preemptors follow it).
  VictimCosts(const ClusterState& state, const PolicyOptions& config, const RunningOn& running_on,
              bool high_wait_at_risk = false);

  double lost_work_s(int job) const;  // EstimatedLostWork (0 for a job that is not running)
  // For a preemptor below high priority (and for moved jobs).
  CostView ordinary() const { return {this, &ordinary_}; }
  // For a high preemptor of `gpus` GPUs: preemptors under tolerable_wait_min_gpus wait for slow
  // savers (their costs leave the tolerable-wait kills out).
  CostView for_high(int gpus) const;
  CostView for_preemptor(const Job& j) const {
    return j.cls == PriorityClass::kHigh ? for_high(j.gpus) : ordinary();
  }

 private:
  friend class CostView;
  const VictimCost& lookup(CostTable* table, int job) const;
  void init(CostTable* table, const PolicyOptions* config, bool for_high, int preemptor_gpus) const;

  const ClusterState& st_;
  const PolicyOptions& cfg_;
  PolicyOptions small_;       // for high preemptors under min_gpus_: no tolerable-wait kills
  std::vector<int> slot_;     // by job index: position in the tables, -1 when not running
  std::vector<int> running_;  // by position: the job index (the inverse of slot_)
  mutable std::vector<double> lost_work_s_;
  mutable std::vector<uint8_t> lost_done_;
  mutable CostTable ordinary_, for_high_, for_small_high_;
  // Costs for high preemptors of at least min_gpus_ GPUs, per preemptor size (the kill-or-save
  // comparison counts the preemptor's idle GPUs); a table per size, made on first use.
  mutable std::map<int, CostTable> for_high_by_gpus_;
  bool split_high_ = false;
  int min_gpus_ = 1;
  bool high_wait_at_risk_ = false;
};

inline const VictimCost& CostView::operator[](int job) const { return owner_->lookup(table_, job); }

}  // namespace preempt::sched
