// Whole nodes kept free for high priority (PolicyOptions::reserved_nodes): who is kept off them,
// for how long, and that high jobs take them at once.
#include <gtest/gtest.h>

#include "policy_test_support.h"
#include "preempt/sched/policy.h"
#include "preempt/sched/policy_options.h"
#include "preempt/sched/simulator.h"

namespace preempt::sched {
namespace {

using namespace policy_testing;

PolicyOptions Reserve() {
  PolicyOptions p = Hint();
  p.reserved_headroom = 0;
  p.reserved_nodes = 1;
  p.reserved_nodes_min_restore_gpu_s = 720;
  p.reserved_nodes_high_window_s = 3600;
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
    if (!c.second_starts) EXPECT_DOUBLE_EQ(d.recheck_at, kNow - c.high_ago + 3600) << c.name;  // the reserve lapses
  }
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

TEST(Reserve, SmallerLowerJobsUsePartlyUsedNodesInstead) {
  // n0: 4 GPUs, all free (the only whole free node); n1: 8 GPUs, 2 used by a high job. A 4-GPU
  // medium job costly to restore fits best on n0, which is reserved: it starts on n1.
  B b({4, 8});
  b.run("high", H, 2, 1, 100, MakeHints(10));
  b.pend("med", M, 4, 50).restore_s = 200;
  Decisions d = Decide(b.st, Reserve());
  const JobAction* a = find(d, "med");
  ASSERT_NE(a, nullptr) << Dump(d);
  EXPECT_EQ(a->node, 1);
  EXPECT_NE(a->reason.find("off the reserved nodes"), std::string::npos) << a->reason;
  // Without the reserve it takes the best fit.
  PolicyOptions off = Reserve();
  off.reserved_nodes = 0;
  d = Decide(b.st, off);
  ASSERT_NE(find(d, "med"), nullptr) << Dump(d);
  EXPECT_EQ(find(d, "med")->node, 0);
}

TEST(Reserve, ItsDefaultsAreOnAndParsed) {
  PolicyOptions d;
  EXPECT_EQ(d.reserved_nodes, 1);
  EXPECT_EQ(HintAwareNoRulesPolicy().reserved_nodes, 0);
  PolicyOptions p;
  ASSERT_TRUE(PolicyByName("hint-noreserve", &p));
  EXPECT_EQ(p.reserved_nodes, 0);
  ASSERT_TRUE(PolicyFromJson(R"({"reserved_nodes":2,"reserved_nodes_min_restore_gpu_s":0,"reserved_nodes_high_window_s":0})",
                             &p).ok());
  EXPECT_EQ(p.reserved_nodes, 2);
  for (const char* doc : {R"({"reserved_nodes":-1})", R"({"reserved_nodes":1.5})",
                          R"({"reserved_nodes_min_restore_gpu_s":-1})", R"({"reserved_nodes_high_window_s":1e300})"}) {
    Status s = PolicyFromJson(doc, &p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << doc;
    EXPECT_NE(s.message().find("reserved_nodes"), std::string::npos) << s.to_string();
  }
}

// In the simulator: an 8-GPU high job arriving after an 8-GPU medium job starts at once on the
// node the medium job was kept off, where without the reserve it preempts that job. The medium
// job starts when the reserve lapses (an hour after the last high submission still present).
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
    PolicyOptions on, off;
    ASSERT_TRUE(PolicyByName("hint", &on));
    ASSERT_TRUE(PolicyByName("hint-noreserve", &off));
    SimResult r_on, r_off;
    ASSERT_TRUE(Simulate(t, on, so, &r_on).ok());
    ASSERT_TRUE(Simulate(t, off, so, &r_off).ok());
    EXPECT_EQ(r_on.metrics.preemptions, 0) << indexed;
    EXPECT_DOUBLE_EQ(r_on.first_start[2], 600) << indexed;  // h2 at once
    EXPECT_NEAR(r_on.first_start[1], 3600, 1) << indexed;    // m1 when the reserve lapses
    EXPECT_EQ(r_on.metrics.completed, 3);
    EXPECT_GE(r_off.metrics.preemptions, 1) << indexed;      // without it, h2 preempts m1
    EXPECT_DOUBLE_EQ(r_off.first_start[1], 10) << indexed;
  }
}

}  // namespace
}  // namespace preempt::sched
