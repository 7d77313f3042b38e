// libFuzzer target: the scheduler's inputs from outside — a `plan` snapshot, a Kubernetes pod
// list, a hints file, a checkpoint request, a policy override object, a CSV trace, a `run` spec —
// must be rejected with an error or accepted without crashing, hanging or undefined behaviour.
// What is accepted must then survive Decide() under every policy with CheckDecisions' rules
// holding, both decision printers and (small traces) the simulator with its invariants; hints and
// requests must round-trip unchanged; a run spec is only parsed (nothing is launched). 'd' builds
// a cluster state straight from the bytes (any phases, holds, requests, hints, history — within
// Decide()'s preconditions: unique ids, valid nodes, no node over-full) for the same checks.
// The first byte picks the input — 's' snapshot, 'k' pod list, 'h' hints, 'q' request, 'p'
// policy, 't' trace, 'r' run spec, 'd' state (the seed files in tests/fuzz/corpus-sched start so);
// any other byte by its value mod 5 — and the rest is the text.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "job_index.h"  // src/sched
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

// Reads fuzz bytes as small numbers; past the end everything is 0.
class Bytes {
 public:
  Bytes(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  unsigned u8() { return i_ < n_ ? p_[i_++] : 0; }
  unsigned below(unsigned n) { return n ? u8() % n : 0; }
  double real(double scale) { return (u8() * 256 + u8()) / 65535.0 * scale; }
  bool more() const { return i_ < n_; }

 private:
  const uint8_t* p_;
  size_t n_, i_ = 0;
};

ClusterState StateFromBytes(Bytes& b) {
  ClusterState st;
  st.now = 1e6;
  const int nodes = 1 + static_cast<int>(b.below(6));
  for (int n = 0; n < nodes; ++n) st.nodes.push_back({"n" + std::to_string(n), 1 + static_cast<int>(b.below(8))});
  std::vector<int> used(nodes, 0);  // placed GPUs + holds of moved jobs
  const int count = static_cast<int>(b.below(24));
  for (int i = 0; i < count && b.more(); ++i) {
    Job j;
    j.id = "j" + std::to_string(i);
    j.cls = static_cast<PriorityClass>(b.below(3));
    j.queue = "q" + std::to_string(b.below(3));
    j.gpus = 1 + static_cast<int>(b.below(8));
    j.submit_time = st.now - b.real(1e5);
    j.phase = static_cast<JobPhase>(b.below(4));
    if (j.phase != JobPhase::kPending) {
      j.node = static_cast<int>(b.below(nodes));
      if (used[j.node] + j.gpus > st.nodes[j.node].gpus) {
        j.phase = JobPhase::kPending;
        j.node = -1;
      } else {
        used[j.node] += j.gpus;
        j.start_time = st.now - b.real(2e4);
      }
    }
    const unsigned flags = b.u8();
    if (flags & 1) j.last_preempted = st.now - b.real(2e3);
    if (flags & 2) j.last_moved = st.now - b.real(2e3);
    if ((flags & 4) && j.phase != JobPhase::kRunning) {  // being moved / moved: holds GPUs on move_to
      int to = static_cast<int>(b.below(nodes));
      if (used[to] + j.gpus <= st.nodes[to].gpus) {
        j.move_to = to;
        used[to] += j.gpus;
      }
    }
    if (flags & 8) j.restore_s = b.real(300);
    if (j.phase == JobPhase::kCheckpointing || j.phase == JobPhase::kEvicting) {
      j.request_id = 1 + b.below(3);
      j.request_time = st.now - b.real(600);
      if (i > 0 && (flags & 16)) j.preemptor = "j" + std::to_string(b.below(i));
    }
    if (flags & 32) {
      Hints h;
      h.job = j.id;
      h.updated_unix = st.now - b.real(600);
      h.state = static_cast<JobState>(b.below(4));
      h.lost_work_s = b.real(4000);
      h.cost.drain_s = b.real(2);
      h.cost.stall_s = b.real(20);
      h.cost.persist_s = b.real(400);
      if (flags & 64) h.cost = Hints::Cost{};  // all-zero costs: not measured yet
      h.grace.granted_s = b.real(120);
      h.grace.needed_s = b.real(200);
      h.request_ack = b.below(4);
      h.gpus = j.gpus;
      j.hints = h;
    }
    st.jobs.push_back(std::move(j));
  }
  for (int k = static_cast<int>(b.below(4)); k > 0; --k)
    st.history.push_back({st.now - b.real(7200), "q" + std::to_string(b.below(3)), b.real(2)});
  // High-priority first starts for the high-wait guard: 0, 60, 120 or 180 of them, oldest first,
  // some late, so that its gate opens on some inputs.
  const int starts = 60 * static_cast<int>(b.below(4));
  double t = st.now - 90000;
  for (int k = 0; k < starts; ++k) {
    t = std::min(st.now, t + b.real(1000));
    st.high_starts.push_back({t, b.real(60)});
  }
  // A pending job may hold a claim on a node its victims left (Job::claimed_node).
  for (Job& j : st.jobs)
    if (j.phase == JobPhase::kPending && (b.u8() & 1)) j.claimed_node = static_cast<int>(b.below(nodes));
  return st;
}

// Rules every policy's decisions keep: actions name existing jobs and nodes, each job at most once;
// starts only pending jobs, never beyond a node's GPUs (placed jobs and holds of moved jobs count);
// victims are placed on the node named, a checkpoint request goes only to a running job, a running
// victim taken for a pending job is of a lower class (or is a move: high for high, to another node); FCFS
// preempts no running job.
void CheckDecisions(const ClusterState& st, const PolicyOptions& p, const Decisions& d, const char* name) {
  const int nn = static_cast<int>(st.nodes.size()), nj = static_cast<int>(st.jobs.size());
  auto fail = [&](const std::string& m) { Fail(std::string(name) + ": " + m + "\n" + FormatDecisions(st, d)); };
  std::vector<int> used(nn, 0);
  for (const Job& j : st.jobs) {
    if (j.phase != JobPhase::kPending && j.node >= 0) used[j.node] += j.gpus;
    if (j.move_to >= 0 && j.phase != JobPhase::kRunning) used[j.move_to] += j.gpus;
  }
  std::vector<char> seen(nj, 0);
  for (const JobAction& a : d.actions) {
    if (a.job_index < 0 || a.job_index >= nj || st.jobs[a.job_index].id != a.job) fail("action names no job");
    if (seen[a.job_index]++) fail("job " + a.job + " in two actions");
    if (a.node < 0 || a.node >= nn || a.to_node >= nn) fail("action names a node out of range");
    const Job& j = st.jobs[a.job_index];
    if (a.kind == ActionKind::kStart) {
      if (j.phase != JobPhase::kPending) fail("start of non-pending job " + j.id);
      if (j.move_to == a.node) used[a.node] -= j.gpus;  // its own hold
      used[a.node] += j.gpus;
      continue;
    }
    // (Every policy finishes checkpoint requests already made: evicts once committed or late.)
    if (p.kind == PolicyKind::kFcfs && j.phase == JobPhase::kRunning) fail("fcfs preempted " + j.id);
    if (j.phase == JobPhase::kPending || j.node != a.node) fail("victim " + j.id + " is not placed on its node");
    if (a.kind == ActionKind::kRequestCheckpoint && j.phase != JobPhase::kRunning)
      fail("checkpoint request to " + j.id + ", which is not running");
    if (a.kind == ActionKind::kCheckpointAhead &&
        (j.phase != JobPhase::kRunning || j.cls == PriorityClass::kHigh || p.kind != PolicyKind::kHintAware))
      fail("checkpoint ahead of need of " + j.id + ", which is not a running lower job under the hint policy");
    if (a.kind == ActionKind::kWithdraw && (j.phase != JobPhase::kCheckpointing || j.move_to >= 0))
      fail("withdrawal of " + j.id + ", which is not checkpointing for a preemptor");
    if (j.phase != JobPhase::kRunning) continue;  // finishing an earlier request: chosen before
    if (a.for_index >= 0) {
      if (a.for_index >= nj) fail("preemptor out of range");
      const Job& f = st.jobs[a.for_index];
      if (a.to_node >= 0) {
        if (j.cls != PriorityClass::kHigh || f.cls != PriorityClass::kHigh || a.to_node == a.node)
          fail("bad move of " + j.id);
      } else if (f.phase == JobPhase::kPending && j.cls >= f.cls) {
        fail("victim " + j.id + " is not of a lower class than " + f.id);
      }
    } else if (j.cls == PriorityClass::kHigh) {
      fail("high job " + j.id + " evicted for nobody");
    }
  }
  for (int n = 0; n < nn; ++n)
    if (used[n] > st.nodes[n].gpus) fail("node " + st.nodes[n].name + " over-full after starts");
}

// The indexed pass (src/sched/job_index.h, the simulator's) must decide exactly the same; under
// FCFS it may leave blocked high-priority jobs out of the waits.
void SameAsIndexed(const ClusterState& st, const PolicyOptions& p, const Decisions& d) {
  JobIndex index;
  for (int i = 0; i < static_cast<int>(st.jobs.size()); ++i) index.add(st.jobs, i);
  const Decisions x = DecideIndexed(st, index, p);
  if (x.actions.size() != d.actions.size()) Fail("indexed pass: another number of actions");
  for (size_t k = 0; k < d.actions.size(); ++k) {
    const JobAction &a = d.actions[k], &b = x.actions[k];
    if (a.kind != b.kind || a.mode != b.mode || a.job != b.job || a.node != b.node || a.for_job != b.for_job ||
        a.to_node != b.to_node || a.grace_s != b.grace_s || a.reason != b.reason)
      Fail("indexed pass: another action");
  }
  if (d.recheck_at != x.recheck_at) Fail("indexed pass: another recheck time");
  if (p.kind == PolicyKind::kFcfs) return;
  if (x.waits.size() != d.waits.size()) Fail("indexed pass: another number of waits");
  for (size_t k = 0; k < d.waits.size(); ++k)
    if (d.waits[k].job != x.waits[k].job || d.waits[k].cause != x.waits[k].cause) Fail("indexed pass: another wait");
}

// Every policy on `st`: the decisions must keep CheckDecisions' rules and print.
void DecideAll(const ClusterState& st) {
  for (const char* name : {"fcfs", "k8s", "hint-norules", "hint", "hint-nodefrag", "hint-refill", "hint-noreserve", "hint-ahead"}) {
    PolicyOptions p;
    if (!PolicyByName(name, &p)) {  // hint with checkpoints asked ahead of need
      p.ahead_checkpoints = 2;
      p.ahead_when = AheadTrigger::kHeadroomShort;
    }
    Decisions d = Decide(st, p);
    CheckDecisions(st, p, d, name);
    SameAsIndexed(st, p, d);
    (void)FormatDecisions(st, d);
    (void)DecisionsToJson(st, d);
  }
}

void SameHints(const Hints& a, const Hints& b) {
  auto same = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  if (a.job != b.job || a.state != b.state || a.step != b.step || !same(a.updated_unix, b.updated_unix) ||
      !same(a.step_time_s, b.step_time_s) || a.last_commit.step != b.last_commit.step ||
      !same(a.last_commit.committed_at, b.last_commit.committed_at) || a.last_commit.path != b.last_commit.path ||
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
    case 'q': {  // checkpoint request file (written by the scheduler, read by the runtime)
      CheckpointRequest r;
      if (!RequestFromJson(text, "fuzz.request", &r).ok()) return 0;
      CheckpointRequest back;
      Status s = RequestFromJson(RequestToJson(r), "fuzz.request (rewritten)", &back);
      if (!s.ok()) Fail("accepted request does not parse after RequestToJson: " + s.to_string());
      if (back.id != r.id || back.action != r.action)
        Fail("request changed in a RequestToJson round trip");
      return 0;
    }
    case 'd': {
      Bytes b(data + 1, size - 1);
      DecideAll(StateFromBytes(b));
      return 0;
    }
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
      if (!s.ok()) Fail("accepted hints do not parse after HintsToJson: " + s.to_string());
      SameHints(h, back);
      (void)h.lost_work_at(1.7e9);
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
      PolicyOptions p;
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
        PolicyOptions p;
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
