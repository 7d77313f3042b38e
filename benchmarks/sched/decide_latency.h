// decide_latency.h — how long one Decide() pass takes on a large cluster: 10,000 jobs on 1,000
// 8-GPU nodes (bench_sched's latency section; target < 10 ms, docs/design.md).
//
// Thread-safety: none needed (the benchmark is single-threaded).
#pragma once

#include <cstdint>

#include "preempt/sched/policy.h"

namespace preempt::sched::bench {

// A cluster state of `jobs` jobs on `nodes` 8-GPU nodes: nodes full of running low/medium jobs
// with hints, the rest pending with ~10% high priority (each high one needs a preemption).
// fragmented: the first job on every node is a 1-GPU high job, so no node can be cleared of
// lower-priority jobs alone and every pending multi-GPU high job takes the move (defragmentation)
// search.
ClusterState BigState(int nodes, int jobs, uint64_t seed, bool fragmented = false);

struct Latency {
  double median_ms = 0, p99_ms = 0, max_ms = 0;  // wall clock
  double cpu_median_ms = 0, cpu_p99_ms = 0;      // this thread's CPU time (robust on a shared machine)
  int actions = 0, running = 0, pending = 0, pending_high = 0;
};

// Decide() with policy `p` on BigState(1000, 10000, 42, fragmented), `reps` times.
Latency MeasureDecide(const PolicyOptions& p, int reps, bool fragmented = false);

}  // namespace preempt::sched::bench
