// sim_scale.h — how long the simulator takes on a large trace (bench_sched's scale section): a
// synthetic trace of N jobs on a small cluster and on one the size of the Alibaba production
// cluster, with the policy under test and the Kubernetes order (the same simulator with the
// baseline's cheaper decisions). Target: 100,000 jobs in under 60 s on the 2-core build machine.
//
// Thread-safety: none needed (the benchmark is single-threaded).
#pragma once

#include <string>
#include <vector>

namespace preempt::sched::bench {

struct ScaleRun {
  std::string policy;
  int jobs = 0, nodes = 0;
  double wall_s = 0, cpu_s = 0;
  int decisions = 0;
  double lost_gpu_hours = 0;  // to show the run is the full simulation, not a shortcut
};

// Runs SyntheticTrace(jobs, nodes) under each policy, printing one line per run. Appends a JSON
// array to *json and, when jobs == 100,000, harness "targets" entries (wall < 60 s) to *targets.
std::vector<ScaleRun> MeasureSimulatorScale(int jobs, std::string* json, std::vector<std::string>* targets);

}  // namespace preempt::sched::bench
