#include "sim_scale.h"

#include <time.h>

#include <chrono>
#include <cstdio>

#include "preempt/sched/simulator.h"

namespace preempt::sched::bench {
namespace {

double ThreadCpuS() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

std::vector<ScaleRun> MeasureSimulatorScale(int jobs, std::string* json, std::vector<std::string>* targets) {
  constexpr double kTargetS = 60;
  printf("\n== simulator scale: synthetic trace of %d jobs (load 1.2), one simulation per line; target for "
         "100,000 jobs: < %.0f s wall\n",
         jobs, kTargetS);
  std::vector<ScaleRun> runs;
  *json += ",\"simulator_scale\":[";
  // 16 nodes: the benchmark's default cluster; 800 nodes x 8 GPUs: about the Alibaba production
  // cluster (6,212 GPUs), where a pass sees thousands of running jobs.
  const struct {
    int nodes;
    const char* policy;
  } cases[] = {{16, "hint"}, {800, "hint"}, {800, "k8s"}};
  for (const auto& c : cases) {
    SyntheticOptions o;
    o.jobs = jobs;
    o.nodes = c.nodes;
    const Trace trace = SyntheticTrace(o);
    PolicyOptions p;
    PolicyByName(c.policy, &p);
    SimOptions sim;
    SimResult r;
    const double cpu0 = ThreadCpuS();
    const auto t0 = std::chrono::steady_clock::now();
    Status s = Simulate(trace, p, sim, &r);
    ScaleRun run;
    run.policy = c.policy;
    run.jobs = jobs;
    run.nodes = c.nodes;
    run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    run.cpu_s = ThreadCpuS() - cpu0;
    run.decisions = r.metrics.decisions;
    run.lost_gpu_hours = r.metrics.lost_gpu_hours;
    const bool met = s.ok() && run.wall_s < kTargetS;
    printf("  %-5s %4d nodes (%5d GPUs): %s %7.1f s wall, %7.1f s CPU, %7d decisions (%.1f us each), %d of %d "
           "jobs finished, lost %.1f GPU-h%s\n",
           c.policy, c.nodes, c.nodes * o.gpus_per_node, s.ok() ? "" : s.to_string().c_str(), run.wall_s, run.cpu_s,
           run.decisions, run.decisions ? 1e6 * run.cpu_s / run.decisions : 0.0, r.metrics.completed, jobs,
           run.lost_gpu_hours, jobs == 100000 ? (met ? "  target: MET" : "  target: NOT MET") : "");
    char item[256];
    snprintf(item, sizeof item,
             "%s{\"policy\":\"%s\",\"jobs\":%d,\"nodes\":%d,\"wall_s\":%.2f,\"cpu_s\":%.2f,\"decisions\":%d}",
             runs.empty() ? "" : ",", c.policy, jobs, c.nodes, run.wall_s, run.cpu_s, run.decisions);
    *json += item;
    if (jobs == 100000) {
      char t[256];
      snprintf(t, sizeof t,
               "{\"name\":\"simulator, 100,000 jobs, %s, %d nodes, wall s\",\"value\":%.2f,\"target\":\"< %.0f\","
               "\"pass\":%s}",
               c.policy, c.nodes, run.wall_s, kTargetS, met ? "true" : "false");
      targets->push_back(t);
    }
    runs.push_back(run);
  }
  *json += "]";
  return runs;
}

}  // namespace preempt::sched::bench
