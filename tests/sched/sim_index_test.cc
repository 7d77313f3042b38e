// The indexed pass (src/sched/job_index.h) against the pass that reads every job: the same
// simulation, job by job, for every policy and for settings that exercise each way a group of
// pending jobs is passed over (no fit, the reserve, no searches left, classes that may not preempt).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "preempt/sched/simulator.h"

namespace preempt::sched {
namespace {

void ExpectSameRun(const Trace& t, const PolicyOptions& p, const std::string& what) {
  SimOptions indexed, plain;
  plain.indexed = false;
  SimResult a, b;
  ASSERT_TRUE(Simulate(t, p, indexed, &a).ok());
  ASSERT_TRUE(Simulate(t, p, plain, &b).ok());
  ASSERT_EQ(a.first_start.size(), b.first_start.size());
  for (size_t i = 0; i < a.first_start.size(); ++i) {
    ASSERT_EQ(a.first_start[i], b.first_start[i]) << what << " job " << t.jobs[i].id;
    ASSERT_EQ(a.finish[i], b.finish[i]) << what << " job " << t.jobs[i].id;
    ASSERT_EQ(a.preemptions[i], b.preemptions[i]) << what << " job " << t.jobs[i].id;
  }
  const SimMetrics &x = a.metrics, &y = b.metrics;
  EXPECT_EQ(x.decisions, y.decisions) << what;
  EXPECT_EQ(x.preemptions, y.preemptions) << what;
  EXPECT_EQ(x.moves, y.moves) << what;
  EXPECT_EQ(x.checkpoint_requests, y.checkpoint_requests) << what;
  EXPECT_EQ(x.thrash_cycles, y.thrash_cycles) << what;
  EXPECT_EQ(x.lost_gpu_hours, y.lost_gpu_hours) << what;
  EXPECT_EQ(x.high_wait_p95_s, y.high_wait_p95_s) << what;
  for (int k = 0; k < SimMetrics::kCauses; ++k) {
    // Under FCFS the indexed run charges a blocked job's wait at its start (one sum, not one per pass).
    EXPECT_NEAR(x.high_wait_cause_s[k], y.high_wait_cause_s[k], 1e-6 * (1 + std::fabs(y.high_wait_cause_s[k])))
        << what << " cause " << SimWaitCauseName(k);
  }
  EXPECT_TRUE(a.violations.empty()) << what << ": " << a.violations[0];
}

Trace Busy(uint64_t seed, int nodes, double load) {
  SyntheticOptions o;
  o.seed = seed;
  o.jobs = 500;
  o.nodes = nodes;
  o.gpus_per_node = 8;
  o.load = load;
  return SyntheticTrace(o);
}

TEST(IndexedPass, SameRunAsReadingEveryJob) {
  for (uint64_t seed : {1}) {
    const Trace t = Busy(seed, 4, 1.6);
    for (const char* name : {"fcfs", "k8s", "hint-norules", "hint-ckpt", "hint", "hint-nodefrag", "hint-refill", "hint-noreserve"}) {
      PolicyOptions p;
      ASSERT_TRUE(PolicyByName(name, &p));
      ExpectSameRun(t, p, std::string(name) + " seed " + std::to_string(seed));
    }
  }
}

TEST(IndexedPass, SameRunWhenSearchesRunOutAndLowPreempts) {
  const Trace t = Busy(3, 3, 2.0);
  PolicyOptions p;
  ASSERT_TRUE(PolicyByName("hint", &p));
  p.max_preemptors_per_pass = 2;
  p.preempts_lower[0] = true;  // low preempts nothing lower, but searches
  ExpectSameRun(t, p, "hint, 2 searches");
  p.nonhigh_preempt_delay_s = 0;
  p.cooldown_s = 0;
  ExpectSameRun(t, p, "hint, 2 searches, no windows");
  p.reserved_headroom = 0.4;
  p.reserved_headroom_without_medium = 0.4;
  p.low_guaranteed_share = 0.2;
  ExpectSameRun(t, p, "hint, large reserve");
  p.headroom_high_window_s = 0;  // kept free always, low restarts into it
  ExpectSameRun(t, p, "hint, large reserve kept free");
  p.headroom_low_restarts = false;
  ExpectSameRun(t, p, "hint, large reserve kept free, no low restarts");
  p.headroom_low_wait_s = 0;
  ExpectSameRun(t, p, "hint, large reserve kept free, no low job enters");
  p.headroom_low_wait_s = 1800;  // low jobs enter after half an hour (rechecked then)
  ExpectSameRun(t, p, "hint, large reserve kept free, low jobs enter after a wait");
  p.headroom_low_restarts = true;
  ExpectSameRun(t, p, "hint, large reserve kept free, low restarts and waits");
  p.headroom_low_wait_s = 14400;
  p.headroom_high_window_s = 3600;
  p.headroom_low_restarts = true;
  ASSERT_TRUE(PolicyFromJson(R"({"suspend":{"class":"medium","from_s":20000,"to_s":50000,"period_s":86400}})", &p).ok());
  ExpectSameRun(t, p, "hint, medium suspended in a window");
  ASSERT_TRUE(PolicyByName("k8s", &p));
  p.max_preemptors_per_pass = 1;
  ExpectSameRun(t, p, "k8s, 1 search");
}

}  // namespace
}  // namespace preempt::sched
