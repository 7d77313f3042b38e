// Table-driven tests of Decide(): victims leaving, eviction modes, waits, moves.
#include "preempt/sched/policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "policy_test_support.h"

namespace preempt::sched {
namespace {

using namespace policy_testing;

TEST(Policy, CheckpointingVictimIsEvictedAfterAckOrDeadline) {
  struct Case {
    const char* name;
    int64_t ack;
    double requested_ago;
    bool evict;
  };
  const Case cases[] = {{"acknowledged", 7, 1, true},
                        {"older ack", 6, 1, false},
                        {"deadline passed", 0, 121, true}};
  for (const auto& c : cases) {
    B b({1});
    Job& v = b.run("v", L, 1, 0, 3600, MakeHints(1));
    v.phase = JobPhase::kCheckpointing;
    v.request_id = 7;
    v.request_time = kNow - c.requested_ago;
    v.preemptor = "hi";
    v.hints->request_ack = c.ack;
    b.pend("hi", H, 1);
    PolicyOptions p = Hint();
    p.checkpoint_deadline_s = 120;
    Decisions d = Decide(b.st, p);
    const JobAction* a = find(d, "v");
    EXPECT_EQ(a != nullptr, c.evict) << c.name << Dump(d);
    if (a) {
      EXPECT_EQ(a->kind, ActionKind::kEvict);
      EXPECT_EQ(a->for_job, "hi");
    } else {
      EXPECT_NEAR(d.recheck_at, kNow - c.requested_ago + 120, 1e-6) << c.name;
    }
    EXPECT_FALSE(find(d, "hi")) << "the preemptor waits for its victim\n" << Dump(d);
  }
}

// A victim asked to checkpoint for a preemptor that has since started on other GPUs (or left) is
// withdrawn, not evicted, even after its commit; one without a preemptor (headroom) is evicted.
TEST(Policy, CheckpointingVictimIsKeptWhenItsPreemptorNoLongerWaits) {
  struct Case {
    const char* name;
    const char* preemptor;  // "" = none (background headroom)
    bool preemptor_runs;
    bool moved;
    bool kept;
  } cases[] = {{"preemptor started elsewhere", "hi", true, false, true},
               {"preemptor gone", "hi", false, false, true},
               {"no preemptor: headroom", "", false, false, false},
               {"moved job: restarts on the GPUs held for it", "hi", true, true, false}};
  for (const auto& c : cases) {
    B b({2});
    Job& v = b.run("v", L, 1, 0, 3600, MakeHints(1));
    v.phase = JobPhase::kCheckpointing;
    v.request_id = 7;
    v.request_time = kNow - 5;
    v.preemptor = c.preemptor;
    v.hints->request_ack = 7;  // committed
    if (c.moved) v.move_to = 1;
    if (c.preemptor_runs) b.run("hi", H, 1, 0, 3600, MakeHints(1));
    Decisions d = Decide(b.st, Hint());
    const JobAction* a = find(d, "v");
    ASSERT_NE(a, nullptr) << c.name << Dump(d);
    EXPECT_EQ(a->kind == ActionKind::kWithdraw, c.kept) << c.name << Dump(d);
  }
}

TEST(Policy, PreemptorWaitsForItsVictimsThenStarts) {
  B b({2});
  Job& v = b.run("v", L, 1, 0, 3600, MakeHints(1));
  v.phase = JobPhase::kEvicting;
  v.preemptor = "hi";
  b.run("other", L, 1, 0, 3600, MakeHints(1));
  b.pend("hi", H, 1);
  b.pend("lowpend", L, 1);
  Decisions d = Decide(b.st, Hint());
  EXPECT_TRUE(d.actions.empty()) << "no second victim, no theft of the freed slot\n" << Dump(d);
  b.st.jobs.erase(b.st.jobs.begin());  // the victim left
  d = Decide(b.st, Hint());
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].job, "hi");
}

TEST(Policy, TwoPreemptorsGetDistinctVictims) {
  B b({1, 1, 1});
  b.run("a", L, 1, 0, 3600, MakeHints(10));
  b.run("b", L, 1, 1, 3600, MakeHints(20));
  b.run("c", L, 1, 2, 3600, MakeHints(30));
  b.pend("h1", H, 1, 10);
  b.pend("h2", H, 1, 5);
  Decisions d = Decide(b.st, Hint());
  ASSERT_EQ(d.actions.size(), 2u) << Dump(d);
  EXPECT_EQ(d.actions[0].job, "a");
  EXPECT_EQ(d.actions[0].for_job, "h1");
  EXPECT_EQ(d.actions[1].job, "b");
  EXPECT_EQ(d.actions[1].for_job, "h2");
}

TEST(Policy, MultiGpuPreemptorNeedsOneNode) {
  B b({4, 4});
  b.run("a", L, 2, 0, 3600, MakeHints(10));
  b.run("b", L, 2, 0, 3600, MakeHints(3000));
  b.run("c", L, 2, 1, 3600, MakeHints(1000));
  b.run("d", H, 2, 1, 3600, MakeHints(1));
  b.pend("hi", H, 4);
  Decisions d = Decide(b.st, Hint());
  // Node 1 cannot free 4 (d is high): both a and b on node 0 go.
  ASSERT_EQ(d.actions.size(), 2u) << Dump(d);
  EXPECT_TRUE(find(d, "a") && find(d, "b")) << Dump(d);
}

TEST(Policy, WaitEstimateForPreemptorsIsTheCheckpointTime) {
  B b({1});
  b.run("v", L, 1, 0, 3600, MakeHints(900, /*persist=*/4));
  b.pend("hi", H, 1, 30);
  Decisions d = Decide(b.st, Hint());
  ASSERT_EQ(d.waits.size(), 1u);
  EXPECT_EQ(d.waits[0].job, "hi");
  EXPECT_NEAR(d.waits[0].est_wait_s, 30 + 0.1 + 0.4 + 4, 1e-6);  // waited + drain + stall + persist
  EXPECT_TRUE(d.waits[0].suggestion.empty());
  // Two seconds into the checkpoint: 2.5 s left.
  b.st.jobs[0].phase = JobPhase::kCheckpointing;
  b.st.jobs[0].request_id = 1;
  b.st.jobs[0].request_time = kNow - 2;
  b.st.jobs[0].preemptor = "hi";
  d = Decide(b.st, Hint());
  ASSERT_EQ(d.waits.size(), 1u);
  EXPECT_NEAR(d.waits[0].est_wait_s, 30 + 2.5, 1e-6);
}

TEST(Policy, WaitEstimateSuggestsCapacityWhenOnlyHighRuns) {
  B b({2});
  b.run("h", H, 2, 0, 3600, MakeHints(1));
  b.pend("hi", H, 2, 1000);
  PolicyOptions p;  // all rules on
  Decisions d = Decide(b.st, p);
  EXPECT_TRUE(d.actions.empty());
  ASSERT_EQ(d.waits.size(), 1u);
  EXPECT_TRUE(std::isinf(d.waits[0].est_wait_s));
  EXPECT_NE(d.waits[0].suggestion.find("add capacity"), std::string::npos) << d.waits[0].suggestion;
}

TEST(Policy, EstimatedLostWork) {
  PolicyOptions p;
  Job j;
  EXPECT_EQ(EstimatedLostWork(j, kNow, p), p.unknown_lost_work_s);
  j.hints = MakeHints(10, 2, 5);  // 5 s old, training: 15 s now
  EXPECT_NEAR(EstimatedLostWork(j, kNow, p), 15, 1e-9);
  EXPECT_TRUE(HintsFresh(j, kNow, p));
  j.hints->updated_unix = kNow - p.hints_stale_s - 1;
  EXPECT_FALSE(HintsFresh(j, kNow, p));
  EXPECT_EQ(EstimatedLostWork(j, kNow, p), p.unknown_lost_work_s);
}

// How a victim is preempted for a high-priority job: SIGTERM-save inside its grace, checkpoint
// first, or kill at once (small uncommitted work; a save slower than the tolerable wait).
TEST(Policy, VictimEvictionModeTable) {
  struct Case {
    const char* name;
    double lost_s, granted_s, persist_s;  // victim's uncommitted work, grace granted, persist time
    bool sigterm_save;
    double kill_now_max_lost_s, tolerable_s;
    PriorityClass preemptor;
    ActionKind kind;
    double grace_s;
    EvictionMode mode;
    bool unmeasured = false;  // hints carry no checkpoint cost (all zero: never measured)
    bool kill_when_cheaper = true;
    double kill_max_lost_s = 0;  // tolerable_kill_max_lost_s (0 = no limit)
    int min_gpus = 1;            // tolerable_wait_min_gpus
    // The preemptor's GPUs, on a node of that many; the victim holds 1 of them, so with 4 the
    // preemptor holds 3 free GPUs idle while the victim saves.
    int preemptor_gpus = 4;
  } cases[] = {
      {"save fits grace: SIGTERM", 900, 30, 2, true, 120, -1, H, ActionKind::kEvict, -1, EvictionMode::kSaveInGrace},
      {"sigterm_save off: checkpoint first", 900, 30, 2, false, 120, -1, H, ActionKind::kRequestCheckpoint, -1,
       EvictionMode::kCheckpointFirst},
      {"grant unknown: checkpoint first", 900, 0, 2, true, 120, 0, H, ActionKind::kRequestCheckpoint, -1,
       EvictionMode::kCheckpointFirst},
      {"small uncommitted: kill now", 60, 30, 2, true, 120, -1, H, ActionKind::kEvict, 0, EvictionMode::kKillSmall},
      {"kill-now off", 60, 30, 2, true, 0, -1, H, ActionKind::kEvict, -1, EvictionMode::kSaveInGrace},
      {"kill-now only for high", 60, 30, 2, true, 120, -1, M, ActionKind::kEvict, -1, EvictionMode::kSaveInGrace},
      // A too-slow save is killed only when the uncommitted work (150 s) is worth less than the save
      // (~100 s lost) plus the preemptor's GPUs idle while it waits (3 x ~100.5 s).
      {"save slower than its grace, 150 s uncommitted: kill", 150, 10, 100, true, 120, -1, H, ActionKind::kEvict, 0,
       EvictionMode::kKillSlow},
      {"save slower than its grace, 900 s uncommitted is worth the save and the wait: checkpoint first", 900, 10, 20,
       true, 120, -1, H, ActionKind::kRequestCheckpoint, -1, EvictionMode::kCheckpointFirst},
      {"fixed tolerable wait", 150, 60, 100, true, 120, 15, H, ActionKind::kEvict, 0, EvictionMode::kKillSlow},
      {"too slow, but 900 s uncommitted > 600 s limit: checkpoint first", 900, 10, 20, true, 120, -1, H,
       ActionKind::kRequestCheckpoint, -1, EvictionMode::kCheckpointFirst, false, true, 600},
      {"too slow, 150 s uncommitted <= 600 s limit: kill", 150, 10, 100, true, 120, -1, H, ActionKind::kEvict, 0,
       EvictionMode::kKillSlow, false, true, 600},
      {"too slow, but a 1-GPU preemptor waits (tolerable wait from 2 GPUs)", 150, 10, 100, true, 120, -1, H,
       ActionKind::kRequestCheckpoint, -1, EvictionMode::kCheckpointFirst, false, true, 600, 2, 1},
      // The same victim for a preemptor no larger than it: the GPUs it waits for are the victim's,
      // busy with the save (priced as the save's loss), none idle: 150 s uncommitted > ~100 s lost
      // by the save, so it saves.
      {"too slow, preemptor no larger than the victim: nothing idle, checkpoint first", 150, 10, 100, true, 120, -1, H,
       ActionKind::kRequestCheckpoint, -1, EvictionMode::kCheckpointFirst, false, true, 0, 1, 1},
      {"tolerable wait off: checkpoint first", 900, 10, 20, true, 120, 0, H, ActionKind::kRequestCheckpoint, -1,
       EvictionMode::kCheckpointFirst},
      {"medium preemptor waits for the save", 900, 10, 20, true, 120, -1, M, ActionKind::kRequestCheckpoint, -1,
       EvictionMode::kCheckpointFirst},
      {"less uncommitted than a save loses", 1, 30, 20, true, 0, -1, H, ActionKind::kEvict, 0,
       EvictionMode::kKillCheap},
      {"kill_when_cheaper off: it saves anyway", 1, 30, 20, true, 0, -1, H, ActionKind::kEvict, -1, EvictionMode::kSaveInGrace,
       false, false},
      {"unmeasured save cost is not free (60 s assumed): 30 s uncommitted is killed", 30, 30, 0, true, 0, -1, H,
       ActionKind::kEvict, 0, EvictionMode::kKillCheap, true},
      {"unmeasured save cost, 900 s uncommitted: checkpoint first, 60 s assumed > 30 s grace", 900, 30, 0, true, 0,
       0, H, ActionKind::kRequestCheckpoint, -1, EvictionMode::kCheckpointFirst, true},
      {"unmeasured save cost vs a 30 s tolerable wait, 100 s uncommitted: kill", 100, 30, 0, true, 0, -1, H,
       ActionKind::kEvict, 0, EvictionMode::kKillSlow, true},
  };
  for (const auto& c : cases) {
    B b({c.preemptor_gpus});
    Hints h = MakeHints(c.lost_s, c.persist_s);
    if (c.unmeasured) h.cost = Hints::Cost{};
    h.grace.granted_s = c.granted_s;
    h.grace.needed_s = h.checkpoint_s();
    b.run("v", L, 1, 0, 3600, h);
    b.pend("p", c.preemptor, c.preemptor_gpus);
    PolicyOptions p = HintAwareNoRulesPolicy();
    p.kill_when_cheaper = c.kill_when_cheaper;
    p.sigterm_save = c.sigterm_save;
    p.kill_now_max_lost_s = c.kill_now_max_lost_s;
    p.high_tolerable_wait = c.tolerable_s < 0    ? TolerableWait::kVictimGrace
                            : c.tolerable_s == 0 ? TolerableWait::kOff
                                                 : TolerableWait::kFixed;
    p.high_tolerable_wait_s = c.tolerable_s > 0 ? c.tolerable_s : 0;
    p.tolerable_kill_max_lost_s = c.kill_max_lost_s;
    p.tolerable_wait_min_gpus = c.min_gpus;
    Decisions d = Decide(b.st, p);
    ASSERT_EQ(d.actions.size(), 1u) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].kind, c.kind) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].grace_s, c.grace_s) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].mode, c.mode) << c.name << "\n" << Dump(d);
  }
}

// The one test of a reason's wording: a victim saving inside its grace, as `plan` prints it.
TEST(Policy, VictimReasonWording) {
  B b({1});
  Hints h = MakeHints(900, 2);
  h.grace.granted_s = 30;
  h.grace.needed_s = h.checkpoint_s();
  b.run("v", L, 1, 0, 3600, h);
  b.pend("p", H, 1);
  Decisions d = Decide(b.st, HintAwareNoRulesPolicy());
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].mode, EvictionMode::kSaveInGrace);
  EXPECT_STREQ(EvictionModeName(d.actions[0].mode), "save-in-grace");
  char want[256];
  snprintf(want, sizeof want,
           "least lost work on n0 for high job p: SIGTERM, saves within its 30 s grace (needs %.1f s), loses %.0f "
           "GPU-s incl. restore vs 900 s uncommitted now",
           h.checkpoint_s(), d.actions[0].est_lost_gpu_s);
  EXPECT_EQ(d.actions[0].reason, want);
}

// Default tolerable-wait rule: a slow saver (save longer than its grace) with little uncommitted
// work is killed for a high preemptor of >= 2 GPUs, which would otherwise wait for it with the
// GPUs already freed sitting idle; a 1-GPU preemptor waits for its save, and so does a preemptor
// that needs only the slow saver's own GPUs (busy with the save, not idle), whatever its size.
TEST(Policy, SlowSaverIsKilledOnlyForMultiGpuPreemptors) {
  auto slow = [] {
    Hints h = MakeHints(60, 40);  // 60 s uncommitted, save ~40.5 s: for 2 idle GPUs, killing is cheaper
    h.grace.granted_s = 30;
    h.grace.needed_s = h.checkpoint_s();
    return h;
  };
  auto fast = [] {
    Hints h = MakeHints(900, 2);
    h.grace.granted_s = 30;
    h.grace.needed_s = h.checkpoint_s();
    return h;
  };
  {
    B b({2});
    b.run("slow", L, 1, 0, 3600, slow());
    b.run("fast", L, 1, 0, 3600, fast());
    b.pend("big", H, 2);
    Decisions d = Decide(b.st, HintAwareNoRulesPolicy());
    const JobAction* s = find(d, "slow");
    const JobAction* f = find(d, "fast");
    ASSERT_NE(s, nullptr) << Dump(d);
    ASSERT_NE(f, nullptr) << Dump(d);
    EXPECT_EQ(s->kind, ActionKind::kEvict) << Dump(d);
    EXPECT_EQ(s->grace_s, 0) << Dump(d);
    EXPECT_EQ(s->mode, EvictionMode::kKillSlow) << Dump(d);
    EXPECT_EQ(f->grace_s, -1) << Dump(d);
    EXPECT_EQ(f->mode, EvictionMode::kSaveInGrace) << Dump(d);
  }
  {
    B b({1});
    b.run("slow", L, 1, 0, 3600, slow());
    b.pend("small", H, 1);
    Decisions d = Decide(b.st, HintAwareNoRulesPolicy());
    const JobAction* s = find(d, "slow");
    ASSERT_NE(s, nullptr) << Dump(d);
    EXPECT_EQ(s->kind, ActionKind::kRequestCheckpoint) << Dump(d);
    PolicyOptions all = HintAwareNoRulesPolicy();
    all.tolerable_wait_min_gpus = 1;  // the tolerable wait applies, but no GPU would sit idle
    d = Decide(b.st, all);
    s = find(d, "slow");
    ASSERT_NE(s, nullptr) << Dump(d);
    EXPECT_EQ(s->kind, ActionKind::kRequestCheckpoint) << Dump(d);
    EXPECT_EQ(s->mode, EvictionMode::kCheckpointFirst) << Dump(d);
  }
  {
    B b({2});  // a 2-GPU slow saver for a 2-GPU preemptor: its GPUs are the victim's
    b.run("slow", L, 2, 0, 3600, slow());
    b.pend("big", H, 2);
    Decisions d = Decide(b.st, HintAwareNoRulesPolicy());
    const JobAction* s = find(d, "slow");
    ASSERT_NE(s, nullptr) << Dump(d);
    EXPECT_EQ(s->mode, EvictionMode::kCheckpointFirst) << Dump(d);
    b.st.nodes[0].gpus = 4;  // two more GPUs, free and held idle for a preemptor of 4
    b.st.jobs[1].gpus = 4;
    d = Decide(b.st, HintAwareNoRulesPolicy());
    s = find(d, "slow");
    ASSERT_NE(s, nullptr) << Dump(d);
    EXPECT_EQ(s->mode, EvictionMode::kKillSlow) << Dump(d);
  }
}

// After the requested commit is durable the victim is killed at once (no second save), unless off.
TEST(Policy, KillAfterCommitTable) {
  for (bool on : {true, false}) {
    B b({1});
    Hints h = MakeHints(1);
    h.request_ack = 7;
    b.run("v", L, 1, 0, 3600, h);
    b.st.jobs[0].phase = JobPhase::kCheckpointing;
    b.st.jobs[0].request_id = 7;
    b.st.jobs[0].request_time = kNow - 3;
    b.st.jobs[0].preemptor = "hi";
    b.pend("hi", H, 1);
    PolicyOptions p = Hint();
    p.kill_after_commit = on;
    Decisions d = Decide(b.st, p);
    const JobAction* a = find(d, "v");
    ASSERT_NE(a, nullptr) << Dump(d);
    EXPECT_EQ(a->kind, ActionKind::kEvict);
    EXPECT_EQ(a->grace_s, on ? 0 : -1) << Dump(d);
    EXPECT_EQ(a->mode, EvictionMode::kAfterCommit) << Dump(d);
  }
}

// A high job waiting past high_min_runtime_override_s may take a victim inside its minimum run
// time, even one preempted a moment ago; the wait cause says why it waits.
TEST(Policy, HighMinRuntimeOverrideTable) {
  struct Case {
    const char* name;
    double override_s, waited_s, victim_preempted_ago;
    bool preempts;
    WaitCause cause;
  } cases[] = {
      {"off", 0, 5000, 1e9, false, WaitCause::kMinRuntime},
      {"not waited long enough", 600, 100, 1e9, false, WaitCause::kMinRuntime},
      {"waited long enough", 600, 700, 1e9, true, WaitCause::kVictimsLeaving},
      {"victim preempted recently: the override still lifts it", 600, 700, 400, true, WaitCause::kVictimsLeaving},
  };
  for (const auto& c : cases) {
    B b({1});
    b.run("v", L, 1, 0, 100, MakeHints(50));  // started 100 s ago: inside min run time 300
    b.st.jobs[0].last_preempted = kNow - c.victim_preempted_ago;
    b.pend("hi", H, 1, c.waited_s);
    PolicyOptions p = Hint();
    p.min_runtime_s = 300;
    p.cooldown_s = 300;
    p.high_min_runtime_override_s = c.override_s;
    Decisions d = Decide(b.st, p);
    EXPECT_EQ(find(d, "v") != nullptr, c.preempts) << c.name << "\n" << Dump(d);
    ASSERT_EQ(d.waits.size(), 1u) << c.name;
    EXPECT_EQ(d.waits[0].cause, c.cause) << c.name << " " << WaitCauseName(d.waits[0].cause);
    if (!c.preempts && c.override_s > 0 && c.waited_s < c.override_s) {
      EXPECT_LE(d.recheck_at, kNow - c.waited_s + c.override_s) << c.name;
    }
  }
}

// Past the override, victims inside their minimum run time are taken last: on a node after every
// unprotected candidate of their class, and a node that needs none of them before a cheaper one
// that does. With nothing else, a protected victim is still taken.
TEST(Policy, ProtectedVictimsAreTakenLast) {
  PolicyOptions p = Hint();
  p.min_runtime_s = 300;
  p.high_min_runtime_override_s = 1;
  {  // one node: the protected job is cheaper (little uncommitted work) but the other one goes
    B b({2});
    b.run("fresh", L, 1, 0, 100, MakeHints(5));   // restarted 100 s ago: protected
    b.run("old", L, 1, 0, 5000, MakeHints(900));  // out of its minimum run time, costlier
    b.pend("hi", H, 1, 10);
    Decisions d = Decide(b.st, p);
    EXPECT_NE(find(d, "old"), nullptr) << Dump(d);
    EXPECT_EQ(find(d, "fresh"), nullptr) << Dump(d);
  }
  {  // two nodes: the node without a protected victim wins although its victim costs more
    B b({1, 1});
    b.run("fresh", L, 1, 0, 100, MakeHints(5));
    b.run("old", L, 1, 1, 5000, MakeHints(900));
    b.pend("hi", H, 1, 10);
    Decisions d = Decide(b.st, p);
    const JobAction* a = find(d, "old");
    ASSERT_NE(a, nullptr) << Dump(d);
    EXPECT_EQ(find(d, "fresh"), nullptr) << Dump(d);
  }
  {  // the class order comes first: a protected low job before an unprotected medium one
    B b({1, 1});
    b.run("fresh-low", L, 1, 0, 100, MakeHints(5));
    b.run("old-medium", PriorityClass::kMedium, 1, 1, 5000, MakeHints(5));
    b.pend("hi", H, 1, 10);
    Decisions d = Decide(b.st, p);
    EXPECT_NE(find(d, "fresh-low"), nullptr) << Dump(d);
    EXPECT_EQ(find(d, "old-medium"), nullptr) << Dump(d);
  }
  {  // only protected victims: one is taken; before the override, none is
    for (double waited : {0.5, 10.0}) {
      B b({1});
      b.run("fresh", L, 1, 0, 100, MakeHints(5));
      b.pend("hi", H, 1, waited);
      Decisions d = Decide(b.st, p);
      EXPECT_EQ(find(d, "fresh") != nullptr, waited >= 1) << waited << "\n" << Dump(d);
    }
  }
}

TEST(Policy, WaitCauseTable) {
  {  // only high jobs run: no victim
    B b({1});
    b.run("h", H, 1, 0, 3600, MakeHints(1));
    b.pend("hi", H, 1);
    Decisions d = Decide(b.st, Hint());
    ASSERT_EQ(d.waits.size(), 1u);
    EXPECT_EQ(d.waits[0].cause, WaitCause::kNoVictim);
  }
  {  // the only victim would take low below its guaranteed share
    B b({4});
    b.run("l", L, 4, 0, 3600, MakeHints(100));
    b.pend("hi", H, 4);
    PolicyOptions p = Hint();
    p.low_guaranteed_share = 0.5;
    Decisions d = Decide(b.st, p);
    ASSERT_EQ(d.waits.size(), 1u) << Dump(d);
    EXPECT_EQ(d.waits[0].cause, WaitCause::kLowShare);
  }
  {  // per-queue budget spent
    B b({1});
    b.run("l", L, 1, 0, 3600, MakeHints(100));
    b.pend("hi", H, 1);
    b.st.history.push_back({kNow - 10, "q", 0.01});
    PolicyOptions p = Hint();
    p.budget_max_preemptions = 1;
    Decisions d = Decide(b.st, p);
    ASSERT_EQ(d.waits.size(), 1u) << Dump(d);
    EXPECT_EQ(d.waits[0].cause, WaitCause::kBudget);
  }
  EXPECT_STREQ(WaitCauseName(WaitCause::kVictimsLeaving), "victims-leaving");
}

// Defragmentation: a 4-GPU high job, two 4-GPU nodes each holding a 1-GPU high job. No node can be
// cleared of lower-priority jobs alone; moving one small high job (save, restart elsewhere) can.
struct DefragCase {
  const char* name;
  int max_moves = 4;
  double h1_started_ago = 1000;  // < 300: inside its minimum run time
  double h1_hints_age = 0;       // > 300: stale
  double h1_moved_ago = -1;      // >= 0: moved that long ago
  bool h2_movable = true;
  bool free_gpu_on_n1 = false;   // n1 has a free GPU instead of the 1-GPU low job l1a
  // Expected: which job moves where (or none), and what is evicted for whom.
  const char* moved = "h1";
  int to_node = 1;
  std::vector<std::pair<const char*, const char*>> evicted;  // (victim, for)
};

TEST(Policy, DefragMovesSmallHighJobsTable) {
  const std::vector<DefragCase> cases = {
      {"moves the cheaper high job; its place is a low victim elsewhere", 4, 1000, 0, -1, true, false, "h1", 1,
       {{"l0a", "J"}, {"l1a", "h1"}}},
      {"off", 0, 1000, 0, -1, true, false, nullptr, -1, {}},
      {"h1 inside its minimum run time: h2 moves instead", 4, 100, 0, -1, true, false, "h2", 0,
       {{"l1a", "J"}, {"l1b", "J"}, {"l0a", "h2"}}},
      {"h1 with stale hints is never moved", 4, 1000, 1000, -1, true, false, "h2", 0,
       {{"l1a", "J"}, {"l1b", "J"}, {"l0a", "h2"}}},
      {"h1 moved within cooldown + minimum run time is not moved again", 4, 1000, 0, 400, true, false, "h2", 0,
       {{"l1a", "J"}, {"l1b", "J"}, {"l0a", "h2"}}},
      {"nothing movable: J waits", 4, 100, 0, -1, false, false, nullptr, -1, {}},
      {"a free GPU elsewhere: no victim for the moved job", 4, 1000, 0, -1, true, true, "h1", 1, {{"l0a", "J"}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    B b({4, 4});
    Job& h1 = b.run("h1", H, 1, 0, c.h1_started_ago, MakeHints(50, 2, c.h1_hints_age));
    if (c.h1_moved_ago >= 0) h1.last_moved = kNow - c.h1_moved_ago;
    b.run("l0a", L, 3, 0, 1000, MakeHints(100));
    b.run("h2", H, 1, 1, c.h2_movable ? 1000 : 100, MakeHints(50, 5));
    if (!c.free_gpu_on_n1) b.run("l1a", L, 1, 1, 1000, MakeHints(100));
    b.run("l1b", L, 2, 1, 1000, MakeHints(100));
    b.pend("J", H, 4);
    PolicyOptions p = Hint();
    p.min_runtime_s = 300;
    p.cooldown_s = 300;
    p.defrag_max_moves = c.max_moves;
    Decisions d = Decide(b.st, p);
    EXPECT_EQ(find(d, "J"), nullptr) << Dump(d);  // it waits for the node to clear
    int moves = 0, evictions = 0;
    for (const auto& a : d.actions) {
      ASSERT_NE(a.kind, ActionKind::kStart) << Dump(d);
      if (a.to_node >= 0) {
        ++moves;
        ASSERT_NE(c.moved, nullptr) << Dump(d);
        EXPECT_EQ(a.job, c.moved) << Dump(d);
        EXPECT_EQ(a.to_node, c.to_node) << Dump(d);
        EXPECT_EQ(a.for_job, "J");
        EXPECT_NE(a.reason.find("move to n" + std::to_string(c.to_node)), std::string::npos) << a.reason;
        EXPECT_NE(a.grace_s, 0) << "a moved job saves: " << a.reason;
      } else {
        ++evictions;
        bool expected = false;
        for (const auto& [victim, for_job] : c.evicted) expected |= a.job == victim && a.for_job == for_job;
        EXPECT_TRUE(expected) << "unexpected: " << Dump(d);
      }
    }
    EXPECT_EQ(moves, c.moved ? 1 : 0) << Dump(d);
    EXPECT_EQ(evictions, static_cast<int>(c.evicted.size())) << Dump(d);
    if (!c.moved) {
      ASSERT_EQ(d.waits.size(), 1u);
      EXPECT_EQ(d.waits[0].cause, WaitCause::kNoVictim);
    }
  }
}

TEST(Policy, DefragNeverMovesJobsAsLargeAsThePreemptorOrTooMany) {
  {  // every node is full of 2-GPU high jobs and the preemptor needs 2: nothing smaller to move
    B b({4, 4});
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 2; ++k) b.run("h" + std::to_string(n) + std::to_string(k), H, 2, n, 1000, MakeHints(50));
    b.pend("J", H, 2);
    PolicyOptions p = Hint();
    p.defrag_max_moves = 4;
    Decisions d = Decide(b.st, p);
    EXPECT_TRUE(d.actions.empty()) << Dump(d);
    ASSERT_EQ(d.waits.size(), 1u);
    EXPECT_EQ(d.waits[0].cause, WaitCause::kNoVictim);
  }
  {  // clearing any node would need 3 moves; the limit is 2
    B b({4, 4});
    for (int n = 0; n < 2; ++n) {
      for (int k = 0; k < 3; ++k) b.run("h" + std::to_string(n) + std::to_string(k), H, 1, n, 1000, MakeHints(50));
      b.run("l" + std::to_string(n), L, 1, n, 1000, MakeHints(100));
    }
    b.pend("J", H, 4);
    PolicyOptions p = Hint();
    p.defrag_max_moves = 2;
    Decisions d = Decide(b.st, p);
    EXPECT_TRUE(d.actions.empty()) << Dump(d);
    p.defrag_max_moves = 3;  // now possible, but the 3 moved jobs need 3 places on the other node: none
    d = Decide(b.st, p);
    EXPECT_TRUE(d.actions.empty()) << Dump(d);
  }
}

TEST(Policy, MovedJobRestartsOnItsNodeWhichIsHeldForIt) {
  {  // pending moved job: restarts on move_to although best fit would pick the other node
    B b({4, 4});
    b.run("l0", L, 3, 0, 1000, MakeHints(100));  // n0: 1 free (best fit for 1 GPU)
    b.run("l1", L, 2, 1, 1000, MakeHints(100));  // n1: 2 free
    Job& m = b.pend("m", H, 1, 5000);
    m.move_to = 1;
    Decisions d = Decide(b.st, Hint());
    const JobAction* a = find(d, "m");
    ASSERT_NE(a, nullptr) << Dump(d);
    EXPECT_EQ(a->kind, ActionKind::kStart);
    EXPECT_EQ(a->node, 1) << a->reason;
  }
  {  // while it is still saving, its GPU on n1 is held: a pending low job does not take it
    B b({4, 4});
    Job& m = b.run("m", H, 1, 0, 1000, MakeHints(50));
    m.phase = JobPhase::kEvicting;
    m.preemptor = "J";
    m.move_to = 1;
    b.run("l0", L, 3, 0, 1000, MakeHints(100));
    b.run("l1", L, 2, 1, 1000, MakeHints(100));  // n1: 2 free, 1 held for m
    b.pend("p", L, 2);
    Decisions d = Decide(b.st, Hint());
    EXPECT_EQ(find(d, "p"), nullptr) << Dump(d);
    b.st.jobs[0].move_to = -1;  // not a moved job: p fits on n1
    d = Decide(b.st, Hint());
    ASSERT_NE(find(d, "p"), nullptr) << Dump(d);
    EXPECT_EQ(find(d, "p")->node, 1);
  }
  {  // its node is full but a job there is leaving: it waits for it, not elsewhere
    B b({4, 4});
    b.run("l0", L, 3, 0, 1000, MakeHints(100));
    Job& v = b.run("v", L, 1, 1, 1000, MakeHints(100));
    v.phase = JobPhase::kEvicting;
    v.preemptor = "m";
    b.run("l1", L, 3, 1, 1000, MakeHints(100));
    Job& m = b.pend("m", H, 1, 5000);
    m.move_to = 1;
    Decisions d = Decide(b.st, Hint());
    EXPECT_EQ(find(d, "m"), nullptr) << Dump(d);
    // ...and when nothing is leaving there any more, it is placed like any pending job.
    b.st.jobs[1].phase = JobPhase::kRunning;
    d = Decide(b.st, Hint());
    ASSERT_NE(find(d, "m"), nullptr) << Dump(d);
    EXPECT_EQ(find(d, "m")->node, 0);
  }
}

TEST(Policy, RequeueAfterMoveKeepsItsPlaceAndSkipsTheCooldown) {
  Job j;
  j.phase = JobPhase::kEvicting;
  j.node = 0;
  j.move_to = 1;
  j.preemptor = "J";
  j.hints = MakeHints(1);
  j.requeue_after_move(kNow);
  EXPECT_EQ(j.phase, JobPhase::kPending);
  EXPECT_EQ(j.move_to, 1);
  EXPECT_EQ(j.moves, 1);
  EXPECT_EQ(j.preemptions, 0);
  EXPECT_EQ(j.last_moved, kNow);
  EXPECT_TRUE(std::isinf(j.last_preempted));
  EXPECT_FALSE(j.hints.has_value());
  j.requeue_after_preemption(kNow);  // a preemption forgets any move
  EXPECT_EQ(j.move_to, -1);
}

}  // namespace
}  // namespace preempt::sched
