// preempt/sched/executor.h — carrying out Decide()'s actions: one lifecycle, many executors.
//
// Decide() only reads a ClusterState and returns JobActions. Everything that changes the cluster
// happens in two places:
//  * the lifecycle (ApplyDecision, RequeueAfterExit): how a Job in the ClusterState moves between
//    phases when an action is carried out and when a victim's process is gone. It is pure (it
//    touches only the ClusterState it is given) and shared by every executor, so the simulator,
//    the single-machine launcher and a cluster backend keep the same bookkeeping (request ids,
//    the promised preemptor, moves, the per-queue budget history).
//  * an Executor: what an action means on the real thing (a process, a cluster, a model). It
//    implements three calls and nothing else.
//
// One pass of an executor loop:
//   refresh ClusterState (arrivals, hints of placed jobs, RequeueAfterExit for victims gone)
//   Decisions d = Decide(state, options);
//   ExecuteDecisions(d, state.now, &executor, &state, &next_request_id);
//
// What the executor must report back on later passes (through the ClusterState it owns):
//  * a checkpointing job's hints with request_ack >= Job::request_id once its commit is durable
//    (Decide() then evicts it);
//  * the exit of an evicted job: call RequeueAfterExit (it then waits in the queue, or restarts on
//    Job::move_to when it was moved);
//  * a job that finished: remove it from ClusterState::jobs.
//
// Thread-safety: the functions here are reentrant; an Executor is called from one thread (the one
// running the loop) and need not be thread-safe.
#pragma once

#include <cstdint>

#include "preempt/sched/policy.h"
#include "preempt/status.h"

namespace preempt::sched {

// Carries out actions on one cluster. Each call gets the job as it is before the action (phase
// still kPending / kRunning / kCheckpointing) and the action itself (its reason, its
// EvictionMode, grace_s, to_node). A call returns OK when the action took effect; an error leaves
// the job's state unchanged, so the next Decide() pass decides again (for example a start whose
// GPUs are not free yet). Calls should not block for long: they start things, they do not wait
// for them.
class Executor {
 public:
  virtual ~Executor() = default;

  // Launch `job` on node `action.node` (ActionKind::kStart). A job with Job::move_to >= 0 was
  // moved for a high-priority job and restarts on that node.
  virtual Status start(const Job& job, const JobAction& action) = 0;

  // Ask `job` to write a checkpoint tagged `request_id` (ActionKind::kRequestCheckpoint, or
  // kCheckpointAhead for a job that is not a victim), e.g. by
  // WriteCheckpointRequest() on its request file. The job keeps training; its hints acknowledge the
  // request (request_ack) once the commit is durable.
  virtual Status request_checkpoint(const Job& job, int64_t request_id, const JobAction& action) = 0;

  // Stop `job` (ActionKind::kEvict): SIGTERM, then SIGKILL after the grace period. action.grace_s
  // < 0: the job's own termination grace period; 0: kill at once; > 0: at most that long.
  // Called once per eviction; the executor reports the exit later (RequeueAfterExit).
  virtual Status evict(const Job& job, const JobAction& action) = 0;
};

// The lifecycle transition for one action already carried out at `now`: kStart places the job
// (kRunning on action.node, start_time = now, hints and move cleared); kRequestCheckpoint makes it
// kCheckpointing with `request_id`, promised to action.for_job; kEvict makes it kEvicting;
// kWithdraw makes a kCheckpointing job kRunning again, promised to nobody (no Executor call: the
// job commits as it was asked and keeps training); kCheckpointAhead leaves the job kRunning and
// records `request_id` and the request's time on it. A victim
// leaving kRunning is recorded in ClusterState::history (the per-queue budget), a move remembers
// its destination in Job::move_to. `request_id` is used by kRequestCheckpoint and kCheckpointAhead only.
void ApplyDecision(const JobAction& action, double now, int64_t request_id, ClusterState* state);

// After an evicted job's process is gone: back to kPending, as a move (Job::RequeueAfterMove, it
// restarts on move_to without a cooldown) when it was moved, else as a preemption
// (Job::RequeueAfterPreemption). The request id is forgotten. Returns true when it was a move.
bool RequeueAfterExit(double now, Job* job);

// Carries out every action of `decisions` in order: the Executor call, then ApplyDecision when the
// call succeeded. Checkpoint requests take ids ++*next_request_id (ids grow for the life of the
// loop; a request whose call failed still uses its id). Returns the first error (the remaining
// actions are still carried out).
Status ExecuteDecisions(const Decisions& decisions, double now, Executor* executor, ClusterState* state,
                        int64_t* next_request_id);

}  // namespace preempt::sched
