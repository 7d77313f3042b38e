// preempt-slurm-sched — the scheduler component on a SLURM cluster (include/preempt/sched/slurm.h).
//
//   preempt-slurm-sched plan  [options]   one pass: print the decisions with their reasons; acts on nothing
//   preempt-slurm-sched watch [options]   every --interval seconds: decide and act (checkpoint
//                                         requests, `scontrol requeue`) until --timeout or SIGINT/SIGTERM
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "preempt/hints.h"
#include "preempt/sched/plan.h"
#include "preempt/sched/simulator.h"
#include "preempt/sched/slurm.h"

using namespace preempt;
using namespace preempt::sched;

namespace {

const char kUsage[] =
    "usage: preempt-slurm-sched plan|watch [--hints-dir DIR] [--partitions P1,P2]\n"
    "                                [--classes PART=low|medium|high,...] [--policy NAME] [--policy-json JSON]\n"
    "                                [--interval S (watch, default 2)] [--timeout S (watch, 0 = none)] [--json (plan)]\n"
    "Hints of a job: its comment 'preempt-hints=PATH' (%j = job id), else DIR/<job id>.hints.json.\n"
    "Classes default to the managed partitions' PriorityTier (highest = high, lowest = low).\n";

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool PositiveSeconds(const std::string& flag, const std::string& v, double* out, bool allow_zero) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(d > 0 || (allow_zero && d == 0)) || d > 1e9) {
    fprintf(stderr, "preempt-slurm-sched: --%s: '%s' is not a valid number of seconds\n", flag.c_str(), v.c_str());
    return false;
  }
  *out = d;
  return true;
}

int Fail(const std::string& m) {
  fprintf(stderr, "preempt-slurm-sched: %s\n", m.c_str());
  return 2;
}

void Print(const SlurmEvent& e, double t0) {
  printf("t=%.1f %-8s %-8s %s\n", e.unix - t0, e.kind.c_str(), e.job.c_str(), e.detail.c_str());
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) != "plan" && std::string(argv[1]) != "watch")) {
    fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  std::map<std::string, std::string> kv;
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--json") {
      kv["json"] = "1";
      continue;
    }
    static const char* kFlags[] = {"--hints-dir", "--partitions", "--classes", "--policy", "--policy-json",
                                   "--interval", "--timeout"};
    bool known = false;
    for (const char* f : kFlags) known |= k == f;
    if (!known || i + 1 >= argc) return Fail("unknown flag or missing value: " + k + "\n" + kUsage);
    kv[k.substr(2)] = argv[++i];
  }
  SlurmBackendOptions opt;
  opt.hints_dir = kv["hints-dir"];
  for (const auto& p : Split(kv["partitions"])) opt.partitions.insert(p);
  for (const auto& pc : Split(kv["classes"])) {
    size_t eq = pc.find('=');
    PriorityClass c;
    if (eq == std::string::npos || !ParsePriorityClass(pc.substr(eq + 1), &c))
      return Fail("--classes: '" + pc + "' is not PARTITION=low|medium|high");
    opt.partition_class[pc.substr(0, eq)] = c;
  }
  if (!PolicyByName(kv.count("policy") ? kv["policy"] : "hint", &opt.policy))
    return Fail("unknown policy '" + kv["policy"] + "'");
  if (kv.count("policy-json")) {
    Status s = PolicyFromJson(kv["policy-json"], &opt.policy);
    if (!s.ok()) return Fail("--policy-json: " + s.to_string());
  }
  double interval_s = 2, timeout_s = 0;
  if (kv.count("interval") && !PositiveSeconds("interval", kv["interval"], &interval_s, false)) return 2;
  if (kv.count("timeout") && !PositiveSeconds("timeout", kv["timeout"], &timeout_s, true)) return 2;

  SlurmBackend backend(opt);
  const double t0 = NowUnix();
  if (cmd == "plan") {
    Decisions d;
    ClusterState st;
    std::vector<SlurmEvent> events;
    Status s = backend.tick(false, &d, &st, &events);
    if (!s.ok()) return Fail(s.to_string());
    for (const auto& e : events)
      if (e.kind == "warn") fprintf(stderr, "warning: job %s: %s\n", e.job.c_str(), e.detail.c_str());
    fputs((kv.count("json") ? DecisionsToJson(st, d) + "\n" : FormatDecisions(st, d)).c_str(), stdout);
    return 0;
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  while (!g_stop && (timeout_s == 0 || NowUnix() - t0 < timeout_s)) {
    Decisions d;
    ClusterState st;
    std::vector<SlurmEvent> events;
    Status s = backend.tick(true, &d, &st, &events);
    if (!s.ok()) events.push_back({NowUnix(), "error", "-", s.to_string()});
    for (const auto& e : events) Print(e, t0);
    for (double slept = 0; slept < interval_s && !g_stop; slept += 0.1)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}
