// preempt/sched/simulator.h — traces and a discrete-event simulator that runs any PolicyOptions.
//
// Model. Each job arrives at `submit`, needs `gpus` GPUs on one node for `duration_s` seconds of
// training. While it runs it takes a periodic checkpoint every `ckpt_interval_s` of progress; the
// snapshot becomes durable `ckpt_persist_s` later (training continues meanwhile). Preempting it
// without a checkpoint loses the progress since the last durable commit; every restart from a
// commit pays `restore_s` of GPU time first. Checkpoint-then-evict: the in-flight step drains
// (drain), the snapshot is taken, training pauses for the stall and goes on while the snapshot
// persists; the commit is durable after persist, then the job is evicted (losing the stall and the
// progress made while persisting). A request that arrives while a save persists (periodic or
// requested) is answered by that save's commit, as the runtime does. Periodic checkpoints' stalls
// are not modelled (the same for
// every policy). Eviction is the same for every policy, as in Kubernetes: a
// victim gets SIGTERM and its termination grace period (SimOptions: sized from its hints, as
// examples/k8s does, or one fixed value). A preempt-aware job (SimOptions::sigterm_saves) stops
// training after draining, saves (stall + persist) and exits when the save fits its grace; otherwise it is
// SIGKILLed when the grace ends and loses the work since its last commit. A naive job exits at
// once. A policy may also kill a victim at once (JobAction::grace_s = 0). GPUs free
// `eviction_latency_s` after the process is gone. The simulator gives the policy exact, fresh hints
// (grace.granted_s included).
//
// Thread-safety: Simulate() is reentrant (one call per thread per trace is fine).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "preempt/sched/policy.h"
#include "preempt/status.h"

namespace preempt::sched {

struct TraceJob {
  std::string id;
  double submit = 0;
  PriorityClass cls = PriorityClass::kLow;
  std::string queue = "default";
  int gpus = 1;
  double duration_s = 3600;
  double ckpt_interval_s = 600;
  double ckpt_drain_s = 0.2, ckpt_stall_s = 0.5, ckpt_persist_s = 5;
  double restore_s = 30;
};

struct Trace {
  std::string name;
  std::vector<Node> nodes;
  std::vector<TraceJob> jobs;  // any order; the simulator orders arrivals by (submit, index)
};

// Synthetic workload from documented distributions (docs/sched.md), reproducible from `seed`.
struct SyntheticOptions {
  uint64_t seed = 1;
  int jobs = 2000;
  int nodes = 16;
  int gpus_per_node = 8;
  double load = 1.2;                 // offered GPU demand / capacity (sets the arrival rate)
  double frac_high = 0.2, frac_medium = 0.3;  // the rest is low
  double median_duration_s = 3600;   // log-normal duration
  double duration_sigma = 1.0;
  double max_duration_s = 48 * 3600;
};
Trace SyntheticTrace(const SyntheticOptions& opt);

// CSV trace format (header required, '#' lines ignored):
//   id,submit_s,class,queue,gpus,duration_s,ckpt_interval_s,ckpt_drain_s,ckpt_stall_s,ckpt_persist_s,restore_s
// plus node lines in a separate file or the `nodes` argument.
// Every number must be finite and >= 0; gpus a whole number in [1, 65536]; times at most 1e10 s;
// ckpt_interval_s 0 (= 600 s) or at least 1 s. Errors name the file, the line and the field.
Status LoadTraceCsv(const std::string& path, Trace* out);
// The same from text; `origin` names it in errors and becomes the trace's name.
Status ParseTraceCsv(const std::string& text, const std::string& origin, Trace* out);
Status WriteTraceCsv(const std::string& path, const Trace& trace);

// The Alibaba GPU trace (cluster-trace-gpu-v2023 "openb"): pods.csv in `dir` (the repository ships
// it in data/traces/alibaba-gpu-2023). The trace is used as it is (no randomness); the cluster is
// sized from its demand, not from the production node list. Mapping and the checkpoint model are
// documented in docs/sched.md.
struct AlibabaOptions {
  std::string dir;
  // Cluster size: 0 = scale down so that the peak whole-GPU demand is `overload` x capacity
  // (the production cluster is far larger than this trace's demand), in 8-GPU nodes.
  int gpus = 0;
  double overload = 1.5;
  int max_jobs = 0;  // 0 = all
};
Status LoadAlibabaTrace(const AlibabaOptions& opt, Trace* out);

// Offered demand: the GPUs the trace's jobs would hold at once if each ran from its submit time
// for its duration — the peak, overall and per class, and how long and by how much the
// high-priority demand alone exceeds the cluster's GPUs. While it does, high-priority jobs wait for
// each other whatever the policy preempts (node fragmentation only adds to that).
struct OfferedDemand {
  int capacity_gpus = 0;
  int peak_gpus = 0;
  int peak_gpus_by_class[kNumClasses] = {};
  double high_over_capacity_s = 0;   // time with high-priority demand > capacity_gpus
  double high_excess_gpu_s = 0;      // integral of (high-priority demand - capacity_gpus) over that time
};
OfferedDemand MeasureOfferedDemand(const Trace& trace);

// How far a simulation has got (SimOptions::progress).
struct SimProgress {
  int jobs = 0;        // in the trace
  int arrived = 0;     // submitted so far (finished ones included)
  int finished = 0;
  int pending = 0;     // waiting to start or to restart
  double sim_time_s = 0;  // simulated time since the first submission
  double wall_s = 0;      // wall time since the simulation started
  bool done = false;      // the last report
};

struct SimOptions {
  double eviction_latency_s = 1.0;  // process teardown after exit/kill until the GPUs are free
  // A preempted job is back in the queue this long after its GPUs are free (0: at once). SLURM
  // gives a requeued job a begin time of about cred_expire + 1 s later, plus a scheduling pass.
  double restart_delay_s = 0;
  // Workload: true = jobs run the preempt runtime and save inside their grace period on SIGTERM;
  // false = naive jobs that exit at once on SIGTERM, losing their uncommitted work.
  bool sigterm_saves = true;
  // terminationGracePeriodSeconds: > 0 = this value for every job; 0 = sized per job from its
  // hints as examples/k8s does: grace_factor x grace.needed_s + grace_extra_s.
  double grace_period_s = 30;  // the Kubernetes default terminationGracePeriodSeconds
  double grace_factor = 1.5, grace_extra_s = 10;
  double thrash_window_s = 600;     // a preemption within this time of the job's previous one is a thrash cycle
  double starvation_s = 6 * 3600;   // a low job waiting longer than this (first start) is starved
  // Starvation by total delay (SimMetrics::low_starved_delay): a low job whose time not training
  // (finish - submit - duration) exceeds max(starvation_s, starvation_runtime_factor x duration).
  double starvation_runtime_factor = 2;
  // A preemption or move that ends a restarted run within this time of the restart is a
  // re-preemption (SimMetrics::repreemptions): fixed, independent of any policy window.
  double repreempt_window_s = 3600;
  double horizon_s = 0;             // stop here (0 = run until every job has finished)
  bool check_invariants = true;     // verify capacity and work conservation at every event
  // Index the queue (src/sched/job_index.h) so that a pass costs time in the jobs it can act on,
  // not in every pending job: the same results, a simulation time close to linear in the trace.
  // false: every pass reads every job (the reference the index is tested against).
  bool indexed = true;
  // Called from the simulating thread every progress_every_s of wall time and once at the end.
  std::function<void(const SimProgress&)> progress;
  // Called after every Decide() with the state it saw and what it decided (before they are
  // executed): for analyses of a policy's choices (which victims, how they leave).
  std::function<void(const ClusterState&, const Decisions&)> on_decisions;
  double progress_every_s = 5;
};

// What one queue's jobs cost: GPU-hours held per class (from each start until the GPUs are free,
// lost work included) at PolicyOptions::gpu_hour_price.
struct QueueBill {
  std::string queue;
  double gpu_hours[kNumClasses] = {};
  double cost = 0;
};

struct SimMetrics {
  std::string policy;
  int jobs = 0, completed = 0;
  double high_wait_mean_s = 0, high_wait_p95_s = 0;
  // High jobs that need a whole node of the cluster's largest size, and their mean first-start
  // wait (up to the end for one never started): too few to move the p95, yet a policy can make
  // them wait days longer or shorter and pay for it elsewhere.
  int high_whole_node_jobs = 0;
  double high_whole_node_wait_mean_s = 0;
  double medium_wait_mean_s = 0, low_wait_mean_s = 0, low_wait_max_s = 0;
  int low_total = 0, low_completed = 0, low_starved = 0;
  double lost_gpu_hours = 0;        // uncommitted work + restores, GPU-hours
  // lost_gpu_hours = restore + discarded + stopped: restores paid on every restart from a commit;
  // trained progress thrown away (never committed); GPU time from the stop (SIGTERM, or the
  // snapshot of a requested checkpoint) until the GPUs are free: the save and the teardown.
  double lost_restore_gpu_hours = 0, lost_discarded_gpu_hours = 0, lost_stopped_gpu_hours = 0;
  int preemptions = 0, checkpoint_requests = 0, thrash_cycles = 0;
  // Serial victimisation, measured the same way for every policy (moves count as preemptions
  // here: each ends a run and costs a restore). Per job, over every submitted job: mean, p99 and
  // max of preemptions + moves; re-preemptions: preemptions or moves of a run that had started as
  // a restart less than SimOptions::repreempt_window_s before.
  double preemptions_per_job_mean = 0, preemptions_per_job_p99 = 0;
  int preemptions_per_job_max = 0, repreemptions = 0;
  double medium_wait_p95_s = 0;
  // Low jobs whose total delay (time from submit to finish not spent training: queueing, waits
  // after preemptions, restores, redone work; unfinished: up to the end) exceeds
  // max(SimOptions::starvation_s, starvation_runtime_factor x duration).
  int low_starved_delay = 0;
  // Moves (defragmentation for high jobs; not counted as preemptions; their save and restore are
  // in lost_gpu_hours): how many, and the mean time from a moved job's exit to its restart.
  int moves = 0, move_restarts = 0;
  double move_restart_wait_s = 0;   // sum; mean = move_restart_wait_s / move_restarts
  double utilization = 0;           // allocated GPU-s / (GPUs x makespan)
  double makespan_s = 0;
  int decisions = 0;
  double decide_mean_us = 0, decide_max_us = 0;
  int capacity_violations = 0;      // must be 0
  double work_conservation_error_s = 0;  // |allocated - useful - lost| summed; ~0
  // Where high-priority jobs' first-start waits went, in job-seconds per WaitCause (as the policy
  // reported it after each decision; victims-leaving is split into victims-saving: checkpointing
  // on request or inside their SIGTERM grace period, and victims-exiting: process teardown), over all
  // high jobs and over the tail (the jobs whose wait is at or above the p95).
  static constexpr int kCauses = kNumWaitCauses + 1;  // + "victims-exiting" at the end
  double high_wait_cause_s[kCauses] = {};
  double high_tail_wait_cause_s[kCauses] = {};
  int high_tail_jobs = 0;
  std::vector<QueueBill> bill;  // by queue name
};
// Name of SimMetrics cause slot k ("victims-saving" for slot 0, "victims-exiting" for the last).
const char* SimWaitCauseName(int k);

struct SimResult {
  SimMetrics metrics;
  std::vector<std::string> violations;  // invariant failures (first few)
  // Per-job outcome, in trace order.
  std::vector<double> first_start;      // -1 when never started
  std::vector<double> finish;           // -1 when not finished
  std::vector<int> preemptions;
};

// kInvalidArgument (naming the trace and the job or node) for a trace no simulation can mean:
// no nodes, a node or job id twice, GPU counts out of range, times negative, not finite or above
// 1e10 s, a checkpoint interval under 1 s. Simulate() checks it first.
Status ValidateTrace(const Trace& trace);
Status Simulate(const Trace& trace, const PolicyOptions& policy, const SimOptions& opt, SimResult* out);

// Capacity: the fewest nodes of `gpus_per_node` GPUs on which `policy` keeps the high-priority p95
// wait of the trace's jobs within `target_p95_s` (e.g. the grace period), by bisection over the
// node count (it assumes more nodes never lengthen that wait). The search starts from enough
// nodes for the peak offered demand and doubles it (at most 4 times) until the bound holds;
// found = false when even that many do not suffice. kInvalidArgument for a job larger than a node.
struct CapacityReport {
  bool found = false;
  int nodes = 0, gpus = 0;
  double high_p95_s = 0;        // on `nodes`
  int largest_tried_nodes = 0;
  int simulations = 0;
};
Status FindCapacity(const Trace& trace, const PolicyOptions& policy, const SimOptions& opt, double target_p95_s,
                    int gpus_per_node, CapacityReport* out);

// Metrics as CSV header + row (ending in the bill: bill_cost, the total, and bill_by_queue,
// "queue=cost;..."), and a fixed-width table.
std::string MetricsCsvHeader();
std::string MetricsCsvRow(const std::string& trace, const SimMetrics& m);
std::string MetricsTable(const std::string& trace, const std::vector<SimMetrics>& rows);
// The bill per queue of each row, as a table and as a JSON array
// [{"queue":..,"gpu_hours":[low,medium,high],"cost":..}].
std::string BillTable(const std::vector<SimMetrics>& rows);
std::string BillJson(const SimMetrics& m);
// One policy's metrics as a JSON object (every field above, the wait causes as objects).
std::string MetricsJson(const SimMetrics& m);

}  // namespace preempt::sched
