// job_index.h — a ClusterState's jobs indexed by phase, class and GPU count, for a caller that keeps
// thousands of pending jobs over many Decide() passes (the simulator).
//
// Decide() on its own sorts every pending job and walks all of them each pass, so a queue that
// grows with the trace makes a simulation quadratic. With this index a pass walks the placed jobs
// and only the pending jobs that can still change something in it: a group of pending jobs of one
// class and GPU count that can neither start nor preempt (nothing fits, or the reserve keeps it out,
// and its class may not preempt or the pass has no searches left) is passed over, except for
// the jobs a rule names one by one (recently submitted or preempted, waiting for victims, moved).
// The decisions are the same as Decide()'s on the same state (tests/sched: the simulator run both
// ways), with one difference of form: under FCFS the pending high-priority jobs passed over are
// not listed in Decisions::waits; every one of them would be blocked with WaitCause::kOther.
//
// The caller updates the index whenever a job's phase, index, class, GPUs, submit time, last
// preemption or preemption count changes (JobIndex::Remove before, JobIndex::Add after). Not
// thread-safe; Decide reads it.
#pragma once

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "preempt/sched/policy.h"

namespace preempt::sched {

struct PendingKey {  // a pending job in (submit_time, id) order
  double submit = 0;
  std::string id;
  int index = -1;  // in ClusterState::jobs
  bool operator<(const PendingKey& o) const {
    if (submit != o.submit) return submit < o.submit;
    return id < o.id;
  }
};

class JobIndex {
 public:
  // Indexes job `i` of `jobs` as it is now.
  void add(const std::vector<Job>& jobs, int i);
  // Forgets job `i` as it was last added.
  void remove(int i);

  // Jobs that hold GPUs: not pending, or pending and restarting on a node after a move. Ascending.
  const std::vector<int>& placed() const { return placed_; }
  // Pending jobs of class c by GPU count, each group in (submit_time, id) order.
  const std::map<int, std::set<PendingKey>>& pending(int cls) const { return pending_[cls]; }
  // Pending jobs by max(submit_time, last_preempted): the recent ones may be in a cooldown or delay.
  const std::set<std::pair<double, int>>& by_since() const { return by_since_; }
  // Pending jobs of class c preempted at least once (a rule may treat their restarts apart).
  const std::set<int>& pending_preempted(int cls) const { return pending_preempted_[cls]; }
  // Index of a job by id (any phase); -1 when not indexed.
  int find(const std::string& id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? -1 : it->second;
  }

 private:
  struct Entry {
    bool indexed = false, pending = false, placed = false, preempted = false;
    int cls = 0, gpus = 0;
    PendingKey key;
    double since = 0;
  };
  std::vector<Entry> entries_;  // by job index
  std::vector<int> placed_;  // sorted; a few hundred at most (the GPUs), so a vector is cheapest
  std::map<int, std::set<PendingKey>> pending_[kNumClasses];
  std::set<std::pair<double, int>> by_since_;
  std::set<int> pending_preempted_[kNumClasses];
  std::unordered_map<std::string, int> by_id_;
};

// Decide(state, config) using `index`, which describes `state` exactly.
Decisions DecideIndexed(const ClusterState& state, const JobIndex& index, const PolicyOptions& config);

}  // namespace preempt::sched
