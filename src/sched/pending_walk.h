// pending_walk.h — the pending jobs of one indexed Decide() pass, in scheduling order, without the
// ones that cannot change the pass (job_index.h).
//
// Scheduling order: class (highest first; one class under FCFS), then submit time, then id. A
// group of pending jobs (one class, one GPU count) is passed over while none of its jobs can do
// anything but wait: nothing fits and its class may not preempt (or the pass has no victim
// searches left), or it fits only into the GPUs reserved for high priority, or it can never fit.
// The state a group is judged on does not change while jobs are passed over (they change
// nothing), and a group is judged again at every step, so it rejoins the walk when, say, a
// victim chosen for an earlier job makes room under the reserve. Jobs a rule looks at one by one
// (in a cooldown or preemption delay window, waiting for victims, restarting after a move, low
// jobs preempted before while the headroom is kept free) are always visited. High-priority jobs
// are always visited, except under FCFS (blocked, never listed).
#pragma once

#include <set>
#include <vector>

#include "cluster_rules.h"
#include "job_index.h"
#include "pass_state.h"
#include "pass_steps.h"

namespace preempt::sched {

class PendingWalk {
 public:
  // `searches`: the victim searches the pass has made so far (read at every step).
  PendingWalk(const PassState& pass, const ClusterRules& rules, const Awaiting& awaiting, const JobIndex& index,
              const int* searches);
  // The next job to place, or -1 when none is left.
  int next();

 private:
  struct Pos {
    int cls = 0;
    const PendingKey* key = nullptr;
  };
  bool before(const Pos& a, const Pos& b) const;
  bool inert(int cls, int gpus, double submit);
  const PendingKey* next_in(int cls, const std::set<PendingKey>& group) const;

  const PassState& p_;
  const ClusterRules& rules_;
  const int* searches_;
  const bool fcfs_;
  std::vector<std::pair<int, const std::set<PendingKey>*>> groups_;  // (class, jobs of one GPU count)
  std::vector<Pos> visit_;  // jobs always visited, in scheduling order
  size_t visit_pos_ = 0;
  Pos cur_;                 // the last job returned (key null before the first)
  Job probe_;               // class, GPUs and submission of a group's job, for the headroom rule
};

}  // namespace preempt::sched
