// Checkpoints requested ahead of need (PolicyOptions::ahead_checkpoints): while high-priority
// demand is in sight, the running lower jobs a high preemptor would wait for are asked to
// checkpoint now, so that a later preemption finds the save in flight or done.
#include <gtest/gtest.h>

#include "policy_test_support.h"
#include "preempt/sched/executor.h"
#include "preempt/sched/policy.h"
#include "preempt/sched/simulator.h"
#include "victim_cost.h"

namespace preempt::sched {
namespace {

using namespace policy_testing;

// A slow saver: its save (drain 0.1 + stall 0.4 + persist) outlasts the 30 s grace it is granted.
Hints SlowSaver(double lost_s, double persist_s = 170) {
  Hints h = MakeHints(lost_s, persist_s);
  h.grace.granted_s = 30;
  h.grace.needed_s = h.checkpoint_s();
  return h;
}

// "v" (low, 1 GPU) on `node`, checkpointing for the pending high job "h" (1 GPU) that waits for it.
void AddVictimCheckpointingForH(B* b, int node) {
  Job& v = b->run("v", L, 1, node, 3600, MakeHints(400, 100));
  v.phase = JobPhase::kCheckpointing;
  v.request_id = 5;
  v.request_time = kNow - 20;
  v.preemptor = "h";
  b->pend("h", H, 1, 20);
}

// "big" (low, 8 GPUs) alone on n0; on n1 "v" (low, 1 GPU), which is checkpointing for the pending
// high job "h" (or just running when no high job is pending).
TEST(Policy, CheckpointAheadTable) {
  struct Case {
    const char* name;
    bool asked;  // big gets a kCheckpointAhead
    bool high_pending = true;
    double big_lost_s = 900, big_persist_s = 170;
    double asked_ago_s = -1;  // big's last request (acknowledged) this long ago; < 0: never asked
    const char* preset = "";  // a preset instead of Hint() with ahead checkpoints on
    int ahead = 1;
    AheadTrigger when = AheadTrigger::kHighPending;
    double headroom = 0;
    PriorityClass big_cls = L;
  } cases[] = {
      {"a high job waits: the slow saver is asked", true},
      {"no high job pending: not asked", false, false},
      {"no high job pending, headroom short, trigger high-pending: not asked", false, false, 900, 170, -1, "", 1,
       AheadTrigger::kHighPending, 0.5},
      {"no high job pending, headroom short, trigger headroom-short: asked (beside the cheaper v)", true, false, 900,
       170, -1, "", 2, AheadTrigger::kHeadroomShort, 0.5},
      {"asked 10 min ago (interval 30 min): not asked again", false, true, 900, 170, 600},
      {"asked 1 h ago: asked again", true, true, 900, 170, 3600},
      {"its save fits the grace (SIGTERM saves it): not asked", false, true, 900, 2},
      {"its last commit is younger than a save (a kill is cheaper): not asked", false, true, 100},
      {"high jobs are never asked", false, true, 900, 170, -1, "", 1, AheadTrigger::kHighPending, 0, H},
      {"off (0)", false, true, 900, 170, -1, "", 0},
      {"hint defaults: off", false, true, 900, 170, -1, "hint"},
      {"k8s: never", false, true, 900, 170, -1, "k8s"},
      {"k8s+runtime: never", false, true, 900, 170, -1, "k8s+runtime"},
  };
  for (const char* baseline : {"fcfs", "k8s", "k8s+runtime"}) {  // and off in their presets
    PolicyOptions p;
    ASSERT_TRUE(PolicyByName(baseline, &p));
    EXPECT_EQ(p.ahead_checkpoints, 0) << baseline;
  }
  for (const auto& c : cases) {
    B b({8, 1});
    Job& big = b.run("big", c.big_cls, 8, 0, 7200, SlowSaver(c.big_lost_s, c.big_persist_s));
    if (c.asked_ago_s >= 0) {
      big.request_id = 4;
      big.request_time = kNow - c.asked_ago_s;
      big.hints->request_ack = 4;
    }
    if (c.high_pending) AddVictimCheckpointingForH(&b, 1);
    else b.run("v", L, 1, 1, 3600, MakeHints(400, 100));
    PolicyOptions p = Hint();
    if (*c.preset) {
      ASSERT_TRUE(PolicyByName(c.preset, &p)) << c.preset;
    }
    if (std::string(c.preset) != "hint") p.ahead_checkpoints = c.ahead;  // the baselines must ignore it
    p.ahead_when = c.when;
    p.reserved_headroom = c.headroom;
    p.reserved_headroom_without_medium = c.headroom;
    const Decisions d = Decide(b.st, p);
    const JobAction* a = find(d, "big");
    EXPECT_EQ(a != nullptr && a->kind == ActionKind::kCheckpointAhead, c.asked) << c.name << "\n" << Dump(d);
    if (a && c.asked) {
      EXPECT_EQ(a->node, 0) << c.name;
      EXPECT_TRUE(a->for_job.empty()) << c.name;
      EXPECT_NEAR(a->est_lost_gpu_s, 8 * 0.4, 1e-9) << c.name;  // the stall it costs
    }
    EXPECT_EQ(find(d, "h"), nullptr) << c.name << "\n" << Dump(d);  // h still waits for v
  }
}

// At most ahead_checkpoints saves in flight: a job whose ahead save is not yet acknowledged counts,
// and the cheapest of the others is asked first.
TEST(Policy, CheckpointAheadBoundedBySavesInFlight) {
  for (int ahead : {1, 2, 3}) {
    B b({8, 8, 8, 1});
    Job& busy = b.run("busy", L, 8, 0, 7200, SlowSaver(900));
    busy.request_id = 4;
    busy.request_time = kNow - 60;  // in flight: not acknowledged, within the deadline
    b.run("dear", L, 8, 1, 7200, SlowSaver(900)).restore_s = 100;  // a dearer restart
    b.run("cheap", L, 8, 2, 7200, SlowSaver(900));
    AddVictimCheckpointingForH(&b, 3);
    PolicyOptions p = Hint();
    p.ahead_checkpoints = ahead;
    const Decisions d = Decide(b.st, p);
    EXPECT_EQ(find(d, "busy"), nullptr) << ahead << "\n" << Dump(d);
    EXPECT_EQ(find(d, "cheap") != nullptr, ahead >= 2) << ahead << "\n" << Dump(d);
    EXPECT_EQ(find(d, "dear") != nullptr, ahead >= 3) << ahead << "\n" << Dump(d);
  }
}

// Executing the action: a checkpoint request to the executor; the job keeps running, promised to
// nobody, with the request's id and time; no preemption is charged to its queue's budget.
TEST(Policy, CheckpointAheadKeepsTheJobRunning) {
  B b({8, 1});
  b.run("big", L, 8, 0, 7200, SlowSaver(900));
  AddVictimCheckpointingForH(&b, 1);
  PolicyOptions p = Hint();
  p.ahead_checkpoints = 1;
  const Decisions d = Decide(b.st, p);
  struct Requests final : Executor {
    int64_t id = 0;
    Status start(const Job&, const JobAction&) override { return Status::OK(); }
    Status request_checkpoint(const Job&, int64_t request_id, const JobAction&) override {
      id = request_id;
      return Status::OK();
    }
    Status evict(const Job&, const JobAction&) override { return Status::OK(); }
  } exec;
  int64_t next_request = 5;
  ASSERT_TRUE(ExecuteDecisions(d, kNow, &exec, &b.st, &next_request).ok());
  Job& big = b.st.jobs[0];
  EXPECT_EQ(exec.id, 6);
  EXPECT_EQ(big.phase, JobPhase::kRunning);
  EXPECT_EQ(big.request_id, 6);
  EXPECT_EQ(big.request_time, kNow);
  EXPECT_TRUE(big.preemptor.empty());
  EXPECT_TRUE(b.st.history.empty());
  // Its save is in flight now: a high preemptor taking it waits only for the rest of that save.
  b.st.now = kNow + 50;
  big.hints->updated_unix = b.st.now;
  const VictimCost vc = CostOf(big, b.st.now, p, true, 1);
  EXPECT_EQ(vc.mode, EvictionMode::kCheckpointFirst);
  EXPECT_NEAR(vc.wait_s, big.hints->checkpoint_s() - 50, 1e-9);
  // The next pass asks nobody again (one save in flight, ahead_checkpoints 1).
  for (const JobAction& a : Decide(b.st, p).actions) EXPECT_NE(a.kind, ActionKind::kCheckpointAhead) << a.job;
}

// In the simulator: a 1-GPU high job h1 preempts a fast saver; while it waits, the slow saver "big"
// (8 GPUs, a ~176 s save) is asked to checkpoint. A second high job h2 arrives 100 s later and can
// only take big: it waits for the rest of that save (~76 s) instead of a whole save (~176 s), and big
// loses the same (one stall and one persist window).
TEST(Simulator, CheckpointAheadShortensTheWaitForASlowSaver) {
  Trace t;
  t.name = "ahead";
  t.nodes = {{"n0", 8}, {"n1", 1}};
  const TraceJob big = SimJobSpec("big", L, 8, 0, 5000, 16, 160, 90);
  const TraceJob small = SimJobSpec("small", L, 1, 0, 1500, 0.5, 2, 10);
  const TraceJob h1 = SimJobSpec("h1", H, 1, 1000, 3000, 0.5, 2, 10);  // n1 stays busy: h2 can only take big
  const TraceJob h2 = SimJobSpec("h2", H, 1, 1100, 200, 0.5, 2, 10);
  t.jobs = {big, small, h1, h2};
  SimOptions o;
  o.eviction_latency_s = 1;
  PolicyOptions off;
  off.reserved_headroom = 0;
  off.reserved_headroom_without_medium = 0;
  PolicyOptions on = off;
  on.ahead_checkpoints = 1;
  SimResult r_off, r_on;
  ASSERT_TRUE(Simulate(t, off, o, &r_off).ok());
  ASSERT_TRUE(Simulate(t, on, o, &r_on).ok());
  EXPECT_TRUE(r_off.violations.empty()) << r_off.violations[0];
  EXPECT_TRUE(r_on.violations.empty()) << r_on.violations[0];
  EXPECT_EQ(r_off.metrics.preemptions, 2);  // small for h1, big for h2
  EXPECT_EQ(r_on.metrics.preemptions, 2);
  EXPECT_EQ(r_on.metrics.checkpoint_requests, r_off.metrics.checkpoint_requests + 1);  // the one ahead
  const double save = 0.2 + 16 + 160;
  EXPECT_NEAR(r_off.first_start[3], 1100 + save + 1, 1e-6);  // a whole save, then the exit
  EXPECT_NEAR(r_on.first_start[3], 1000 + save + 1, 1e-6);   // the rest of the save asked for at 1000
  EXPECT_NEAR(r_on.metrics.lost_gpu_hours, r_off.metrics.lost_gpu_hours, 1e-6);
}

}  // namespace
}  // namespace preempt::sched
