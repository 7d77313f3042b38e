// The time-window rule (PolicyOptions::suspend) in Decide() and in the simulator, and the bill per
// queue (QueueBill, gpu_hour_price).
#include <gtest/gtest.h>

#include <string>

#include "preempt/sched/policy.h"
#include "preempt/sched/simulator.h"

namespace preempt::sched {
namespace {

PolicyOptions LowOffFrom2hTo4h() {
  PolicyOptions p;
  EXPECT_TRUE(PolicyFromJson(R"({"suspend":{"class":"low","from_s":7200,"to_s":14400,"period_s":86400}})", &p).ok());
  return p;
}

TEST(SuspendWindow, OpenAndNextChange) {
  SuspendWindow w = LowOffFrom2hTo4h().suspend;
  EXPECT_FALSE(w.open(7199));
  EXPECT_TRUE(w.open(7200));
  EXPECT_TRUE(w.open(86400 + 14399));
  EXPECT_FALSE(w.open(14400));
  EXPECT_EQ(w.next_change(0), 7200);
  EXPECT_EQ(w.next_change(7200), 14400);
  EXPECT_EQ(w.next_change(20000), 86400 + 7200);
  // Wrapping past the period's end: off from 22:00 to 06:00.
  w.from_s = 79200;
  w.to_s = 21600;
  EXPECT_TRUE(w.open(80000));
  EXPECT_TRUE(w.open(86400 + 100));
  EXPECT_FALSE(w.open(50000));
  EXPECT_EQ(w.next_change(80000), 86400 + 21600);
  PolicyOptions p;
  for (const char* bad : {R"({"suspend":{"class":"low","from_s":5,"to_s":5,"period_s":10}})",
                          R"({"suspend":{"class":"lowest","from_s":1,"to_s":5,"period_s":10}})",
                          R"({"suspend":{"class":"low","from_s":1,"to_s":50,"period_s":10}})",
                          R"({"suspend":{"class":"low","from_s":1,"to_s":5}})", R"({"suspend":true})",
                          R"({"gpu_hour_price":[1,2]})", R"({"gpu_hour_price":[-1,2,3]})"}) {
    Status s = PolicyFromJson(bad, &p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(PolicyFromJson(R"({"suspend":"off"})", &p).ok());
  EXPECT_FALSE(p.suspend.on);
  EXPECT_EQ(PolicyFieldValue(LowOffFrom2hTo4h(), "suspend"),
            R"({"class":"low","from_s":7200,"to_s":14400,"period_s":86400})");
}

ClusterState TwoLowJobs(double now) {
  ClusterState st;
  st.now = now;
  st.nodes = {{"n0", 4}};
  Job run;
  run.id = "running";
  run.gpus = 2;
  run.phase = JobPhase::kRunning;
  run.node = 0;
  run.start_time = now - 5000;
  Job wait;
  wait.id = "waiting";
  wait.gpus = 2;
  wait.submit_time = now - 10;
  st.jobs = {run, wait};
  return st;
}

TEST(SuspendWindow, DecideSuspendsTheClassAndResumesIt) {
  const PolicyOptions p = LowOffFrom2hTo4h();
  // Inside the window: the running low job is preempted (nobody waits for its GPUs), the pending one
  // does not start, and the pass asks to be run again when the window closes.
  ClusterState st = TwoLowJobs(8000);
  Decisions d = Decide(st, p);
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0].job, "running");
  EXPECT_NE(d.actions[0].kind, ActionKind::kStart);
  EXPECT_EQ(d.actions[0].for_job, "");
  EXPECT_NE(d.actions[0].reason.find("suspended"), std::string::npos) << d.actions[0].reason;
  EXPECT_EQ(d.recheck_at, 14400);
  // Outside it: the pending job starts, and the pass asks to be run when the window next opens.
  st = TwoLowJobs(20000);
  d = Decide(st, p);
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0].kind, ActionKind::kStart);
  EXPECT_EQ(d.recheck_at, 86400 + 7200);
  // Other classes are not touched; FCFS never preempts.
  st = TwoLowJobs(8000);
  for (Job& j : st.jobs) j.cls = PriorityClass::kMedium;
  EXPECT_EQ(Decide(st, p).actions.size(), 1u);  // the medium job starts
  PolicyOptions fcfs = p;
  fcfs.kind = PolicyKind::kFcfs;
  for (const auto& a : Decide(TwoLowJobs(8000), fcfs).actions) EXPECT_EQ(a.kind, ActionKind::kStart);
}

TEST(SuspendWindow, SimulatorHonoursIt) {
  Trace t;
  t.name = "window";
  t.nodes = {{"n0", 8}};
  TraceJob low;
  low.id = "low";
  low.gpus = 4;
  low.duration_s = 4 * 3600;  // runs from 0 into the window at 2 h
  TraceJob late = low;
  late.id = "late";
  late.submit = 3 * 3600;  // submitted inside the window
  late.duration_s = 600;
  TraceJob high = low;
  high.id = "high";
  high.cls = PriorityClass::kHigh;
  high.submit = 2.5 * 3600;
  high.duration_s = 600;
  t.jobs = {low, late, high};
  for (bool indexed : {true, false}) {
    SimOptions o;
    o.indexed = indexed;
    SimResult r;
    PolicyOptions p = LowOffFrom2hTo4h();
    p.reserved_headroom = 0;  // both low jobs fit at once
    p.reserved_headroom_without_medium = 0;
    ASSERT_TRUE(Simulate(t, p, o, &r).ok());
    EXPECT_TRUE(r.violations.empty()) << r.violations[0];
    EXPECT_EQ(r.preemptions[0], 1);              // suspended once, at 2 h
    EXPECT_GE(r.finish[0], 4 * 3600 + 2 * 3600);  // 2 h of it ran after the window
    EXPECT_EQ(r.first_start[1], 4 * 3600);       // waited for the window to close
    EXPECT_EQ(r.first_start[2], 2.5 * 3600);     // high is not suspended
  }
}

TEST(QueueBill, PricesEachClassPerQueue) {
  Trace t;
  t.name = "bill";
  t.nodes = {{"n0", 8}};
  TraceJob a;
  a.id = "a";
  a.queue = "research";
  a.gpus = 2;
  a.duration_s = 3600;
  TraceJob b = a;
  b.id = "b";
  b.cls = PriorityClass::kHigh;
  b.queue = "prod";
  b.gpus = 4;
  b.duration_s = 1800;
  TraceJob c = a;
  c.id = "c";
  c.cls = PriorityClass::kMedium;
  t.jobs = {a, b, c};
  PolicyOptions p;
  ASSERT_TRUE(PolicyFromJson(R"({"gpu_hour_price":[0.5,0.75,2]})", &p).ok());
  SimResult r;
  ASSERT_TRUE(Simulate(t, p, SimOptions(), &r).ok());
  const std::vector<QueueBill>& bill = r.metrics.bill;
  ASSERT_EQ(bill.size(), 2u);  // by queue name
  EXPECT_EQ(bill[0].queue, "prod");
  EXPECT_DOUBLE_EQ(bill[0].gpu_hours[2], 2.0);  // 4 GPUs x 0.5 h, nothing preempted
  EXPECT_DOUBLE_EQ(bill[0].cost, 4.0);
  EXPECT_EQ(bill[1].queue, "research");
  EXPECT_DOUBLE_EQ(bill[1].gpu_hours[0], 2.0);
  EXPECT_DOUBLE_EQ(bill[1].gpu_hours[1], 2.0);
  EXPECT_DOUBLE_EQ(bill[1].cost, 2 * 0.5 + 2 * 0.75);
  const std::string json = BillJson(r.metrics);
  EXPECT_NE(json.find(R"({"queue":"prod","gpu_hours":[0.0000,0.0000,2.0000],"cost":4.0000})"), std::string::npos)
      << json;
  EXPECT_NE(BillTable({r.metrics}).find("research"), std::string::npos);
}

}  // namespace
}  // namespace preempt::sched
