// libFuzzer target: the scheduler's inputs from outside — a `plan` snapshot, a Kubernetes pod
// list, a hints file, a policy override object and a CSV trace — must be rejected with an error or
// accepted without crashing, hanging or undefined behaviour; what is accepted must then survive
// Decide() under every policy, both decision printers and (small traces) the simulator, with the
// simulator's invariants holding. The first input byte picks the parser — 's' snapshot, 'k' pod
// list, 'h' hints, 'p' policy, 't' trace (the seed files in tests/fuzz/corpus-sched start so), any
// other byte by its value mod 5 — and the rest is the text. Hints must also round-trip through
// HintsToJson unchanged.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "preempt/hints.h"
#include "preempt/sched/plan.h"
#include "preempt/sched/policy.h"
#include "preempt/sched/runner.h"
#include "preempt/sched/simulator.h"

namespace {

using namespace preempt;
using namespace preempt::sched;

[[noreturn]] void Fail(const std::string& what) {
  fprintf(stderr, "fuzz_sched: %s\n", what.c_str());
  abort();
}

void DecideAll(const ClusterState& st) {
  for (const char* name : {"fcfs", "k8s", "hint", "hint-nodefrag", "hint-refill"}) {
    PolicyConfig p;
    PolicyByName(name, &p);
    Decisions d = Decide(st, p);
    for (const Action& a : d.actions) {
      if (a.job_index < 0 || a.job_index >= static_cast<int>(st.jobs.size()))
        Fail(std::string(name) + ": action for job index out of range");
      if (a.node >= static_cast<int>(st.nodes.size()) || a.to_node >= static_cast<int>(st.nodes.size()))
        Fail(std::string(name) + ": action names a node out of range");
    }
    (void)FormatDecisions(st, d);
    (void)DecisionsToJson(st, d);
  }
}

void SameHints(const Hints& a, const Hints& b) {
  auto same = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  if (a.job != b.job || a.state != b.state || a.step != b.step || !same(a.updated_unix, b.updated_unix) ||
      !same(a.step_time_s, b.step_time_s) || a.last_commit.step != b.last_commit.step ||
      !same(a.last_commit.unix, b.last_commit.unix) || a.last_commit.path != b.last_commit.path ||
      a.cost.bytes != b.cost.bytes || !same(a.cost.drain_s, b.cost.drain_s) || !same(a.cost.stall_s, b.cost.stall_s) ||
      !same(a.cost.persist_s, b.cost.persist_s) || !same(a.grace.needed_s, b.grace.needed_s) ||
      !same(a.grace.granted_s, b.grace.granted_s) || !same(a.lost_work_s, b.lost_work_s) || a.gpus != b.gpus ||
      a.request_ack != b.request_ack)
    Fail("hints changed in a HintsToJson round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string> notes;
  int mode = data[0] % 5;
  switch (data[0]) {
    case 's': mode = 0; break;
    case 'k': mode = 1; break;
    case 'h': mode = 2; break;
    case 'p': mode = 3; break;
    case 't': mode = 4; break;
    case 'r': {
      std::vector<RunJobSpec> jobs;
      RunOptions opt;
      if (ParseRunSpec(text, "fuzz.run.json", &jobs, &opt).ok()) {
        for (const auto& j : jobs)
          if (j.gpus < 1 || j.gpus > opt.slots || j.argv.empty()) Fail("run spec accepted a job it cannot run");
      }
      return 0;
    }
    default: break;
  }
  switch (mode) {
    case 0: {  // plan snapshot (no hints files are read)
      ClusterState st;
      if (ParseSnapshot(text, "fuzz.snapshot", "", &st, &notes).ok()) DecideAll(st);
      break;
    }
    case 1: {  // Kubernetes pod list
      ClusterState st;
      if (ParseK8sPodList(text, "fuzz.pods", 8, 1.7e9, /*read_hints_files=*/false, &st, &notes).ok()) DecideAll(st);
      break;
    }
    case 2: {  // hints file
      Hints h;
      if (!HintsFromJson(text, "fuzz.hints", &h).ok()) break;
      Hints back;
      Status s = HintsFromJson(HintsToJson(h), "fuzz.hints (rewritten)", &back);
      if (!s.ok()) Fail("accepted hints do not parse after HintsToJson: " + s.ToString());
      SameHints(h, back);
      (void)h.LostWorkAt(1.7e9);
      ClusterState st;  // one running job with these hints, one pending high job that wants its GPUs
      st.now = 1.7e9;
      st.nodes = {{"n0", 8}};
      Job v;
      v.id = "victim";
      v.phase = JobPhase::kRunning;
      v.node = 0;
      v.gpus = 8;
      v.start_time = st.now - 3600;
      v.hints = h;
      Job p;
      p.id = "high";
      p.cls = PriorityClass::kHigh;
      p.gpus = 8;
      p.submit_time = st.now - 10;
      st.jobs = {v, p};
      DecideAll(st);
      break;
    }
    case 3: {  // policy overrides
      PolicyConfig p;
      if (!PolicyFromJson(text, &p).ok()) break;
      Trace t;
      SyntheticOptions o;
      o.jobs = 40;
      o.nodes = 2;
      t = SyntheticTrace(o);
      SimOptions so;
      SimResult r;
      if (Simulate(t, p, so, &r).ok() && !r.violations.empty()) Fail("simulator invariant: " + r.violations.front());
      break;
    }
    case 4: {  // CSV trace: small ones are simulated on 2 nodes of 8 GPUs for at most a day
      Trace t;
      if (!ParseTraceCsv(text, "fuzz.csv", &t).ok() || t.jobs.size() > 8) break;
      for (const auto& j : t.jobs)
        if (j.ckpt_interval_s < 60) return 0;  // bounded event count per input
      t.nodes = {{"n0", 8}, {"n1", 8}};
      SimOptions so;
      so.horizon_s = 86400;
      for (const char* name : {"k8s", "hint"}) {
        PolicyConfig p;
        PolicyByName(name, &p);
        SimResult r;
        if (Simulate(t, p, so, &r).ok()) {
          for (const auto& v : r.violations)
            if (v.find("needs more GPUs than any node") == std::string::npos)
              Fail(std::string("simulator invariant (") + name + "): " + v);
        }
      }
      break;
    }
  }
  return 0;
}
