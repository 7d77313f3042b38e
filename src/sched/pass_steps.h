// pass_steps.h — the steps of one Decide() pass besides placing pending jobs
// (victim_search.h, moves.h): victims whose checkpoint is done, the headroom refill, and the
// wait estimates of the high-priority jobs left pending.
#pragma once

#include <unordered_map>
#include <vector>

#include "cluster_rules.h"
#include "pass_state.h"
#include "victim_cost.h"

namespace preempt::sched {

// Pending preemptors whose victims are still leaving: the node the victims leave and the expected
// seconds until the slowest of them has committed.
struct Awaiting {
  std::unordered_map<int, int> node;     // preemptor index -> node
  std::unordered_map<int, double> left;  // preemptor index -> seconds left
  // Preemptor index -> its victims that are all still checkpointing (none evicting, none evicted
  // in this pass, none being moved): they can still be withdrawn (ActionKind::kWithdraw).
  std::unordered_map<int, std::vector<int>> withdrawable;
};

// Victims already asked to checkpoint are evicted once their commit is durable, or at the
// checkpoint deadline (a recheck is asked for otherwise). Returns who waits for leaving victims.
Awaiting EvictCheckpointedVictims(PassState* pass);

// With refill_headroom: when high-priority work has used up the reserved headroom, the cheapest
// lower-priority jobs are preempted in the background (nobody waits for them), so the next high
// arrival starts at once instead of waiting for a save.
void RefillHeadroom(PassState* pass, ClusterRules* rules, const VictimCosts& costs);

// PolicyOptions::ahead_checkpoints: while a high job is still pending (or, with
// AheadTrigger::kHeadroomShort, the free GPUs are below the reserved headroom), the running lower
// jobs a high preemptor would have to wait for are asked to checkpoint now (kCheckpointAhead),
// cheapest first, up to ahead_checkpoints saves in flight.
void RequestCheckpointsAhead(PassState* pass, ClusterRules* rules, const VictimCosts& costs);

// PolicyOptions::suspend: while its class's window is open, the class's running jobs are preempted
// (each the way the policy's victim cost says; nobody waits for their GPUs) and a recheck is asked
// for when the window closes; while it is shut, a recheck when it next opens if the class runs.
// (Its pending jobs are held back by the placement.)
void SuspendInWindow(PassState* pass, const VictimCosts& costs);

// A WaitEstimate for every high job left pending (waiting for victims, then blocked), with a
// suggestion when the estimate passes wait_alert_s.
void EstimateWaits(PassState* pass, const ClusterRules& rules);

}  // namespace preempt::sched
