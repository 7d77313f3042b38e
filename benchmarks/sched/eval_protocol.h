// eval_protocol.h — the scheduler's evaluation protocol: a declared tuning set and a declared
// evaluation set of traces, the baselines, and the targets counted per trace.
//
// Every policy setting is chosen on the tuning and development sets only; the evaluation set (at
// least 20 traces that no setting was chosen on) is built from the Alibaba GPU trace shipped in the repository
// (variants: a larger multi-GPU share made of copies of the trace's own multi-GPU jobs, a class
// mix with more medium priority, arrival-rate scaling, random subsets, several cluster sizes,
// different seeds) and from the synthetic generator (other seeds, loads, class mixes and cluster
// sizes). Each trace runs once under the same eviction model (SimOptions: grace 30 s, victims run
// the preempt runtime) with three policies: "k8s" (the Kubernetes order at its default 30 s
// grace), "k8s+runtime" (the same order, grace sized from each victim's hints: the strongest
// baseline) and the policy under test. docs/sched.md lists the sets and defines the targets.
//
// Thread-safety: none needed (the benchmark is single-threaded).
#pragma once

#include <string>
#include <vector>

#include "preempt/sched/simulator.h"
#include "preempt/status.h"

namespace preempt::sched::bench {

// One trace of a set: how it was built (a one-line recipe) and the trace.
struct ProtocolTrace {
  std::string recipe;
  Trace trace;
};

// The declared sets. `alibaba_dir` holds pods.csv; without it only the synthetic traces are built
// (and the set is reported as incomplete).
Status TuningSet(const std::string& alibaba_dir, std::vector<ProtocolTrace>* out);
Status EvaluationSet(const std::string& alibaba_dir, std::vector<ProtocolTrace>* out);
// A development set: more traces of the same kinds with seeds used by no other set, to check
// that a change chosen on the tuning set generalises before the evaluation set is run (settings
// may be chosen on it as on the tuning set; the targets are still reported on the evaluation set).
Status DevelopmentSet(const std::string& alibaba_dir, std::vector<ProtocolTrace>* out);
// Development set 2: the first evaluation set, spent (settings were chosen between its runs); the
// evaluation set now has the same recipes with fresh seeds.
Status DevelopmentSet2(const std::string& alibaba_dir, std::vector<ProtocolTrace>* out);
// The sets drawn again from the recipes of development set 2 with fresh seeds, by name:
// "development3" (two draws, 48 traces), "development4" (one draw; the second evaluation set),
// "development5" ... "development21" (three draws each, 72 traces; the third to the nineteenth
// evaluation sets, each spent by its one run) and "evaluation" (EvaluationSet); and from the
// shape recipes (cluster shapes and workloads the others do not have: 4-GPU nodes, 4- and 8-GPU
// nodes together, two priority classes, loads, high shares, cluster sizes, job lengths and Alibaba
// overloads outside their ranges), 40 traces each: "shapes", declared before any policy ran on it
// and, like the evaluation set, never used to choose a setting, and "development-shapes",
// "development-shapes2" ... "development-shapes11", earlier shapes sets spent by their one run.
// kInvalidArgument for another name.
Status DrawnProtocolSet(const std::string& name, const std::string& alibaba_dir, std::vector<ProtocolTrace>* out);

// The targets on one trace: the policy under test against the two baselines.
struct TargetResult {
  double lost_vs_k8s = 0, lost_vs_runtime = 0;  // 1 - policy / baseline
  bool lost_k8s_ok = false;       // >= 50 % below k8s (30 s grace)
  bool lost_runtime_ok = false;   // >= 25 % below k8s+runtime
  bool p95_ok = false;            // high p95 wait <= both baselines' + 1 s
  bool starvation_ok = false;     // low_starved_delay <= k8s's
  bool max_preempted_ok = false;  // preemptions_per_job_max <= k8s's
  bool preemptions_ok = false;    // preemptions + moves <= 1.2 x k8s's
};
TargetResult CheckProtocolTargets(const SimMetrics& policy, const SimMetrics& k8s, const SimMetrics& runtime);

// How many traces of one protocol run met each target (L R P S M N, in TargetResult's order).
struct ProtocolCount {
  int traces = 0;
  int met[6] = {};
  void add(const ProtocolCount& o) {
    traces += o.traces;
    for (int f = 0; f < 6; ++f) met[f] += o.met[f];
  }
};

// Runs `set` (a set's name) with the policy under test `policy` (named `name`):
// prints one line per trace with every metric the targets read, then how many traces meet each
// target. Appends a JSON object to *json and harness "targets" entries to *targets, and (when
// `count` is not null) the counts to *count.
// arrival_jitter_s > 0: the policy under test runs on each trace with every arrival moved later by
// up to that many seconds (seeded per trace); the baselines run on the trace as built. With the
// policy under test "k8s" this measures the targets' noise floor: how often the baseline fails a
// target against itself by chance.
Status RunProtocol(const std::string& set, const std::vector<ProtocolTrace>& traces, const std::string& name,
                   const PolicyOptions& policy, const SimOptions& sim, double arrival_jitter_s, std::string* json,
                   std::vector<std::string>* targets, ProtocolCount* count = nullptr);

// Capacity report: for each trace, the fewest 8-GPU nodes on which each policy (k8s, k8s+runtime
// and the policy under test) keeps the high-priority p95 wait within the 30 s grace
// (FindCapacity). Appends a JSON array to *json.
Status RunCapacity(const std::vector<ProtocolTrace>& traces, const std::string& name, const PolicyOptions& policy,
                   const SimOptions& sim, std::string* json);

// The declared sets' names, in order ("tuning, development, ..."), and whether `which` names what
// RunSets can run: one of them, "both" or "choice".
std::string ProtocolSetNames();
bool IsProtocolSelection(const std::string& which);

// Traces that more than one declared set holds (the same nodes and jobs under two labels): a trace
// settings were chosen on would then also count on a set that reports targets. Builds every set
// RunSets can run, appends "SET LABEL = SET LABEL" per trace met before to *repeats and sets
// *traces to how many it compared.
Status FindRepeatedTraces(const std::string& alibaba_dir, std::vector<std::string>* repeats, int* traces);

// Runs the sets named by `which` (a name ProtocolSetNames() lists, "both": tuning and evaluation,
// or "choice": the tuning set and every development set, the sets defaults are chosen on) with
// the policy under test and SimOptions' defaults (30 s grace, victims run the preempt runtime):
// the protocol per set and per arrival jitter of `jitters_s` (one run per jitter, 0 = as built),
// and the capacity report for the tuning set's Alibaba traces (unless !capacity_report). With
// more than one run it ends with a summary: per set, the traces meeting each target summed over
// the jitters, and the sum over all runs. Writes `,"protocol":[...],"capacity":[...]` to *json
// and appends the harness "targets" entries.
Status RunSets(const std::string& which, const std::string& alibaba_dir, const std::string& name,
               const PolicyOptions& policy, bool capacity_report, const std::vector<double>& jitters_s,
               std::string* json, std::vector<std::string>* targets);

}  // namespace preempt::sched::bench
