// Table-driven tests of Decide(): placement, each preemption rule, and the baselines.
#include "preempt/sched/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "policy_test_support.h"

namespace preempt::sched {
namespace {

using namespace policy_testing;

TEST(Policy, Names) {
  PriorityClass c;
  EXPECT_TRUE(ParsePriorityClass("medium", &c));
  EXPECT_EQ(c, M);
  EXPECT_FALSE(ParsePriorityClass("urgent", &c));
  EXPECT_STREQ(PolicyKindName(PolicyKind::kKubernetes), "k8s");
  PolicyOptions d;
  EXPECT_EQ(d.priority_value[2], 1000000);
  EXPECT_EQ(d.priority_value[1], 100);
  EXPECT_EQ(d.priority_value[0], 1);
  EXPECT_DOUBLE_EQ(d.reserved_headroom, 0.03);
  EXPECT_TRUE(d.headroom_keep_free);
  EXPECT_DOUBLE_EQ(d.headroom_high_window_s, 3600);
  EXPECT_TRUE(d.headroom_low_restarts);
  EXPECT_DOUBLE_EQ(d.headroom_low_wait_s, 14400);
  EXPECT_EQ(d.reserved_nodes, 1);
  EXPECT_DOUBLE_EQ(d.high_wait_guard_s, 30);
  EXPECT_DOUBLE_EQ(d.high_wait_guard_window_s, 4 * 86400.0);
  PolicyOptions refill;
  ASSERT_TRUE(PolicyByName("hint-refill", &refill));
  EXPECT_DOUBLE_EQ(refill.reserved_headroom, 0.15);
  EXPECT_TRUE(refill.refill_headroom);
  EXPECT_DOUBLE_EQ(refill.headroom_high_window_s, 0);  // refilled whatever the high demand
  EXPECT_FALSE(refill.headroom_low_restarts);
  EXPECT_DOUBLE_EQ(refill.headroom_low_wait_s, 0);
  // The no-rules preset and the baselines keep no headroom.
  EXPECT_DOUBLE_EQ(HintAwareNoRulesPolicy().reserved_headroom, 0);
  EXPECT_FALSE(HintAwareNoRulesPolicy().headroom_keep_free);
  EXPECT_DOUBLE_EQ(KubernetesPolicy().reserved_headroom, 0);
}

TEST(Policy, StartsBestFitInPriorityOrder) {
  B b({8, 2, 4});
  b.pend("low", L, 2, 100);
  b.pend("high", H, 4, 1);
  b.pend("big", L, 16);  // never fits: ignored
  b.pend("huge-high", H, 16, 1000);  // never fits either: reported with a suggestion
  Decisions d = Decide(b.st, Hint());
  ASSERT_EQ(d.actions.size(), 2u) << Dump(d);
  ASSERT_EQ(d.waits.size(), 1u);
  EXPECT_EQ(d.waits[0].job, "huge-high");
  EXPECT_NE(d.waits[0].suggestion.find("largest node has 8"), std::string::npos) << d.waits[0].suggestion;
  EXPECT_EQ(d.actions[0].job, "high");  // high first, though it arrived later
  EXPECT_EQ(d.actions[0].node, 2);      // smallest node with 4 free
  EXPECT_EQ(d.actions[1].job, "low");
  EXPECT_EQ(d.actions[1].node, 1);
  EXPECT_EQ(d.actions[1].job_index, 0);
}

TEST(Policy, FcfsIsArrivalOrderWithoutPreemption) {
  B b({4});
  b.run("r", L, 3, 0, 50, MakeHints(10));
  b.pend("low-early", L, 1, 100);
  b.pend("high-late", H, 1, 1);
  Decisions d = Decide(b.st, FcfsPolicy());
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].job, "low-early");
  B c({4});
  c.run("r", L, 4, 0, 50, MakeHints(10));
  c.pend("high", H, 1);
  d = Decide(c.st, FcfsPolicy());
  EXPECT_TRUE(d.actions.empty()) << Dump(d);
  ASSERT_EQ(d.waits.size(), 1u);
  EXPECT_TRUE(std::isinf(d.waits[0].est_wait_s));
}

// Kubernetes default order: lowest priority, then fewest victims, then most recently started.
TEST(Policy, KubernetesVictimOrder) {
  struct Case {
    const char* name;
    std::function<void(B&)> setup;
    std::vector<std::string> victims;
  };
  const Case cases[] = {
      {"lowest priority",
       [](B& b) {
         b.run("med", M, 2, 0, 10, MakeHints(1));
         b.run("low", L, 2, 1, 1000, MakeHints(900));
       },
       {"low"}},
      {"fewest victims",
       [](B& b) {
         b.run("a1", L, 1, 0, 10, MakeHints(1));
         b.run("a2", L, 1, 0, 10, MakeHints(1));
         b.run("big", L, 2, 1, 500, MakeHints(499));
       },
       {"big"}},
      {"most recently started",
       [](B& b) {
         b.run("old", L, 2, 0, 5000, MakeHints(1));
         b.run("new", L, 2, 1, 60, MakeHints(59));
       },
       {"new"}},
  };
  for (const auto& c : cases) {
    B b({2, 2});
    c.setup(b);
    b.pend("hi", H, 2);
    Decisions d = Decide(b.st, KubernetesPolicy());
    std::vector<std::string> got;
    for (const auto& a : d.actions) {
      EXPECT_EQ(a.kind, ActionKind::kEvict) << c.name;
      EXPECT_EQ(a.for_job, "hi");
      got.push_back(a.job);
    }
    EXPECT_EQ(got, c.victims) << c.name << "\n" << Dump(d);
  }
}

// Hint-aware victim choice and how the victim is preempted.
TEST(Policy, HintAwareVictimChoice) {
  struct Case {
    const char* name;
    std::optional<Hints> a, b;
    std::string victim;
    ActionKind how;
  };
  const Case cases[] = {
      {"less lost work", MakeHints(900), MakeHints(30), "b", ActionKind::kRequestCheckpoint},
      {"checkpointing equalizes; tie broken by lost work", MakeHints(50), MakeHints(40), "b",
       ActionKind::kRequestCheckpoint},
      {"just committed: evict now is cheaper", MakeHints(600), MakeHints(0.5, 2), "b", ActionKind::kEvict},
      {"missing hints are expensive, not free", std::nullopt, MakeHints(1000), "b", ActionKind::kRequestCheckpoint},
      {"stale hints are expensive", MakeHints(1, 2, /*age=*/3600), MakeHints(500), "b",
       ActionKind::kRequestCheckpoint},
      {"slow checkpoint costs the preemptor's wait", MakeHints(300, 60), MakeHints(300, 2), "b",
       ActionKind::kRequestCheckpoint},
  };
  for (const auto& c : cases) {
    B b({1, 1});
    b.run("a", L, 1, 0, 3600, c.a);
    b.run("b", L, 1, 1, 3600, c.b);
    b.pend("hi", H, 1);
    Decisions d = Decide(b.st, Hint());
    ASSERT_EQ(d.actions.size(), 1u) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].job, c.victim) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].kind, c.how) << c.name << "\n" << Dump(d);
    EXPECT_FALSE(d.actions[0].reason.empty());
  }
}

TEST(Policy, NeverCommittedJobHasNothingToRestore) {
  B b({1, 1});
  Hints fresh = MakeHints(30);
  fresh.last_commit.step = -1;
  b.run("fresh", L, 1, 0, 30, fresh);
  b.run("old", L, 1, 1, 3600, MakeHints(25));  // less uncommitted work, but a 10 s restore
  b.pend("hi", H, 1);
  PolicyOptions c = Hint();
  c.checkpoint_then_evict = false;
  Decisions d = Decide(b.st, c);
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].job, "fresh") << Dump(d);
  EXPECT_NEAR(d.actions[0].est_lost_gpu_s, 30, 1e-6);
}

TEST(Policy, CheckpointFirstAlwaysPaysTheRestore) {
  // Both are checkpointed first (same persist): the never-committed one will have a commit to
  // restore from too, so the tie is broken by uncommitted work, not by a free restore.
  B b({1, 1});
  Hints never = MakeHints(60);
  never.last_commit.step = -1;
  b.run("never", L, 1, 0, 60, never);
  b.run("often", L, 1, 1, 3600, MakeHints(5));
  b.pend("hi", H, 1);
  Decisions d = Decide(b.st, Hint());
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].job, "often") << Dump(d);
  EXPECT_EQ(d.actions[0].kind, ActionKind::kRequestCheckpoint);
  EXPECT_NEAR(d.actions[0].est_lost_gpu_s, 0.4 + 2 + 10, 1e-6);  // stall + persist + restore
}

TEST(Policy, CheckpointThenEvictCanBeTurnedOff) {
  B b({1});
  b.run("a", L, 1, 0, 3600, MakeHints(900));
  b.pend("hi", H, 1);
  PolicyOptions c = Hint();
  c.checkpoint_then_evict = false;
  Decisions d = Decide(b.st, c);
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0].kind, ActionKind::kEvict);
  EXPECT_NEAR(d.actions[0].est_lost_gpu_s, 910, 1e-6);
}

TEST(Policy, PrefersLowerClassAndNeverEqualOrHigher) {
  B b({2, 2, 2});
  b.run("med", M, 2, 0, 3600, MakeHints(1));
  b.run("low", L, 2, 1, 3600, MakeHints(3000));
  b.run("high", H, 2, 2, 3600, MakeHints(0.1));
  b.pend("hi", H, 2);
  b.pend("med2", M, 2);
  Decisions d = Decide(b.st, Hint());
  const JobAction* low = find(d, "low");
  ASSERT_TRUE(low) << Dump(d);
  EXPECT_EQ(low->for_job, "hi");
  EXPECT_FALSE(find(d, "high")) << Dump(d);
  // med2 may not take med (equal class) and low is already taken.
  EXPECT_FALSE(find(d, "med")) << Dump(d);
}

TEST(Policy, ClassWithNeverPolicyDoesNotPreempt) {
  B b({1});
  b.run("low", L, 1, 0, 3600, MakeHints(100));
  b.pend("med", M, 1);
  PolicyOptions c = Hint();
  EXPECT_EQ(Decide(b.st, c).actions.size(), 1u);
  c.preempts_lower[1] = false;
  EXPECT_TRUE(Decide(b.st, c).actions.empty());
  b.st.jobs[1].cls = L;  // low never preempts by default
  EXPECT_TRUE(Decide(b.st, Hint()).actions.empty());
}

TEST(Policy, MinimumRuntimeProtectsRecentlyResumedJobs) {
  B b({1, 1});
  b.run("fresh", L, 1, 0, 30, MakeHints(1));
  b.run("old", L, 1, 1, 5000, MakeHints(4000));
  b.pend("hi", H, 1);
  PolicyOptions c = Hint();
  c.min_runtime_s = 300;
  c.high_min_runtime_override_s = 0;
  Decisions d = Decide(b.st, c);
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].job, "old");
  // With only the fresh job, nothing happens until its minimum run time ends.
  b.st.jobs.erase(b.st.jobs.begin() + 1);
  b.st.nodes.pop_back();
  d = Decide(b.st, c);
  EXPECT_TRUE(d.actions.empty()) << Dump(d);
  EXPECT_NEAR(d.recheck_at, kNow - 30 + 300, 1e-6);
  ASSERT_EQ(d.waits.size(), 1u);
  EXPECT_NEAR(d.waits[0].est_wait_s, 5 + 270, 1e-6);
}

// A job preempted protect_after_preemptions times is protected like one inside its minimum run
// time, for good: a high job takes another victim first, and takes it alone only past its
// override (rechecked then); a medium job never takes it.
TEST(Policy, SerialVictimIsProtectedAfterSixteenPreemptions) {
  EXPECT_EQ(PolicyOptions().protect_after_preemptions, 16);
  EXPECT_EQ(HintAwareNoRulesPolicy().protect_after_preemptions, 0);
  struct Case {
    const char* name;
    int protect_after;
    int preemptions;
    bool other;  // a second, costlier victim on another node
    PriorityClass cls;
    double waited;
    const char* victim;  // "" = none
  } cases[] = {
      {"15 preemptions: still the cheapest victim", 16, 15, true, H, 0, "serial"},
      {"16: the other victim first", 16, 16, true, H, 0, "other"},
      {"16: the other victim first past the override too", 16, 16, true, H, 5, "other"},
      {"16, alone, before the override: waits", 16, 16, false, H, 0, ""},
      {"16, alone, past the override: taken", 16, 16, false, H, 5, "serial"},
      {"16, alone, medium preemptor: never", 16, 16, false, M, 5, ""},
      {"rule off: the cheapest", 0, 40, true, H, 0, "serial"},
  };
  for (const Case& c : cases) {
    B b(c.other ? std::vector<int>{1, 1} : std::vector<int>{1});
    b.run("serial", L, 1, 0, 20000, MakeHints(10)).preemptions = c.preemptions;
    if (c.other) b.run("other", L, 1, 1, 20000, MakeHints(4000));
    b.pend("p", c.cls, 1, c.waited);
    PolicyOptions p = Hint();
    p.protect_after_preemptions = c.protect_after;
    p.high_min_runtime_override_s = 1;
    Decisions d = Decide(b.st, p);
    if (c.victim[0] == 0) {
      EXPECT_TRUE(d.actions.empty()) << c.name << "\n" << Dump(d);
      if (c.cls == H) {
        EXPECT_NEAR(d.recheck_at, kNow - c.waited + 1, 1e-6) << c.name;
        ASSERT_EQ(d.waits.size(), 1u) << c.name;
        EXPECT_EQ(d.waits[0].cause, WaitCause::kMinRuntime) << c.name;
      }
      continue;
    }
    ASSERT_EQ(d.actions.size(), 1u) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].job, c.victim) << c.name << "\n" << Dump(d);
  }
  PolicyOptions p;
  ASSERT_TRUE(PolicyFromJson(R"({"protect_after_preemptions":3})", &p).ok());
  EXPECT_EQ(p.protect_after_preemptions, 3);
  for (const char* doc : {R"({"protect_after_preemptions":-1})", R"({"protect_after_preemptions":2.5})"}) {
    Status st = PolicyFromJson(doc, &p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << doc;
    EXPECT_NE(st.message().find("protect_after_preemptions"), std::string::npos) << st.to_string();
  }
}

TEST(Policy, CooldownDelaysRestart) {
  B b({4});
  Job& j = b.pend("victim", L, 1);
  j.last_preempted = kNow - 100;
  PolicyOptions c = Hint();
  c.cooldown_s = 300;
  Decisions d = Decide(b.st, c);
  EXPECT_TRUE(d.actions.empty());
  EXPECT_NEAR(d.recheck_at, kNow + 200, 1e-6);
  c.cooldown_s = 0;
  EXPECT_EQ(Decide(b.st, c).actions.size(), 1u);
}

TEST(Policy, PerQueuePreemptionBudget) {
  struct Case {
    const char* name;
    int max_preemptions;
    double max_lost_gpu_h;
    std::vector<PreemptionRecord> history;
    std::string victim;  // "" = none
  };
  const Case cases[] = {
      {"under count budget", 2, 0, {{kNow - 100, "research", 0.1}}, "cheap"},
      {"count budget spent", 2, 0, {{kNow - 100, "research", 0.1}, {kNow - 50, "research", 0.1}}, "pricey"},
      {"old records expire", 2, 0, {{kNow - 4000, "research", 0.1}, {kNow - 3700, "research", 0.1}}, "cheap"},
      {"lost GPU-hour budget spent", 0, 1.0, {{kNow - 100, "research", 0.999}}, "pricey"},
      {"other queue's history does not count", 1, 0, {{kNow - 100, "prod", 5}}, "cheap"},
  };
  for (const auto& c : cases) {
    B b({1, 1});
    b.run("cheap", L, 1, 0, 3600, MakeHints(10), "research");
    b.run("pricey", L, 1, 1, 3600, MakeHints(2000), "batch");
    b.pend("hi", H, 1);
    b.st.history = c.history;
    PolicyOptions p = Hint();
    p.budget_window_s = 3600;
    p.budget_max_preemptions = c.max_preemptions;
    p.budget_max_lost_gpu_hours = c.max_lost_gpu_h;
    if (c.name == std::string("lost GPU-hour budget spent")) b.st.jobs[1].queue = "batch";
    Decisions d = Decide(b.st, p);
    ASSERT_EQ(d.actions.size(), 1u) << c.name << "\n" << Dump(d);
    EXPECT_EQ(d.actions[0].job, c.victim) << c.name << "\n" << Dump(d);
  }
}

TEST(Policy, BudgetExhaustedSuggestsAction) {
  B b({1});
  b.run("only", L, 1, 0, 3600, MakeHints(10), "research");
  b.pend("hi", H, 1, 900);
  b.st.history = {{kNow - 100, "research", 0.1}};
  PolicyOptions p = Hint();
  p.budget_max_preemptions = 1;
  p.wait_alert_s = 600;
  Decisions d = Decide(b.st, p);
  EXPECT_TRUE(d.actions.empty()) << Dump(d);
  ASSERT_EQ(d.waits.size(), 1u);
  EXPECT_NE(d.waits[0].suggestion.find("budget"), std::string::npos) << d.waits[0].suggestion;
  EXPECT_NEAR(d.recheck_at, kNow - 100 + 3600, 1e-6);
}

TEST(Policy, ReservedHeadroomIsForHighPriority) {
  struct Case {
    PriorityClass cls;
    int used_by_low;
    bool starts;
  };
  // 20 GPUs, 15% headroom → 3 GPUs only high may take: non-high may hold 17.
  const Case cases[] = {{L, 16, true}, {L, 17, false}, {M, 17, false}, {H, 17, true}, {H, 19, true}};
  for (const auto& c : cases) {
    B b({20});
    b.run("filler", L, c.used_by_low, 0, 3600, MakeHints(1));
    b.pend("new", c.cls, 1);
    PolicyOptions p = Hint();
    p.reserved_headroom = 0.15;
    p.reserved_headroom_without_medium = 0.15;
    Decisions d = Decide(b.st, p);
    EXPECT_EQ(find(d, "new") != nullptr, c.starts) << PriorityClassName(c.cls) << " " << c.used_by_low << Dump(d);
  }
}

TEST(Policy, NonHighBlockedOnlyByTheReserveWaitsInsteadOfPreempting) {
  // 20 GPUs, 17 non-high allowed; 17 held by low, 3 free: a medium job fits physically but not
  // under the cap, so it waits; when the cluster is full it may replace a low job.
  B b({20});
  b.run("lows", L, 17, 0, 3600, MakeHints(1000));
  b.pend("med", M, 1);
  PolicyOptions p = Hint();
  p.reserved_headroom = 0.15;
  p.reserved_headroom_without_medium = 0.15;
  EXPECT_TRUE(Decide(b.st, p).actions.empty()) << Dump(Decide(b.st, p));
  B full({2, 2});
  full.run("l1", L, 2, 0, 3600, MakeHints(1000));
  full.run("h1", H, 2, 1, 3600, MakeHints(10));
  full.pend("med", M, 2);
  p.reserved_headroom = 0.25;  // 4 GPUs: non-high cap 3; medium replaces the low (2 - 2 + 2 <= 3)
  p.reserved_headroom_without_medium = 0.25;
  Decisions d = Decide(full.st, p);
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].job, "l1");
}

// A job below high priority preempts only after it has waited nonhigh_preempt_delay_s since it
// was submitted or requeued; high priority preempts at once; free GPUs are used at once.
TEST(Policy, NonHighPreemptDelayTable) {
  struct Case {
    const char* name;
    PriorityClass cls;
    double delay_s, waited_s, requeued_ago_s;  // requeued_ago_s < 0: never preempted
    bool free_gpu;                              // a free GPU is there: start, no preemption
    bool preempts;
    double recheck_at;                          // expected Decisions::recheck_at (inf = none)
  } cases[] = {
      {"medium, waited less than the delay", M, 1800, 600, -1, false, false, kNow + 1200},
      {"medium, waited exactly the delay", M, 1800, 1800, -1, false, true, INFINITY},
      {"medium, waited longer", M, 1800, 5000, -1, false, true, INFINITY},
      {"medium, requeued 100 s ago (submitted long ago)", M, 1800, 90000, 100, false, false, kNow + 1700},
      {"medium, delay off", M, 0, 1, -1, false, true, INFINITY},
      {"high preempts at once", H, 1800, 1, -1, false, true, INFINITY},
      {"medium, a free GPU: starts at once", M, 1800, 1, -1, true, false, INFINITY},
  };
  for (const auto& c : cases) {
    B b({c.free_gpu ? 2 : 1});
    b.run("low", L, 1, 0, 3600, MakeHints(900));
    Job& p = b.pend("p", c.cls, 1, c.waited_s);
    if (c.requeued_ago_s >= 0) p.last_preempted = kNow - c.requeued_ago_s;
    PolicyOptions cfg = Hint();
    cfg.nonhigh_preempt_delay_s = c.delay_s;
    Decisions d = Decide(b.st, cfg);
    const JobAction* victim = find(d, "low");
    EXPECT_EQ(victim != nullptr, c.preempts) << c.name << "\n" << Dump(d);
    if (c.free_gpu) {
      const JobAction* start = find(d, "p");
      ASSERT_TRUE(start) << c.name << "\n" << Dump(d);
      EXPECT_EQ(start->kind, ActionKind::kStart) << c.name;
    }
    if (!c.preempts && !c.free_gpu) {
      EXPECT_TRUE(d.actions.empty()) << c.name << "\n" << Dump(d);
    }
    EXPECT_EQ(d.recheck_at, c.recheck_at) << c.name;
  }
  // The default policy has the delay on; the no-rules preset and the baselines do not.
  EXPECT_GT(PolicyOptions().nonhigh_preempt_delay_s, 0);
  EXPECT_EQ(HintAwareNoRulesPolicy().nonhigh_preempt_delay_s, 0);
}

TEST(Policy, LowGuaranteedShareIsNotPreempted) {
  struct Case {
    double share;
    bool preempted;
  };
  for (const auto& c : {Case{0.0, true}, Case{0.25, true}, Case{0.5, false}}) {
    B b({2, 2, 2});
    b.run("low", L, 2, 0, 3600, MakeHints(100));
    b.run("low2", L, 2, 1, 3600, MakeHints(5000));
    b.run("high", H, 2, 2, 3600, MakeHints(100));
    b.pend("hi2", H, 2);
    PolicyOptions p = Hint();
    p.low_guaranteed_share = c.share;  // of 6 GPUs: floor(1.5) = 1, floor(3) = 3; low holds 4
    Decisions d = Decide(b.st, p);
    EXPECT_EQ(find(d, "low") != nullptr, c.preempted) << c.share << Dump(d);
  }
  // And the share lets low start inside the headroom.
  B b({10});
  b.pend("low", L, 1);
  b.run("m", M, 9, 0, 10, MakeHints(1));
  PolicyOptions p = Hint();
  p.reserved_headroom = 0.5;
  p.reserved_headroom_without_medium = 0.5;
  p.low_guaranteed_share = 0.1;
  EXPECT_TRUE(find(Decide(b.st, p), "low"));
}

// The kept-free headroom (headroom_keep_free): while a high job submitted within
// headroom_high_window_s is present, non-high work does not start into the reserve's last free
// GPUs; a low job preempted before may (headroom_low_restarts), and so may a low job no larger
// than the reserve once it has waited headroom_low_wait_s; high work always may.
TEST(Policy, HeadroomKeptFreeWhileHighDemandIsRecentTable) {
  struct Case {
    const char* name;
    PriorityClass cls;
    int gpus;
    int preempted_before;  // the pending job's earlier preemptions
    double high_ago_s;     // the running high job was submitted this long ago
    bool keep_free, low_restarts;
    double window_s;
    double waited_s, low_wait_s;  // the pending job's wait since submission; headroom_low_wait_s
    bool starts;
    double recheck_at;  // expected Decisions::recheck_at (inf = none)
  };
  const double window_end = kNow - 100 + 3600;
  // 10 GPUs, 20 % reserve = 2 GPUs; 1 high + 6 low running, 3 free.
  const Case cases[] = {
      {"low, recent high: would leave 1 free", L, 2, 0, 100, true, true, 3600, 7200, 0, false, window_end},
      {"medium, recent high", M, 2, 0, 100, true, true, 3600, 7200, 0, false, window_end},
      {"low of 1 GPU leaves the 2 free", L, 1, 0, 100, true, true, 3600, 7200, 0, true, INFINITY},
      {"no high job within the window", L, 2, 0, 5000, true, true, 3600, 7200, 0, true, INFINITY},
      {"window 0: kept free always", L, 2, 0, 5000, true, true, 0, 7200, 0, false, INFINITY},
      {"keep-free off: only the cap (8 non-high)", L, 2, 0, 100, false, true, 3600, 7200, 0, true, INFINITY},
      {"low preempted before restarts into it", L, 2, 1, 100, true, true, 3600, 7200, 0, true, INFINITY},
      {"... not with headroom_low_restarts off", L, 2, 1, 100, true, false, 3600, 7200, 0, false, window_end},
      {"medium preempted before does not", M, 2, 1, 100, true, true, 3600, 7200, 0, false, window_end},
      {"high takes the reserve", H, 3, 0, 100, true, true, 3600, 7200, 0, true, INFINITY},
      {"low waiting 4 h enters", L, 2, 0, 100, true, true, 3600, 14400, 14400, true, INFINITY},
      {"low waiting 3.5 h: held, rechecked at 4 h", L, 2, 0, 100, true, true, 3600, 12600, 14400, false, kNow + 1800},
      {"... window 0: held, rechecked at 4 h", L, 2, 0, 5000, true, true, 0, 12600, 14400, false, kNow + 1800},
      {"medium waiting 4 h does not enter", M, 2, 0, 100, true, true, 3600, 14400, 14400, false, window_end},
      {"headroom_low_wait_s 0: never by its wait", L, 2, 0, 100, true, true, 3600, 86400, 0, false, window_end},
  };
  for (const auto& c : cases) {
    B b({10});
    b.run("high", H, 1, 0, c.high_ago_s - 10, MakeHints(1));  // submitted high_ago_s ago
    b.run("lows", L, 6, 0, 3600, MakeHints(1000));
    Job& j = b.pend("new", c.cls, c.gpus, c.waited_s);
    j.preemptions = c.preempted_before;
    if (c.preempted_before) j.last_preempted = kNow - 7000;
    PolicyOptions p = Hint();
    p.reserved_headroom = 0.2;
    p.reserved_headroom_without_medium = 0.2;
    p.headroom_keep_free = c.keep_free;
    p.headroom_low_restarts = c.low_restarts;
    p.headroom_high_window_s = c.window_s;
    p.headroom_low_wait_s = c.low_wait_s;
    Decisions d = Decide(b.st, p);
    const JobAction* a = find(d, "new");
    EXPECT_EQ(a != nullptr && a->kind == ActionKind::kStart, c.starts) << c.name << "\n" << Dump(d);
    if (!c.starts) {
      EXPECT_TRUE(d.actions.empty()) << c.name << ": waits, preempts nobody\n" << Dump(d);
    }
    EXPECT_EQ(d.recheck_at, c.recheck_at) << c.name;
  }
  // A low job that waited takes one GPU of the reserve (2 of 10) at a time, and only when it is no
  // larger than the reserve.
  const struct {
    int high_running, lows_running, gpus;  // GPUs the running jobs hold; the waiting low job's
    bool starts;
  } takes[] = {{1, 7, 1, true}, {2, 6, 1, true}, {2, 6, 2, false}, {1, 6, 2, true}, {1, 5, 3, false}};
  for (const auto& c : takes) {
    B b({10});
    b.run("high", H, c.high_running, 0, 90, MakeHints(1));
    b.run("lows", L, c.lows_running, 0, 3600, MakeHints(1000));
    b.pend("new", L, c.gpus, 14400);
    PolicyOptions p = Hint();
    p.reserved_headroom = 0.2;
    p.reserved_headroom_without_medium = 0.2;
    p.headroom_keep_free = true;
    p.headroom_low_wait_s = 14400;
    Decisions d = Decide(b.st, p);
    EXPECT_EQ(find(d, "new") != nullptr, c.starts)
        << c.high_running << " + " << c.lows_running << " GPUs held, " << c.gpus << " wanted\n" << Dump(d);
    if (!c.starts) {
      EXPECT_EQ(d.recheck_at, kNow - 100 + 3600) << "the window's end, not the wait's\n" << Dump(d);
    }
  }
  // The defaults keep 3 % (1 GPU of 40) free while high demand is recent.
  B b({8, 8, 8, 8, 8});
  b.run("high", H, 1, 0, 100, MakeHints(1));
  for (int n = 0; n < 5; ++n) b.run("low" + std::to_string(n), L, n == 0 ? 6 : 8, n, 3600, MakeHints(1000));
  b.pend("new", L, 1);
  PolicyOptions d;
  EXPECT_FALSE(find(Decide(b.st, d), "new")) << Dump(Decide(b.st, d));
  b.st.jobs.pop_back();
  b.pend("new", H, 1);
  EXPECT_TRUE(find(Decide(b.st, d), "new"));
}

// 3 % of 32 GPUs rounds down to none; reserved_headroom_min_gpus keeps one free all the same on a
// cluster of 16 GPUs or more, not on a smaller one, and not with the fraction 0 (the baselines).
TEST(Policy, ReserveIsAtLeastOneGpuOnSixteenOrMore) {
  const struct {
    std::vector<int> nodes;
    int min_gpus;
    double fraction;
    bool starts;  // a 1-GPU medium job, with one GPU free and a high job submitted 100 s ago
  } cases[] = {{{8, 8, 8, 8}, 1, 0.03, false}, {{8, 8, 8, 8}, 0, 0.03, true}, {{8, 8, 8, 8}, 1, 0, true},
               {{8, 8}, 1, 0.03, false},      {{8}, 1, 0.03, true},          {{4, 4, 4}, 1, 0.03, true}};
  for (const auto& c : cases) {
    B b(c.nodes);
    int total = 0;
    for (int g : c.nodes) total += g;
    b.run("high", H, 1, 0, 90, MakeHints(1));
    int left = total - 2;  // lows fill all but one GPU
    for (size_t n = 0; n < c.nodes.size() && left > 0; ++n) {
      const int g = std::min(left, c.nodes[n] - (n == 0 ? 1 : 0));
      b.run("low" + std::to_string(n), L, g, static_cast<int>(n), 3600, MakeHints(1000));
      left -= g;
    }
    b.pend("new", M, 1);
    PolicyOptions p;
    p.reserved_headroom_min_gpus = c.min_gpus;
    p.reserved_headroom = c.fraction;
    p.reserved_headroom_without_medium = c.fraction;
    const Decisions d = Decide(b.st, p);
    EXPECT_EQ(find(d, "new") != nullptr, c.starts)
        << total << " GPUs, min " << c.min_gpus << ", fraction " << c.fraction << "\n" << Dump(d);
    b.st.jobs.pop_back();
    b.pend("new", H, 1);
    EXPECT_TRUE(find(Decide(b.st, p), "new")) << "high takes the reserved GPU";
  }
  PolicyOptions p;
  EXPECT_TRUE(PolicyFromJson(R"({"reserved_headroom_min_gpus":2})", &p).ok());
  EXPECT_EQ(p.reserved_headroom_min_gpus, 2);
  EXPECT_FALSE(PolicyFromJson(R"({"reserved_headroom_min_gpus":-1})", &p).ok());
  EXPECT_FALSE(PolicyFromJson(R"({"reserved_headroom_min_gpus":1.5})", &p).ok());
  EXPECT_EQ(p.reserved_headroom_min_gpus, 2) << "unchanged after a refused value";
}

// While no medium job holds or waits for GPUs, reserved_headroom_without_medium (5 %: 2 GPUs of 40)
// is kept free in place of reserved_headroom (3 %: 1 GPU): with two GPUs free, a new 1-GPU low job
// starts only when a medium job runs or waits.
TEST(Policy, LargerReserveWithoutMedium) {
  const struct {
    const char* name;
    const char* medium;  // "running", "pending" or "none"
    double fraction;     // reserved_headroom_without_medium
    bool starts;         // the new low job
  } cases[] = {
      {"two classes: 2 GPUs kept", "none", 0.05, false},
      {"a medium job runs: 1 GPU kept", "running", 0.05, true},
      {"a medium job waits: 1 GPU kept", "pending", 0.05, true},
      {"same fraction as with medium", "none", 0.03, true},
      {"fraction 0: nothing kept", "none", 0, true},
  };
  for (const auto& c : cases) {
    B b({8, 8, 8, 8, 8});
    b.run("high", H, 1, 0, 100, MakeHints(1));  // recent high demand: the reserve is kept
    const bool med_runs = std::string(c.medium) == "running";
    b.run("low0", L, med_runs ? 4 : 5, 0, 3600, MakeHints(1000));
    if (med_runs) b.run("med", M, 1, 0, 3600, MakeHints(1000));
    for (int n = 1; n < 5; ++n) b.run("low" + std::to_string(n), L, 8, n, 3600, MakeHints(1000));
    if (std::string(c.medium) == "pending") b.pend("med", M, 8, 60);  // waits for a whole node
    b.pend("new", L, 1);
    PolicyOptions p;
    p.reserved_headroom_without_medium = c.fraction;
    const Decisions d = Decide(b.st, p);
    const JobAction* a = find(d, "new");
    EXPECT_EQ(a != nullptr && a->kind == ActionKind::kStart, c.starts) << c.name << "\n" << Dump(d);
    EXPECT_EQ(find(d, "med"), nullptr) << c.name << ": the medium job neither starts nor is evicted\n" << Dump(d);
    b.st.jobs.pop_back();
    b.pend("new", H, 1);
    EXPECT_TRUE(find(Decide(b.st, p), "new")) << c.name << ": high takes a reserved GPU";
  }
  PolicyOptions p;
  EXPECT_DOUBLE_EQ(p.reserved_headroom_without_medium, 0.05);
  EXPECT_DOUBLE_EQ(HintAwareNoRulesPolicy().reserved_headroom_without_medium, 0);
  EXPECT_DOUBLE_EQ(KubernetesPolicy().reserved_headroom_without_medium, 0);
  ASSERT_TRUE(PolicyFromJson(R"({"reserved_headroom_without_medium":0.1})", &p).ok());
  EXPECT_DOUBLE_EQ(p.reserved_headroom_without_medium, 0.1);
  EXPECT_FALSE(PolicyFromJson(R"({"reserved_headroom_without_medium":1.5})", &p).ok());
  EXPECT_FALSE(PolicyFromJson(R"({"reserved_headroom_without_medium":"5%"})", &p).ok());
  EXPECT_DOUBLE_EQ(p.reserved_headroom_without_medium, 0.1) << "unchanged after a refused value";
}

TEST(Policy, RefillKeepsReservedHeadroomFree) {
  struct Case {
    const char* name;
    bool refill;
    int high_used;      // of 10 GPUs; lows fill the rest
    int want_victims;   // GPUs preempted to restore 2 free (20 % of 10)
  };
  const Case cases[] = {
      {"refill off", false, 2, 0},
      {"reserve intact", true, 0, 0},  // 8 low + 2 free: nothing to do
      {"high used the reserve", true, 2, 2},
      {"high used more", true, 4, 2},
  };
  for (const auto& c : cases) {
    B b({10});
    int low = c.high_used == 0 ? 8 : 10 - c.high_used;
    for (int i = 0; i < low; ++i) b.run("low" + std::to_string(i), L, 1, 0, 3600, MakeHints(100 + i));
    if (c.high_used) b.run("high", H, c.high_used, 0, 3600, MakeHints(1));
    PolicyOptions p = Hint();
    p.reserved_headroom = 0.2;
    p.reserved_headroom_without_medium = 0.2;
    p.refill_headroom = c.refill;
    p.headroom_high_window_s = 0;  // refill whatever the high demand (the window has its own test)
    Decisions d = Decide(b.st, p);
    int victims = 0;
    for (const auto& a : d.actions) {
      EXPECT_NE(a.kind, ActionKind::kStart) << c.name;
      EXPECT_TRUE(a.for_job.empty()) << c.name;
      EXPECT_NE(a.reason.find("headroom"), std::string::npos) << a.reason;
      victims += b.st.jobs[a.job_index].gpus;
    }
    EXPECT_EQ(victims, c.want_victims) << c.name << "\n" << Dump(d);
    if (c.want_victims) {
      EXPECT_EQ(d.actions[0].job, "low0") << "cheapest first\n" << Dump(d);
    }
  }
  // Victims already on their way out count as free: no second refill.
  B b({10});
  for (int i = 0; i < 8; ++i) b.run("low" + std::to_string(i), L, 1, 0, 3600, MakeHints(100));
  b.run("high", H, 2, 0, 3600, MakeHints(1));
  b.st.jobs[0].phase = JobPhase::kCheckpointing;
  b.st.jobs[1].phase = JobPhase::kCheckpointing;
  PolicyOptions p = Hint();
  p.reserved_headroom = 0.2;
  p.reserved_headroom_without_medium = 0.2;
  p.refill_headroom = true;
  p.headroom_high_window_s = 0;
  for (const auto& a : Decide(b.st, p).actions) EXPECT_NE(a.kind, ActionKind::kRequestCheckpoint) << a.job;
  // And a pending low job does not start into the reserve.
  B q({10});
  for (int i = 0; i < 8; ++i) q.run("low" + std::to_string(i), L, 1, 0, 3600, MakeHints(100));
  q.pend("newlow", L, 1);
  EXPECT_FALSE(find(Decide(q.st, p), "newlow"));
  p.refill_headroom = false;
  p.reserved_headroom = 0.1;
  p.reserved_headroom_without_medium = 0.1;
  EXPECT_TRUE(find(Decide(q.st, p), "newlow"));
}

// high_in_time_first: a high job takes the victim that leaves within the wait target
// (high_wait_guard_s, 30 s) before a cheaper one that checkpoints for a minute; a medium
// preemptor, and a high one with the rule off, take the cheaper, slower victim.
TEST(Policy, HighJobsTakeVictimsThatLeaveInTimeFirst) {
  const struct {
    const char* name;
    PriorityClass cls;
    bool in_time_first;
    const char* victim;
  } cases[] = {{"high, rule on: the victim that leaves in time", H, true, "quick"},
               {"high, rule off: the cheaper victim", H, false, "slow"},
               {"medium: the cheaper victim", M, true, "slow"}};
  for (const auto& c : cases) {
    B b({2, 2});
    // 900 s uncommitted, a 40 s save: checkpointed first (too much work to kill), 40.5 s to leave.
    b.run("slow", L, 2, 0, 3600, MakeHints(900, 40));
    // A 20 s save that fits its 30 s grace, but a 100 s restore: leaves in time, costs more.
    Hints quick = MakeHints(1000, 20);
    quick.grace.granted_s = 30;
    quick.grace.needed_s = 21;
    b.run("quick", L, 2, 1, 3600, quick).restore_s = 100;
    b.pend("new", c.cls, 2, 7200);
    PolicyOptions p;
    p.high_in_time_first = c.in_time_first;
    const Decisions d = Decide(b.st, p);
    const JobAction* a = find(d, c.victim);
    ASSERT_NE(a, nullptr) << c.name << "\n" << Dump(d);
    EXPECT_EQ(a->for_job, "new") << c.name;
    EXPECT_EQ(d.actions.size(), 1u) << c.name << ": one victim\n" << Dump(d);
  }
  PolicyOptions p;
  EXPECT_TRUE(p.high_in_time_first);
  EXPECT_FALSE(HintAwareNoRulesPolicy().high_in_time_first);
  ASSERT_TRUE(PolicyFromJson(R"({"high_in_time_first":false})", &p).ok());
  EXPECT_FALSE(p.high_in_time_first);
  EXPECT_FALSE(PolicyFromJson(R"({"high_in_time_first":1})", &p).ok());
}

// few_victims_first: where one job frees the preemptor's GPUs on one node and four cheaper ones
// on another, a preemptor (high or medium) takes the one; with the rule off, or a limit of four,
// the four cheaper ones.
TEST(Policy, FewVictimsFirst) {
  const struct {
    const char* name;
    PriorityClass cls;
    int few_victims_first;
    size_t victims;
  } cases[] = {{"high, at most 3 first: the one larger job", H, 3, 1},
               {"medium, at most 3 first: the one larger job", M, 3, 1},
               {"high, rule off: the four cheaper jobs", H, 0, 4},
               {"high, at most 4 first: the four cheaper jobs", H, 4, 4}};
  for (const auto& c : cases) {
    B b({4, 4});
    for (int i = 0; i < 4; ++i) b.run("small" + std::to_string(i), L, 1, 0, 3600, MakeHints(100));
    b.run("big", L, 4, 1, 3600, MakeHints(100)).restore_s = 100;  // 4 x 100 s more to restore
    b.pend("new", c.cls, 4, 7200);
    PolicyOptions p;
    p.few_victims_first = c.few_victims_first;
    p.fewest_victims_without_medium = false;  // no medium job here: that rule would rank by count
    const Decisions d = Decide(b.st, p);
    EXPECT_EQ(d.actions.size(), c.victims) << c.name << "\n" << Dump(d);
    for (const JobAction& a : d.actions) {
      EXPECT_EQ(a.for_job, "new") << c.name;
      EXPECT_EQ(a.job == "big", c.victims == 1) << c.name << ": " << a.job;
    }
  }
  PolicyOptions p;
  EXPECT_EQ(p.few_victims_first, 3);
  EXPECT_EQ(HintAwareNoRulesPolicy().few_victims_first, 0);
  ASSERT_TRUE(PolicyFromJson(R"({"few_victims_first":0})", &p).ok());
  EXPECT_EQ(p.few_victims_first, 0);
  EXPECT_FALSE(PolicyFromJson(R"({"few_victims_first":-1})", &p).ok());
  EXPECT_FALSE(PolicyFromJson(R"({"few_victims_first":2.5})", &p).ok());
}

// A case of a victim-search rule that applies only with (or without) a medium job running: the
// preemptor's class, whether a medium job runs, the rule on or off, and the victims expected.
struct MediumRuleCase {
  const char* name;
  PriorityClass cls;
  bool medium_running;
  bool rule;
  std::vector<std::string> victims;
};

// The jobs d takes as victims, sorted; each must be taken for `preemptor`.
std::vector<std::string> SortedVictimsOf(const Decisions& d, const std::string& preemptor, const char* name) {
  std::vector<std::string> got;
  for (const JobAction& a : d.actions) {
    EXPECT_EQ(a.for_job, preemptor) << name;
    got.push_back(a.job);
  }
  std::sort(got.begin(), got.end());
  return got;
}

// fewest_victims_without_medium: a 4-GPU preemptor can be made room for by four cheap 1-GPU jobs
// (node 0), two cheap 2-GPU jobs (node 1) or one dearer 4-GPU job (node 2). While no medium job
// holds or waits for GPUs the one job is taken; with a medium job running (on a 1-GPU node the
// preemptor does not fit), with a medium preemptor, or with the rule off, few_victims_first (3)
// ranks nodes 1 and 2 alike and cost picks the two 2-GPU jobs.
TEST(Policy, FewestVictimsWithoutMedium) {
  const MediumRuleCase cases[] = {
      {"high, no medium job: the one 4-GPU job", H, false, true, {"big"}},
      {"high, a medium job running: the two 2-GPU jobs", H, true, true, {"two0", "two1"}},
      {"medium preemptor: the two 2-GPU jobs", M, false, true, {"two0", "two1"}},
      {"high, rule off: the two 2-GPU jobs", H, false, false, {"two0", "two1"}}};
  for (const auto& c : cases) {
    B b({4, 4, 4, 1});
    for (int i = 0; i < 4; ++i) b.run("one" + std::to_string(i), L, 1, 0, 3600, MakeHints(100));
    for (int i = 0; i < 2; ++i) b.run("two" + std::to_string(i), L, 2, 1, 3600, MakeHints(100));
    b.run("big", L, 4, 2, 3600, MakeHints(100)).restore_s = 100;  // 4 x 100 s more to restore
    if (c.medium_running) b.run("med", M, 1, 3, 3600, MakeHints(100));
    b.pend("new", c.cls, 4, 7200);
    PolicyOptions p;
    p.fewest_victims_without_medium = c.rule;
    const Decisions d = Decide(b.st, p);
    EXPECT_EQ(SortedVictimsOf(d, "new", c.name), c.victims) << c.name << "\n" << Dump(d);
  }
  // Among single victims, the one freeing fewest GPUs beyond the need first: a 4-GPU job on a
  // 4-GPU node before a cheaper 8-GPU job on an 8-GPU node (cost picks the 8-GPU job without the
  // rule).
  for (const bool rule : {true, false}) {
    B b({4, 8});
    b.run("four", L, 4, 0, 3600, MakeHints(100)).restore_s = 100;
    b.run("eight", L, 8, 1, 3600, MakeHints(10));
    b.pend("new", H, 4, 7200);
    PolicyOptions p;
    p.fewest_victims_without_medium = rule;
    const Decisions d = Decide(b.st, p);
    ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
    EXPECT_EQ(d.actions[0].job, rule ? "four" : "eight") << Dump(d);
  }
  PolicyOptions p;
  EXPECT_TRUE(p.fewest_victims_without_medium);
  EXPECT_FALSE(HintAwareNoRulesPolicy().fewest_victims_without_medium);
  ASSERT_TRUE(PolicyFromJson(R"({"fewest_victims_without_medium":false})", &p).ok());
  EXPECT_FALSE(p.fewest_victims_without_medium);
  EXPECT_FALSE(PolicyFromJson(R"({"fewest_victims_without_medium":1})", &p).ok());
}

// pack_high_jobs: a 2-GPU high preemptor can take one cheap low job on node 0, which runs no high
// job, or one dearer low job on node 1, which runs a 2-GPU high job. While a medium job runs (on a
// 1-GPU node the preemptor does not fit) it takes the dearer one and leaves node 0 free of high work
// for a whole-node high job; with the rule off, without a medium job or for a medium preemptor, the
// cheaper one.
TEST(Policy, PackHighJobs) {
  const MediumRuleCase cases[] = {
      {"high, a medium job running: next to the high job", H, true, true, {"dear"}},
      {"high, rule off: the cheaper victim", H, true, false, {"cheap"}},
      {"high, no medium job: the cheaper victim", H, false, true, {"cheap"}},
      {"medium preemptor: the cheaper victim", M, true, true, {"cheap"}}};
  for (const auto& c : cases) {
    B b({4, 4, 1});
    b.run("cheap", L, 2, 0, 3600, MakeHints(100));
    b.run("cheap2", L, 2, 0, 3600, MakeHints(100));
    b.run("high", H, 2, 1, 3600, MakeHints(100));
    b.run("dear", L, 2, 1, 3600, MakeHints(100)).restore_s = 200;  // 2 x 140 s more to restore
    if (c.medium_running) b.run("med", M, 1, 2, 3600, MakeHints(100));
    b.pend("new", c.cls, 2, 7200);
    PolicyOptions p;
    p.pack_high_jobs = c.rule;
    const Decisions d = Decide(b.st, p);
    EXPECT_EQ(SortedVictimsOf(d, "new", c.name), c.victims) << c.name << "\n" << Dump(d);
  }
  PolicyOptions p;
  EXPECT_TRUE(p.pack_high_jobs);
  EXPECT_FALSE(HintAwareNoRulesPolicy().pack_high_jobs);
  ASSERT_TRUE(PolicyFromJson(R"({"pack_high_jobs":false})", &p).ok());
  EXPECT_FALSE(p.pack_high_jobs);
  EXPECT_FALSE(PolicyFromJson(R"({"pack_high_jobs":1})", &p).ok());
}

}  // namespace

}  // namespace preempt::sched
