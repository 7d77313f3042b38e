// preempt-sched — the scheduler component's command line: simulate, plan, run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "preempt/sched/plan.h"
#include "preempt/sched/policy.h"
#include "preempt/sched/runner.h"
#include "preempt/sched/simulator.h"

using namespace preempt;
// The Alibaba trace shipped in the repository (data/traces/alibaba-gpu-2023).
#ifndef PREEMPT_ALIBABA_TRACE_DIR
#define PREEMPT_ALIBABA_TRACE_DIR "data/traces/alibaba-gpu-2023"
#endif

using namespace preempt::sched;

namespace {

const char kUsage[] =
    "usage:\n"
    "  preempt-sched simulate [--trace synthetic|alibaba|FILE.csv] [--alibaba-dir DIR] [--alibaba-gpus N]\n"
    "                         [--alibaba-overload X] [--seed N] [--jobs N] [--nodes N] [--gpus-per-node G]\n"
    "                         [--load X] [--policies fcfs,k8s,hint-norules,hint] [--policy-json JSON]\n"
    "                         [--grace S (0 = sized from hints; default 30)] [--naive] [--restart-delay S]\n"
    "                         [--csv OUT.csv] [--json OUT.json] [--write-trace OUT.csv (with --policies none:\n"
    "                         write the trace only)] [--capacity-p95 S]\n"
    "                         [--progress S (default 5; 0 = off)]\n"
    "  preempt-sched plan (--snapshot FILE | --k8s PODS.json [--k8s-nodes NODES.json] [--gpus-per-node G])\n"
    "                     [--policy NAME]\n"
    "                     [--policy-json JSON] [--json]\n"
    "  preempt-sched run --spec FILE [--slots N] [--work-dir DIR] [--events FILE] [--timeout S]\n"
    "Policies: fcfs (no preemption), k8s (default kube-scheduler victim order, evict now), k8s+runtime\n"
    "(the same order, grace sized from each victim's hints), hint-norules (hint-aware victims +\n"
    "checkpoint-then-evict, no rules), hint (all rules on), hint-defrag (hint with moves of small high\n"
    "jobs), hint-nodefrag (= hint), hint-ckpt (hint, every victim checkpoints on\n"
    "request), hint-refill (hint + 15 % of the GPUs kept free by background checkpoint-then-evict),\n"
    "hint-noreserve (hint without the whole node kept for high priority), hint-noguard (hint without\n"
    "the high-wait guard).\n"
    "--naive: victims exit at once on SIGTERM (no save); --grace: terminationGracePeriodSeconds;\n"
    "--restart-delay: a preempted job is back in the queue S s after its GPUs are free (SLURM: ~cred_expire + 1).\n"
    "--json OUT.json: every metric per policy and its bill; --capacity-p95 S: fewest nodes keeping the high p95 wait <= S.\n";

struct Args {
  std::string cmd;
  std::map<std::string, std::string> kv;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string get(const std::string& k, const std::string& d = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? d : it->second;
  }
  double num(const std::string& k, double d) const {
    auto it = kv.find(k);
    if (it == kv.end()) return d;
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (!end || *end) {
      fprintf(stderr, "preempt-sched: --%s: '%s' is not a number\n", k.c_str(), it->second.c_str());
      exit(2);
    }
    return v;
  }
  // A number in [lo, hi] (whole when `whole`), or the command exits 2 naming the flag.
  double in_range(const std::string& k, double d, double lo, double hi, bool whole = false) const {
    if (!has(k)) return d;
    const double v = num(k, d);
    if (!(v >= lo && v <= hi) || (whole && v != std::floor(v))) {
      fprintf(stderr, "preempt-sched: --%s: '%s' is not %s in [%.15g, %.15g]\n", k.c_str(), get(k).c_str(),
              whole ? "a whole number" : "a number", lo, hi);
      exit(2);
    }
    return v;
  }
  int count(const std::string& k, int d, int lo, int hi) const { return static_cast<int>(in_range(k, d, lo, hi, true)); }
};

bool ParseArgs(int argc, char** argv, Args* a) {
  if (argc < 2) return false;
  a->cmd = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) {
      fprintf(stderr, "preempt-sched: unexpected argument '%s'\n", s.c_str());
      return false;
    }
    s = s.substr(2);
    if (s == "help" || s == "naive" || (s == "json" && a->cmd != "simulate")) {  // simulate --json takes a file
      a->kv[s] = "1";
    } else if (i + 1 < argc) {
      a->kv[s] = argv[++i];
    } else {
      fprintf(stderr, "preempt-sched: --%s needs a value\n", s.c_str());
      return false;
    }
  }
  return true;
}

int Fail(const Status& s) {
  fprintf(stderr, "preempt-sched: %s\n", s.to_string().c_str());
  return 1;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool MakePolicy(const std::string& name, const Args& a, PolicyOptions* p) {
  if (!PolicyByName(name, p)) {
    fprintf(stderr, "preempt-sched: unknown policy '%s'\n", name.c_str());
    return false;
  }
  if (!a.has("policy-json")) return true;
  // Checked for every policy; applied to the hint-aware ones (the baselines stay as they are).
  PolicyOptions with = *p;
  Status s = PolicyFromJson(a.get("policy-json"), &with);
  if (!s.ok()) {
    Fail(s);
    return false;
  }
  if (p->kind == PolicyKind::kHintAware) *p = with;
  return true;
}

// simulate --json: every metric of each policy's run (MetricsJson) with its bill per queue.
Status WriteRunsJson(const std::string& path, const std::string& trace, const std::vector<SimMetrics>& rows) {
  std::ofstream o(path);
  std::string name;  // the trace's name is a path for CSV traces
  for (char ch : trace) {
    if (ch == '"' || ch == '\\') name += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) name += ch;
  }
  o << "{\"trace\":\"" << name << "\",\"runs\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const SimMetrics& m = rows[i];
    std::string one = MetricsJson(m);  // an object: its closing brace makes room for the bill
    one.insert(one.size() - 1, ",\"bill\":" + BillJson(m));
    o << (i ? "," : "") << one;
  }
  o << "]}\n";
  if (!o) return Status(StatusCode::kIoError, "write " + path);
  return Status::OK();
}

// Capacity report: the fewest nodes (of the trace's node size) keeping the high p95 wait <= target_s.
int PrintCapacity(const Trace& trace, const std::string& name, const PolicyOptions& p, const SimOptions& so,
                  double target_s) {
  if (!(target_s >= 0)) return Fail(Status(StatusCode::kInvalidArgument, "--capacity-p95: must be >= 0"));
  CapacityReport c;
  Status s = FindCapacity(trace, p, so, target_s, trace.nodes.empty() ? 8 : trace.nodes[0].gpus, &c);
  if (!s.ok()) return Fail(s);
  if (c.found)
    printf("capacity %s: %d nodes (%d GPUs) keep the high-priority p95 wait within %.0f s (p95 %.0f s; %d runs)\n",
           name.c_str(), c.nodes, c.gpus, target_s, c.high_p95_s, c.simulations);
  else
    printf("capacity %s: even %d nodes do not keep the high-priority p95 wait within %.0f s (%d runs)\n",
           name.c_str(), c.largest_tried_nodes, target_s, c.simulations);
  return 0;
}

int Simulate(const Args& a) {
  const double capacity_p95 = a.in_range("capacity-p95", 30, 0, 1e9);
  Trace trace;
  std::string which = a.get("trace", "synthetic");
  if (which == "synthetic") {
    SyntheticOptions o;
    o.seed = static_cast<uint64_t>(a.in_range("seed", 1, 0, 9007199254740992.0, true));
    o.jobs = a.count("jobs", o.jobs, 1, 10000000);
    o.nodes = a.count("nodes", o.nodes, 1, 100000);
    o.gpus_per_node = a.count("gpus-per-node", o.gpus_per_node, 1, 65536);
    o.load = a.in_range("load", o.load, 0.01, 100);
    trace = SyntheticTrace(o);
  } else if (which == "alibaba") {
    AlibabaOptions o;
    o.dir = a.get("alibaba-dir", PREEMPT_ALIBABA_TRACE_DIR);
    o.gpus = a.count("alibaba-gpus", 0, 0, 10000000);
    o.overload = a.num("alibaba-overload", o.overload);
    if (!(o.overload >= 1 && o.overload <= 100)) {
      fprintf(stderr, "preempt-sched: --alibaba-overload: %g is not in [1, 100]\n", o.overload);
      return 2;
    }
    if (a.has("seed")) {
      fprintf(stderr, "preempt-sched: --seed applies to --trace synthetic only (the Alibaba trace is fixed)\n");
      return 2;
    }
    o.max_jobs = a.count("jobs", 0, 0, 10000000);
    Status s = LoadAlibabaTrace(o, &trace);
    if (!s.ok()) return Fail(s);
  } else {
    Status s = LoadTraceCsv(which, &trace);
    if (!s.ok()) return Fail(s);
    int nodes = a.count("nodes", 16, 1, 100000), g = a.count("gpus-per-node", 8, 1, 65536);
    for (int i = 0; i < nodes; ++i) trace.nodes.push_back({"node-" + std::to_string(i), g});
  }
  if (a.has("write-trace")) {
    Status s = WriteTraceCsv(a.get("write-trace"), trace);
    if (!s.ok()) return Fail(s);
    if (a.get("policies") == "none") return 0;  // only the trace (e.g. --jobs 100000 for a large one)
  }
  int gpus = 0;
  for (auto& n : trace.nodes) gpus += n.gpus;
  printf("trace %s: %zu jobs, %zu nodes, %d GPUs\n", trace.name.c_str(), trace.jobs.size(), trace.nodes.size(), gpus);
  const OfferedDemand d = MeasureOfferedDemand(trace);
  printf("offered demand: peak %d GPUs (high %d); high-priority demand alone above the cluster for %.1f h (%.1f GPU-h)\n",
         d.peak_gpus, d.peak_gpus_by_class[static_cast<int>(PriorityClass::kHigh)], d.high_over_capacity_s / 3600,
         d.high_excess_gpu_s / 3600);
  fflush(stdout);  // before the progress lines on stderr
  SimOptions so;
  so.grace_period_s = a.num("grace", so.grace_period_s);
  so.sigterm_saves = !a.has("naive");
  if (!(so.grace_period_s >= 0 && so.grace_period_s <= 1e9))
    return Fail(Status(StatusCode::kInvalidArgument, "--grace: seconds in [0, 1e9] (0 = sized)"));
  so.restart_delay_s = a.num("restart-delay", 0);
  if (!(so.restart_delay_s >= 0 && so.restart_delay_s <= 86400))
    return Fail(Status(StatusCode::kInvalidArgument, "--restart-delay: seconds in [0, 86400]"));
  so.progress_every_s = a.num("progress", 5);
  if (!(so.progress_every_s >= 0 && so.progress_every_s <= 86400))
    return Fail(Status(StatusCode::kInvalidArgument, "--progress: seconds in [0, 86400] (0 = off)"));
  std::vector<SimMetrics> rows;
  std::string csv = MetricsCsvHeader();
  int rc = 0;
  for (const auto& name : Split(a.get("policies", "fcfs,k8s,hint-norules,hint"), ',')) {
    PolicyOptions p;
    if (!MakePolicy(name, a, &p)) return 2;
    if (so.progress_every_s > 0) {
      so.progress = [&name](const SimProgress& g) {
        fprintf(stderr, "%s: %d of %d jobs submitted, %d finished, %d pending; simulated %.1f h in %.1f s%s\n",
                name.c_str(), g.arrived, g.jobs, g.finished, g.pending, g.sim_time_s / 3600, g.wall_s,
                g.done ? " (done)" : "");
      };
    }
    SimResult r;
    Status s = Simulate(trace, p, so, &r);
    if (!s.ok()) return Fail(s);
    r.metrics.policy = name;
    for (const auto& v : r.violations) {
      fprintf(stderr, "preempt-sched: %s: %s\n", name.c_str(), v.c_str());
      rc = 1;
    }
    rows.push_back(r.metrics);
    csv += MetricsCsvRow(trace.name, r.metrics);
    if (a.has("capacity-p95") && (rc = PrintCapacity(trace, name, p, so, capacity_p95)) != 0) return rc;
  }
  printf("%s", MetricsTable(trace.name, rows).c_str());
  printf("bill per queue (GPU-hours held, priced per class by gpu_hour_price):\n%s", BillTable(rows).c_str());
  if (a.has("json")) {
    Status js = WriteRunsJson(a.get("json"), trace.name, rows);
    if (!js.ok()) return Fail(js);
  }
  if (a.has("csv")) {
    std::ofstream o(a.get("csv"));
    o << csv;
    if (!o) return Fail(Status(StatusCode::kIoError, "write " + a.get("csv")));
  }
  return rc;
}

int Plan(const Args& a) {
  if (a.has("k8s-nodes") && !a.has("k8s")) {
    fprintf(stderr, "preempt-sched plan: --k8s-nodes goes with --k8s\n");
    return 2;
  }
  ClusterState st;
  std::vector<std::string> notes;
  Status s;
  if (a.has("snapshot")) {
    s = LoadSnapshot(a.get("snapshot"), &st, &notes);
  } else if (a.has("k8s")) {
    s = LoadK8sPodList(a.get("k8s"), a.get("k8s-nodes"), a.count("gpus-per-node", 8, 1, 65536),
                       a.in_range("now", NowUnix(), 0, 1e11), &st, &notes);
  } else {
    fprintf(stderr, "%s", kUsage);
    return 2;
  }
  if (!s.ok()) return Fail(s);
  PolicyOptions p;
  if (!MakePolicy(a.get("policy", "hint"), a, &p)) return 2;
  Decisions d = Decide(st, p);
  for (const auto& n : notes) fprintf(stderr, "note: %s\n", n.c_str());
  if (a.has("json")) {
    printf("%s", DecisionsToJson(st, d).c_str());
  } else {
    printf("%s", FormatDecisions(st, d).c_str());
  }
  return 0;
}

int Run(const Args& a) {
  if (!a.has("spec")) {
    fprintf(stderr, "%s", kUsage);
    return 2;
  }
  std::vector<RunJobSpec> jobs;
  RunOptions opt;
  Status s = LoadRunSpec(a.get("spec"), &jobs, &opt);
  if (!s.ok()) return Fail(s);
  if (a.has("slots")) opt.slots = a.count("slots", 1, 1, 65536);
  if (a.has("work-dir")) opt.work_dir = a.get("work-dir");
  if (opt.work_dir.empty()) opt.work_dir = "preempt-sched-run";
  if (a.has("timeout")) opt.timeout_s = a.in_range("timeout", opt.timeout_s, 0.001, 1e9);
  opt.event_log = a.get("events");
  std::vector<RunEvent> events;
  s = RunJobs(jobs, opt, &events);
  for (const auto& e : events) printf("%8.3f  %-10s %-16s %s\n", e.t, e.kind.c_str(), e.job.c_str(), e.detail.c_str());
  if (!s.ok()) return Fail(s);
  return 0;
}

// Every flag must belong to the command: a misspelt one is refused, never ignored.
bool KnownFlags(const Args& a) {
  static const std::map<std::string, std::vector<std::string>> flags = {
      {"simulate", {"trace", "alibaba-dir", "alibaba-gpus", "alibaba-overload", "seed", "jobs", "nodes", "gpus-per-node",
                    "load", "policies", "policy-json", "grace", "naive", "restart-delay", "csv", "json", "write-trace",
                    "progress", "capacity-p95"}},
      {"plan", {"snapshot", "k8s", "k8s-nodes", "gpus-per-node", "now", "policy", "policy-json", "json"}},
      {"run", {"spec", "slots", "work-dir", "events", "timeout"}},
  };
  auto cmd = flags.find(a.cmd);
  if (cmd == flags.end()) return true;  // an unknown command is reported by main
  for (const auto& [key, value] : a.kv) {
    if (key == "help") continue;
    if (std::find(cmd->second.begin(), cmd->second.end(), key) == cmd->second.end()) {
      fprintf(stderr, "preempt-sched %s: unknown flag --%s\n", a.cmd.c_str(), key.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  const bool help = argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "help");
  if (help || !ParseArgs(argc, argv, &a) || a.has("help") || !KnownFlags(a)) {
    fprintf(stderr, "%s\nPolicy fields (--policy-json, the run spec's \"policy\"):\n%s", kUsage,
            PolicyFieldsHelp().c_str());
    return 2;
  }
  if (a.cmd == "simulate") return Simulate(a);
  if (a.cmd == "plan") return Plan(a);
  if (a.cmd == "run") return Run(a);
  fprintf(stderr, "preempt-sched: unknown command '%s'\n%s", a.cmd.c_str(), kUsage);
  return 2;
}
