// The high-wait guard (PolicyOptions::high_wait_guard_s): the log of high-priority first starts
// kept by the lifecycle, when it counts as at risk, and what changes for a slow saver then.
#include <gtest/gtest.h>

#include "policy_test_support.h"
#include "preempt/sched/executor.h"
#include "preempt/sched/policy.h"
#include "preempt/sched/policy_options.h"
#include "victim_cost.h"

namespace preempt::sched {
namespace {

using namespace policy_testing;

PolicyOptions Guard() {
  PolicyOptions p = HintAwareNoRulesPolicy();
  p.high_wait_guard_s = 30;
  p.high_wait_guard_fraction = 0.04;
  p.high_wait_guard_hopeless_fraction = 0.1;
  p.high_wait_guard_window_s = 86400;
  p.high_wait_guard_min_jobs = 100;
  return p;
}

// `n` first starts in the last hour, `late` of them after more than 30 s.
void Log(ClusterState* st, int n, int late, double age_s = 60) {
  for (int i = 0; i < n; ++i) st->high_starts.push_back({st->now - age_s, i < late ? 45.0 : 5.0});
}

TEST(HighWaitGuard, AtRiskWhenOneMoreLateStartWouldPassTheFraction) {
  struct Case {
    const char* name;
    int n, late;
    double age_s;
    int pending_late;  // pending high jobs that never started and have waited 40 s
    bool at_risk;
  };
  const Case cases[] = {
      {"3 of 100 late: one more is 4 % (not above)", 100, 3, 60, 0, false},
      {"4 of 100 late: one more is 5 %", 100, 4, 60, 0, true},
      {"3 of 100 late, a pending high job already late", 100, 3, 60, 1, true},
      {"10 of 100 late: at the hopeless fraction, still defended", 100, 10, 60, 0, true},
      {"11 of 100 late: hopeless, the guard stands down", 100, 11, 60, 0, false},
      {"99 counted: too few", 99, 10, 60, 0, false},
      {"older than the window: not counted", 100, 5, 90000, 0, false},
      {"empty log (a state built from scratch, as `plan` has)", 0, 0, 60, 0, false},
  };
  for (const Case& c : cases) {
    B b({8});
    Log(&b.st, c.n, c.late, c.age_s);
    for (int i = 0; i < c.pending_late; ++i) b.pend("h" + std::to_string(i), H, 1, 40);
    EXPECT_EQ(HighWaitAtRisk(b.st, nullptr, Guard()), c.at_risk) << c.name;
  }
  // Pending high jobs count even when not late; lower ones do not.
  {
    B b({8});
    Log(&b.st, 99, 10);
    b.pend("low", L, 1, 1000);
    EXPECT_FALSE(HighWaitAtRisk(b.st, nullptr, Guard()));
    b.pend("fresh", H, 1, 1);
    EXPECT_TRUE(HighWaitAtRisk(b.st, nullptr, Guard()));
  }
  // Off: no target, another policy kind, or no tolerable wait to act on.
  B b({8});
  Log(&b.st, 100, 5);
  EXPECT_TRUE(HighWaitAtRisk(b.st, nullptr, Guard()));
  PolicyOptions off = Guard();
  off.high_wait_guard_s = 0;
  EXPECT_FALSE(HighWaitAtRisk(b.st, nullptr, off));
  off = Guard();
  off.kind = PolicyKind::kKubernetes;
  EXPECT_FALSE(HighWaitAtRisk(b.st, nullptr, off));
  off = Guard();
  off.high_tolerable_wait = TolerableWait::kOff;
  EXPECT_FALSE(HighWaitAtRisk(b.st, nullptr, off));
  // A high job preempted before is not waiting for its first start: not counted.
  B p({8});
  Log(&p.st, 100, 3);
  p.pend("again", H, 1, 40).preemptions = 1;
  EXPECT_FALSE(HighWaitAtRisk(p.st, nullptr, Guard()));
}

// The victim of TEST(Policy, VictimEvictionModeTable)'s "preemptor no larger than the victim" case
// (1 GPU, `lost_s` uncommitted, a ~100 s save against a 10 s grace) on a one-GPU node, a 1-GPU
// high job pending for 1 s, and 100 logged first starts of which `late` were late.
B SlowSaverCluster(int late, double lost_s) {
  B b({1});
  Log(&b.st, 100, late);
  Hints h = MakeHints(lost_s, 100);
  h.grace.granted_s = 10;
  h.grace.needed_s = h.checkpoint_s();
  b.run("v", L, 1, 0, 3600, h);
  b.pend("p", H, 1, 1);
  return b;
}

// That slow saver: no GPU would sit idle while the 1-GPU preemptor waits and 150 s uncommitted is
// worth more than the save loses, so it saves. While the guard is at risk it is killed instead;
// with more uncommitted work than tolerable_kill_max_lost_s it still saves.
TEST(HighWaitGuard, SlowSaverIsKilledOnlyWhileAtRisk) {
  struct Case {
    const char* name;
    int late;
    double lost_s;
    EvictionMode mode;
  } cases[] = {
      {"not at risk: checkpoint first", 3, 150, EvictionMode::kCheckpointFirst},
      {"at risk: killed", 5, 150, EvictionMode::kKillSlow},
      {"hopeless: checkpoint first", 20, 150, EvictionMode::kCheckpointFirst},
      {"at risk, 900 s uncommitted > 600 s limit: checkpoint first", 5, 900, EvictionMode::kCheckpointFirst},
  };
  for (const Case& c : cases) {
    B b = SlowSaverCluster(c.late, c.lost_s);
    PolicyOptions p = Guard();
    p.tolerable_wait_min_gpus = 1;
    p.tolerable_kill_max_lost_s = 600;
    Decisions d = Decide(b.st, p);
    ASSERT_EQ(d.actions.size(), 1u) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].mode, c.mode) << c.name << "\n" << Dump(d);
    // A medium preemptor always waits for the save.
    b.st.jobs[1].cls = M;
    d = Decide(b.st, p);
    ASSERT_EQ(d.actions.size(), 1u) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].mode, EvictionMode::kCheckpointFirst) << c.name << "\n" << Dump(d);
  }
}

// The default limits: tolerable_kill_max_lost_s 450 s (600 s until 2026-12-06), raised to
// high_wait_guard_kill_max_lost_s 600 s while the guard is at risk (since 2026-12-07). At risk
// the slow saver above is killed with up to 600 s uncommitted and saves with more; not at risk it
// saves whatever it has (killing it is not the cheaper choice; see the first case above).
TEST(HighWaitGuard, DefaultKillLimitsAre450sAnd600sWhileAtRisk) {
  EXPECT_DOUBLE_EQ(PolicyOptions().tolerable_kill_max_lost_s, 450);
  EXPECT_DOUBLE_EQ(HintAwareNoRulesPolicy().tolerable_kill_max_lost_s, 450);
  EXPECT_DOUBLE_EQ(PolicyOptions().high_wait_guard_kill_max_lost_s, 600);
  struct Case {
    int late;
    double lost_s;
    EvictionMode mode;
  } cases[] = {{5, 400, EvictionMode::kKillSlow},        {5, 450, EvictionMode::kKillSlow},
               {5, 500, EvictionMode::kKillSlow},        {5, 600, EvictionMode::kKillSlow},
               {5, 650, EvictionMode::kCheckpointFirst}, {3, 400, EvictionMode::kCheckpointFirst},
               {3, 500, EvictionMode::kCheckpointFirst}};
  for (const Case& c : cases) {
    B b = SlowSaverCluster(c.late, c.lost_s);
    PolicyOptions p = Guard();
    p.tolerable_wait_min_gpus = 1;
    Decisions d = Decide(b.st, p);
    ASSERT_EQ(d.actions.size(), 1u) << c.lost_s << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].mode, c.mode) << c.late << " late, " << c.lost_s << " s uncommitted\n" << Dump(d);
  }
}

// The guard's limit only ever raises the tolerable-wait rule's: a smaller one changes nothing, 0
// lifts the limit while at risk, and with no limit outside the guard there is none inside it.
TEST(HighWaitGuard, ItsKillLimitRaisesTheTolerableOne) {
  PolicyOptions p;
  p.tolerable_kill_max_lost_s = 450;
  p.high_wait_guard_kill_max_lost_s = 600;
  EXPECT_DOUBLE_EQ(KillMaxLost(p, false), 450);
  EXPECT_DOUBLE_EQ(KillMaxLost(p, true), 600);
  p.high_wait_guard_kill_max_lost_s = 300;
  EXPECT_DOUBLE_EQ(KillMaxLost(p, true), 450);
  p.high_wait_guard_kill_max_lost_s = 0;
  EXPECT_DOUBLE_EQ(KillMaxLost(p, false), 450);
  EXPECT_DOUBLE_EQ(KillMaxLost(p, true), 0);
  p.tolerable_kill_max_lost_s = 0;
  p.high_wait_guard_kill_max_lost_s = 600;
  EXPECT_DOUBLE_EQ(KillMaxLost(p, true), 0);
  // In a decision: 5 late of 100 (at risk), 5000 s uncommitted, no guard limit: killed.
  B b = SlowSaverCluster(5, 5000);
  PolicyOptions q = Guard();
  q.tolerable_wait_min_gpus = 1;
  q.high_wait_guard_kill_max_lost_s = 0;
  Decisions d = Decide(b.st, q);
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].mode, EvictionMode::kKillSlow) << Dump(d);
}

// ApplyDecision logs the first start of each high job (a restart after a preemption or a move is
// not a first start), and forgets first starts older than kHighStartLogSpanS.
TEST(HighWaitGuard, TheLifecycleLogsFirstStarts) {
  B b({8});
  b.pend("h", H, 1, 12);
  b.pend("m", M, 1, 50);
  b.pend("again", H, 1, 400).preemptions = 1;
  b.st.high_starts.push_back({kNow - kHighStartLogSpanS - 1, 3});  // about to be too old
  b.st.high_starts.push_back({kNow - 10, 4});
  for (int i = 0; i < 3; ++i) {
    JobAction start;
    start.kind = ActionKind::kStart;
    start.job_index = i;
    start.node = 0;
    ApplyDecision(start, kNow, 0, &b.st);
  }
  ASSERT_EQ(b.st.high_starts.size(), 2u);
  EXPECT_DOUBLE_EQ(b.st.high_starts[0].wait_s, 4);
  EXPECT_DOUBLE_EQ(b.st.high_starts[1].time, kNow);
  EXPECT_DOUBLE_EQ(b.st.high_starts[1].wait_s, 12);
}

TEST(HighWaitGuard, ItsDefaultsAreOnAndParsed) {
  PolicyOptions d;
  EXPECT_DOUBLE_EQ(d.high_wait_guard_s, 30);
  EXPECT_EQ(d.high_wait_guard_min_jobs, 100);
  EXPECT_DOUBLE_EQ(HintAwareNoRulesPolicy().high_wait_guard_s, 0);
  PolicyOptions p;
  ASSERT_TRUE(PolicyByName("hint-noguard", &p));
  EXPECT_DOUBLE_EQ(p.high_wait_guard_s, 0);
  ASSERT_TRUE(PolicyFromJson(R"({"high_wait_guard_s":20,"high_wait_guard_fraction":0.02,"high_wait_guard_window_s":3600})",
                             &p)
                  .ok());
  EXPECT_DOUBLE_EQ(p.high_wait_guard_s, 20);
  EXPECT_DOUBLE_EQ(p.high_wait_guard_window_s, 3600);
  ASSERT_TRUE(PolicyFromJson(R"({"high_wait_guard_kill_max_lost_s":0})", &p).ok());
  EXPECT_DOUBLE_EQ(p.high_wait_guard_kill_max_lost_s, 0);
  for (const char* doc : {R"({"high_wait_guard_s":-1})", R"({"high_wait_guard_fraction":1.5})",
                          R"({"high_wait_guard_hopeless_fraction":-0.1})", R"({"high_wait_guard_window_s":0})",
                          R"({"high_wait_guard_window_s":700000})", R"({"high_wait_guard_min_jobs":2.5})",
                          R"({"high_wait_guard_kill_max_lost_s":-1})"}) {
    Status s = PolicyFromJson(doc, &p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << doc;
    EXPECT_NE(s.message().find("high_wait_guard"), std::string::npos) << s.to_string();
  }
}

}  // namespace
}  // namespace preempt::sched
