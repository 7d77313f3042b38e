// Whole nodes kept free for high priority (PolicyOptions::reserved_nodes): who is kept off them,
// for how long, and that high jobs take them at once.
#include <gtest/gtest.h>

#include <string>

#include "policy_test_support.h"
#include "preempt/sched/executor.h"
#include "preempt/sched/policy.h"
#include "preempt/sched/policy_options.h"
#include "preempt/sched/simulator.h"

namespace preempt::sched {
namespace {

using namespace policy_testing;

// The action for `id` in d, checked to be a start on n2 (the last whole node) when there is one.
const JobAction* StartOnTheLastNode(const Decisions& d, const char* id, const char* name) {
  const JobAction* a = find(d, id);
  if (a) {
    EXPECT_EQ(a->kind, ActionKind::kStart) << name;
    EXPECT_EQ(a->node, 2) << name;
  }
  return a;
}

PolicyOptions Reserve() {
  PolicyOptions p = Hint();
  p.reserved_headroom = 0;
  p.reserved_headroom_without_medium = 0;
  p.reserved_nodes = 1;
  p.reserved_nodes_min_restore_gpu_s = 720;
  p.reserved_nodes_high_window_s = 3600;
  p.reserved_nodes_max_wait_s = 0;
  p.reserved_nodes_max_first_wait_without_medium_s = 0;
  return p;
}

// Three 8-GPU nodes; a high job runs on n0 (submitted `high_ago` s ago); two 8-GPU medium jobs
// wait. The first takes n1 (two whole nodes free); the second would take the last whole node.
TEST(Reserve, KeepsCostlyLowerJobsOffTheLastWholeNode) {
  struct Case {
    const char* name;
    double restore_s;
    double high_ago;
    int reserved_nodes;
    bool second_starts;
  };
  const Case cases[] = {
      {"costly to restore, high demand recent: kept off", 100, 600, 1, false},
      {"cheap to restore (8 x 80 s < 720): starts", 80, 600, 1, true},
      {"no high job submitted within the window: starts", 100, 4000, 1, true},
      {"reserve off: starts", 100, 600, 0, true},
      {"two nodes reserved: the first is kept off too", 100, 600, 2, false},
  };
  for (const Case& c : cases) {
    B b({8, 8, 8});
    Job& h = b.run("high", H, 1, 0, 100, MakeHints(10));
    h.submit_time = kNow - c.high_ago;
    b.pend("med1", M, 8, 50).restore_s = c.restore_s;
    b.pend("med2", M, 8, 40).restore_s = c.restore_s;
    PolicyOptions p = Reserve();
    p.reserved_nodes = c.reserved_nodes;
    Decisions d = Decide(b.st, p);
    EXPECT_EQ(find(d, "med1") != nullptr, c.reserved_nodes < 2) << c.name << Dump(d);
    EXPECT_EQ(find(d, "med2") != nullptr, c.second_starts) << c.name << Dump(d);
    for (const JobAction& a : d.actions) EXPECT_EQ(a.kind, ActionKind::kStart) << c.name << Dump(d);  // never preempts
    if (!c.second_starts) {
      EXPECT_DOUBLE_EQ(d.recheck_at, kNow - c.high_ago + 3600) << c.name;  // the reserve lapses
    }
  }
}

// A job kept off the reserved node for reserved_nodes_max_wait_s (pending since it was submitted,
// or requeued by its last preemption) no longer is: the reserve's price, the costly lower jobs'
// wait, is bounded. Three 8-GPU nodes, a recent high job on n0, a costly 8-GPU medium job started
// on n1; a second one waits for n2, the last whole node.
TEST(Reserve, KeepsAJobOffForAtMostTheWaitBound) {
  struct Case {
    const char* name;
    double waited;          // since submitted
    double preempted_ago;   // its last preemption (< 0: never preempted)
    double bound;           // reserved_nodes_max_wait_s
    bool starts;
  };
  const Case cases[] = {
      {"waited less than the bound: kept off", 3000, -1, 7200, false},
      {"waited the bound: starts on the reserved node", 7200, -1, 7200, true},
      {"submitted long ago, requeued recently: kept off", 20000, 600, 7200, false},
      {"no bound: kept off however long it waited", 1e6, -1, 0, false},
  };
  for (const Case& c : cases) {
    B b({8, 8, 8});
    b.run("high", H, 1, 0, 100, MakeHints(10)).submit_time = kNow - 600;
    b.run("med1", M, 8, 1, 100, MakeHints(10)).restore_s = 100;
    Job& m = b.pend("med2", M, 8, c.waited);
    m.restore_s = 100;
    if (c.preempted_ago >= 0) {
      m.last_preempted = kNow - c.preempted_ago;
      m.preemptions = 1;
    }
    PolicyOptions p = Reserve();
    p.reserved_nodes_max_wait_s = c.bound;
    const Decisions d = Decide(b.st, p);
    const JobAction* a = StartOnTheLastNode(d, "med2", c.name);
    EXPECT_EQ(a != nullptr, c.starts) << c.name << "\n" << Dump(d);
    if (!a && c.bound > 0) {
      // Decided again when the bound is reached (or the window lapses, whichever is first).
      const double since = c.preempted_ago >= 0 ? kNow - c.preempted_ago : kNow - c.waited;
      EXPECT_DOUBLE_EQ(d.recheck_at, std::min(since + c.bound, kNow - 600 + 3600)) << c.name;
    }
  }
}

// While no medium job holds or waits for GPUs, the jobs kept off are low jobs, and a job waiting
// for its first start is kept off at most reserved_nodes_max_first_wait_without_medium_s in place
// of reserved_nodes_max_wait_s; one preempted before keeps the longer bound. Three 8-GPU nodes: a
// recent high job on n0, a costly 8-GPU low job on n1; a second one waits for n2, the last whole node.
TEST(Reserve, WithoutMediumWorkAFirstStartWaitsLess) {
  struct Case {
    const char* name;
    double waited;       // since submitted, or since requeued when preempted before
    bool preempted;      // preempted before (requeued `waited` s ago)
    const char* medium;  // "none" | "running" (1 GPU on n0) | "pending" (needs 8)
    double first_bound;  // reserved_nodes_max_first_wait_without_medium_s
    bool starts;
  };
  const Case cases[] = {
      {"no medium work, waited less than 4 h: kept off", 3 * 3600.0, false, "none", 14400, false},
      {"no medium work, waited 4 h: starts on the reserved node", 14400, false, "none", 14400, true},
      {"preempted before, requeued 4 h ago: the day's bound", 14400, true, "none", 14400, false},
      {"preempted before, requeued a day ago: starts", 86400, true, "none", 14400, true},
      {"a medium job running: the day's bound", 14400, false, "running", 14400, false},
      {"a medium job waiting: the day's bound", 14400, false, "pending", 14400, false},
      {"no medium work, bound 0: kept off however long it waited", 80000, false, "none", 0, false},
  };
  for (const Case& c : cases) {
    B b({8, 8, 8});
    b.run("high", H, 1, 0, 100, MakeHints(10)).submit_time = kNow - 600;
    b.run("low1", L, 8, 1, 100, MakeHints(10)).restore_s = 100;
    Job& low = b.pend("low2", L, 8, c.preempted ? 2 * 86400.0 : c.waited);
    low.restore_s = 100;
    if (c.preempted) {
      low.last_preempted = kNow - c.waited;
      low.preemptions = 1;
    }
    if (std::string(c.medium) == "running") b.run("med", M, 1, 0, 100, MakeHints(10));
    if (std::string(c.medium) == "pending") b.pend("med", M, 8, 10).restore_s = 100;
    PolicyOptions p = Reserve();
    p.reserved_nodes_high_window_s = 7 * 86400.0;
    p.reserved_nodes_max_wait_s = 86400;
    p.reserved_nodes_max_first_wait_without_medium_s = c.first_bound;
    const Decisions d = Decide(b.st, p);
    const JobAction* a = StartOnTheLastNode(d, "low2", c.name);
    EXPECT_EQ(a != nullptr, c.starts) << c.name << "\n" << Dump(d);
    if (!a) {
      // Decided again when its bound is reached (unbounded: when the week's window lapses).
      const bool first = std::string(c.medium) == "none" && !c.preempted;
      const double at = !first ? kNow - c.waited + 86400
                        : c.first_bound > 0 ? kNow - c.waited + c.first_bound
                                            : kNow - 600 + 7 * 86400.0;
      EXPECT_DOUBLE_EQ(d.recheck_at, at) << c.name;
    }
  }
}

// On a cluster of 8- and 4-GPU nodes the reserve is of 8-GPU nodes: a free 4-GPU node neither
// counts toward it nor is kept free. n0 (8) is free, n1 (8) holds a 6-GPU high job, n2 (4) is
// free; a costly 8-GPU medium job is kept off n0 (the last free 8-GPU node), a costly 4-GPU one
// takes n2. (Counting n2, the first took n0 and the second was kept off n2.)
TEST(Reserve, ReservesOnlyNodesOfTheLargestSize) {
  B b({8, 8, 4});
  b.run("high", H, 6, 1, 100, MakeHints(10));
  b.pend("med8", M, 8, 50).restore_s = 100;
  b.pend("med4", M, 4, 40).restore_s = 200;  // 4 x 200 s >= 720: costly too
  const Decisions d = Decide(b.st, Reserve());
  EXPECT_EQ(find(d, "med8"), nullptr) << "kept off the last free 8-GPU node\n" << Dump(d);
  const JobAction* small = find(d, "med4");
  ASSERT_NE(small, nullptr) << Dump(d);
  EXPECT_EQ(small->kind, ActionKind::kStart);
  EXPECT_EQ(small->node, 2) << "the free 4-GPU node is not reserved\n" << Dump(d);
  for (const JobAction& a : d.actions) EXPECT_EQ(a.kind, ActionKind::kStart) << Dump(d);
}

// A lower job the reserve binds does not preempt instead: evicting cheap jobs for it would only
// put a costly victim where the next high arrival needs room. Three 8-GPU nodes: n0 holds a high
// job and a cheap low job, n1 a cheap low job; an 8-GPU medium job waits.
TEST(Reserve, BoundLowerJobsWaitInsteadOfPreempting) {
  struct Case {
    const char* name;
    double restore_s, high_ago;
    bool n2_busy;  // a 1-GPU low job on n2: no whole node free at all
    int reserved_nodes;
    const char* outcome;  // "waits" | "starts" (on n2) | "preempts"
  };
  const Case cases[] = {
      {"bound, n2 the last whole node: waits", 100, 600, false, 1, "waits"},
      {"bound, no whole node free: still waits", 100, 600, true, 1, "waits"},
      {"cheap to restore: starts on n2", 80, 600, false, 1, "starts"},
      {"no recent high job: starts on n2", 100, 4000, false, 1, "starts"},
      {"reserve off, no whole node free: preempts", 100, 600, true, 0, "preempts"},
  };
  for (const Case& c : cases) {
    B b({8, 8, 8});
    b.run("high", H, 1, 0, 100, MakeHints(10)).submit_time = kNow - c.high_ago;
    b.run("low0", L, 7, 0, 3600, MakeHints(5));
    b.run("low1", L, 8, 1, 3600, MakeHints(5));
    if (c.n2_busy) b.run("low2", L, 1, 2, 3600, MakeHints(5));
    b.pend("med", M, 8, 50).restore_s = c.restore_s;
    PolicyOptions p = Reserve();
    p.reserved_nodes = c.reserved_nodes;
    Decisions d = Decide(b.st, p);
    const JobAction* med = find(d, "med");
    bool evicts = false;
    for (const JobAction& a : d.actions) evicts |= a.kind == ActionKind::kEvict || a.kind == ActionKind::kRequestCheckpoint;
    const std::string outcome = evicts ? "preempts" : med ? "starts" : "waits";
    EXPECT_EQ(outcome, c.outcome) << c.name << "\n" << Dump(d);
    if (med) {
      EXPECT_EQ(med->node, 2) << c.name;
    }
  }
}

// The victims a lower job evicted leave a whole node: the reserve does not keep their preemptor
// off it (ApplyDecision records the claim on the preemptor), though another lower job stays off.
TEST(Reserve, APreemptorTakesTheNodeItsVictimsLeft) {
  B b({8, 8});
  b.run("high", H, 1, 0, 100, MakeHints(10));
  b.run("low", L, 8, 1, 3600, MakeHints(5));
  b.pend("med", M, 8, 50).restore_s = 100;
  b.pend("other", M, 8, 60).restore_s = 100;
  JobAction evict;
  evict.kind = ActionKind::kEvict;
  evict.job_index = 1;
  evict.node = 1;
  evict.for_job = "med";
  evict.for_index = 2;
  ApplyDecision(evict, kNow, 0, &b.st);
  EXPECT_EQ(b.st.jobs[2].claimed_node, 1);
  EXPECT_EQ(b.st.jobs[3].claimed_node, -1);
  RequeueAfterExit(kNow, &b.st.jobs[1]);
  Decisions d = Decide(b.st, Reserve());
  const JobAction* med = find(d, "med");
  ASSERT_NE(med, nullptr) << Dump(d);
  EXPECT_EQ(med->node, 1);
  EXPECT_EQ(find(d, "other"), nullptr) << Dump(d);  // older, but n1 was not made for it
  JobAction start = *med;
  ApplyDecision(start, kNow, 0, &b.st);
  EXPECT_EQ(b.st.jobs[2].claimed_node, -1);  // cleared once started
  // A move (to_node set) or an action for another job claims nothing.
  B m({8, 8});
  m.run("v", L, 8, 1, 3600, MakeHints(5));
  m.pend("p", M, 8, 50);
  evict.job_index = 0;
  evict.for_index = 1;
  evict.to_node = 0;
  ApplyDecision(evict, kNow, 0, &m.st);
  EXPECT_EQ(m.st.jobs[1].claimed_node, -1);
  m.run("w", L, 8, 0, 3600, MakeHints(5));
  evict.job_index = 2;
  evict.to_node = -1;
  evict.for_job = "someone-else";
  ApplyDecision(evict, kNow, 0, &m.st);
  EXPECT_EQ(m.st.jobs[1].claimed_node, -1);
}

TEST(Reserve, HighJobsTakeTheReservedNodeAtOnce) {
  B b({8, 8});
  b.run("high", H, 1, 0, 100, MakeHints(10));
  b.pend("med", M, 8, 50).restore_s = 100;
  b.pend("big-high", H, 8, 1);
  Decisions d = Decide(b.st, Reserve());
  ASSERT_EQ(d.actions.size(), 1u) << Dump(d);
  EXPECT_EQ(d.actions[0].job, "big-high");
  EXPECT_EQ(d.actions[0].node, 1);
}

TEST(Reserve, ItsDefaultsAreOnAndParsed) {
  PolicyOptions d;
  EXPECT_EQ(d.reserved_nodes, 1);
  EXPECT_EQ(d.reserved_nodes_high_window_s, 7 * 86400.0);
  EXPECT_EQ(d.reserved_nodes_max_wait_s, 86400);
  EXPECT_EQ(d.reserved_nodes_max_first_wait_without_medium_s, 14400);
  EXPECT_EQ(HintAwareNoRulesPolicy().reserved_nodes, 0);
  PolicyOptions p;
  ASSERT_TRUE(PolicyByName("hint-noreserve", &p));
  EXPECT_EQ(p.reserved_nodes, 0);
  ASSERT_TRUE(PolicyFromJson(R"({"reserved_nodes":2,"reserved_nodes_min_restore_gpu_s":0,"reserved_nodes_high_window_s":0,)"
                             R"("reserved_nodes_max_wait_s":0})",
                             &p).ok());
  EXPECT_EQ(p.reserved_nodes, 2);
  EXPECT_EQ(p.reserved_nodes_max_wait_s, 0);
  for (const char* doc : {R"({"reserved_nodes":-1})", R"({"reserved_nodes":1.5})",
                          R"({"reserved_nodes_min_restore_gpu_s":-1})", R"({"reserved_nodes_high_window_s":1e300})",
                          R"({"reserved_nodes_max_wait_s":-1})", R"({"reserved_nodes_max_first_wait_without_medium_s":-1})",
                          R"({"reserved_nodes_max_first_wait_without_medium_s":"4h"})"}) {
    Status s = PolicyFromJson(doc, &p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << doc;
    EXPECT_NE(s.message().find("reserved_nodes"), std::string::npos) << s.to_string();
  }
}

// In the simulator: an 8-GPU high job arriving after an 8-GPU medium job starts at once on the
// node the medium job was kept off, where without the reserve it preempts that job. The medium
// job starts when the reserve lapses (with an hour's window: an hour after the last high
// submission still present) or, with a week's window, when it has waited the bound (30 min).
TEST(Reserve, SimulatedHighJobStartsWithoutAPreemption) {
  Trace t;
  t.name = "reserve";
  t.nodes = {{"n0", 8}, {"n1", 8}};
  // Saves of 0.2 + 0.5 + 5 s, restores of 100 s: 8 GPUs x 100 s is above the 720 GPU-s threshold.
  t.jobs = {SimJobSpec("h0", H, 1, 0, 7200, 0.5, 5, 100), SimJobSpec("m1", M, 8, 10, 10000, 0.5, 5, 100),
            SimJobSpec("h2", H, 8, 600, 1000, 0.5, 5, 100)};
  for (bool indexed : {true, false}) {
    SimOptions so;
    so.indexed = indexed;
    PolicyOptions on, bounded, off;
    ASSERT_TRUE(PolicyByName("hint", &on));
    on.reserved_nodes_high_window_s = 3600;
    on.reserved_nodes_max_wait_s = 0;
    ASSERT_TRUE(PolicyByName("hint", &bounded));
    bounded.reserved_nodes_max_wait_s = 1800;
    ASSERT_TRUE(PolicyByName("hint-noreserve", &off));
    SimResult r_on, r_bounded, r_off;
    ASSERT_TRUE(Simulate(t, on, so, &r_on).ok());
    ASSERT_TRUE(Simulate(t, bounded, so, &r_bounded).ok());
    ASSERT_TRUE(Simulate(t, off, so, &r_off).ok());
    EXPECT_EQ(r_on.metrics.preemptions, 0) << indexed;
    EXPECT_DOUBLE_EQ(r_on.first_start[2], 600) << indexed;  // h2 at once
    EXPECT_NEAR(r_on.first_start[1], 3600, 1) << indexed;    // m1 when the reserve lapses
    EXPECT_EQ(r_bounded.metrics.preemptions, 0) << indexed;
    EXPECT_DOUBLE_EQ(r_bounded.first_start[2], 600) << indexed;
    EXPECT_NEAR(r_bounded.first_start[1], 10 + 1800, 1) << indexed;  // m1 after the bound, h0 still running
    EXPECT_EQ(r_on.metrics.completed, 3);
    EXPECT_GE(r_off.metrics.preemptions, 1) << indexed;      // without it, h2 preempts m1
    EXPECT_DOUBLE_EQ(r_off.first_start[1], 10) << indexed;
  }
}

// In the simulator, with the defaults: an 8-GPU low job, costly to restore, kept off the last
// whole node by a running high job starts there after 4 h on a cluster without medium work, and
// after a day beside a running medium job.
TEST(Reserve, SimulatedLowJobWaitsFourHoursWithoutMediumWork) {
  for (bool with_medium : {false, true}) {
    for (bool indexed : {true, false}) {
      Trace t;
      t.name = "reserve-low";
      t.nodes = {{"n0", 8}, {"n1", 8}};
      t.jobs = {SimJobSpec("h0", H, 1, 0, 200000, 0.5, 5, 100), SimJobSpec("l1", L, 8, 10, 1000, 0.5, 5, 100)};
      if (with_medium) t.jobs.push_back(SimJobSpec("m2", M, 1, 5, 200000, 0.5, 5, 100));
      SimOptions so;
      so.indexed = indexed;
      PolicyOptions p;
      ASSERT_TRUE(PolicyByName("hint", &p));
      SimResult r;
      ASSERT_TRUE(Simulate(t, p, so, &r).ok());
      EXPECT_NEAR(r.first_start[1], 10 + (with_medium ? 86400 : 14400), 1) << with_medium << indexed;
      EXPECT_EQ(r.metrics.preemptions, 0) << with_medium << indexed;
    }
  }
}

}  // namespace
}  // namespace preempt::sched
