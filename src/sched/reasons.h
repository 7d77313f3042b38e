// reasons.h — the one-line reason of every action Decide() emits, and the one builder of victim
// actions. Reasons are complete sentences for people (`plan`, the launcher's log); programs read
// JobAction::kind and ::mode instead.
#pragma once

#include <string>

#include "pass_state.h"
#include "victim_cost.h"

namespace preempt::sched {

// printf into a std::string of any length.
std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A victim action for job vi on `node`: kind, mode and grace from its VictimCost, for the job
// `for_job` (index for_index, -1 when not pending; "" for a headroom refill). `to_node` >= 0: it
// is moved there, not preempted.
JobAction VictimAction(const PassState& p, int vi, int node, const std::string& for_job, int for_index,
                       const VictimCost& vc, std::string reason, int to_node = -1);

// How a victim leaves, in a few words (used inside longer reasons).
const char* HowText(const VictimCost& vc);

// A checkpointing victim: its requested commit is durable / missed its deadline.
std::string CommittedReason(const Job& v, bool kill_now);
std::string DeadlineReason(const Job& v, double deadline_s);
// Victim vi on `node` chosen for pending job j by the victim search (`count` victims there).
std::string SearchVictimReason(const PassState& p, int vi, const Job& j, int node, int count, const VictimCost& vc);
// Defragmentation: a moved job, a victim on the cleared node, a victim making room for a moved job.
std::string MoveReason(const PassState& p, const Job& j, int node, int to_node, int moves, const VictimCost& vc);
std::string ClearReason(const PassState& p, const Job& j, int node, int moves, const VictimCost& vc);
std::string MakeRoomReason(const PassState& p, const Job& j, const Job& moved, int node, int cleared,
                           const VictimCost& vc);
std::string RefillReason(int free_gpus, int reserve, const VictimCost& vc);

}  // namespace preempt::sched
