// Withdrawn evictions: a victim asked to checkpoint for a pending job is not evicted after all when
// that job fits on GPUs freed elsewhere before the victim has committed.
#include <gtest/gtest.h>

#include <string>

#include "policy_test_support.h"
#include "preempt/sched/executor.h"
#include "preempt/sched/policy.h"
#include "preempt/sched/simulator.h"

namespace preempt::sched {
namespace {

using namespace policy_testing;

// A 1-GPU low job "v" on `node`, asked `asked_ago` s ago (request 3) to checkpoint for `preemptor`.
Job& CheckpointingVictim(B* b, int node, const std::string& preemptor, double asked_ago = 20,
                         Hints hints = MakeHints(400, 100)) {
  Job& v = b->run("v", L, 1, node, 3600, hints);
  v.phase = JobPhase::kCheckpointing;
  v.request_id = 3;
  v.request_time = kNow - asked_ago;
  v.preemptor = preemptor;
  return v;
}

// One victim "v" on n0 checkpointing for the pending high job "h"; n1 free or not.
TEST(Policy, WithdrawnEvictionTable) {
  struct Case {
    const char* name;
    bool n1_free, acked, past_deadline, moved;
    PolicyKind kind;
    bool withdrawn;  // v kept running, h started on n1
    bool other_waiting = false;  // another high job pending, waiting for no victims of its own
  } cases[] = {
      {"still checkpointing, a GPU free on n1: withdrawn, h starts there", true, false, false, false,
       PolicyKind::kHintAware, true},
      {"nothing free elsewhere: h waits for v", false, false, false, false, PolicyKind::kHintAware, false},
      {"v's commit is durable: evicted now, h waits the second it takes", true, true, false, false,
       PolicyKind::kHintAware, false},
      {"v missed its checkpoint deadline: evicted now", true, false, true, false, PolicyKind::kHintAware, false},
      {"v is moved, not preempted: the move goes on", true, false, false, true, PolicyKind::kHintAware, false},
      {"Kubernetes order: never withdraws", true, false, false, false, PolicyKind::kKubernetes, false},
      // h2 (submitted after h) takes n1's free GPU; v's would serve the next high job: kept.
      {"another high job pending: v's GPUs would serve it, kept", true, false, false, false, PolicyKind::kHintAware,
       false, true},
  };
  for (const auto& c : cases) {
    B b({1, 1});
    Hints hv = MakeHints(400, 100);
    hv.request_ack = c.acked ? 3 : 0;
    Job& v = CheckpointingVictim(&b, 0, "h", c.past_deadline ? 400 : 20, hv);
    if (c.moved) v.move_to = 1;
    if (!c.n1_free) b.run("other", H, 1, 1, 3600, MakeHints(10));
    b.pend("h", H, 1, 20);
    if (c.other_waiting) b.pend("h2", H, 1, 10);
    PolicyOptions p = Hint();
    p.kind = c.kind;
    Decisions d = Decide(b.st, p);
    const JobAction* av = find(d, "v");
    const JobAction* ah = find(d, "h");
    if (c.withdrawn) {
      ASSERT_NE(av, nullptr) << c.name << "\n" << Dump(d);
      EXPECT_EQ(av->kind, ActionKind::kWithdraw) << c.name << "\n" << Dump(d);
      EXPECT_EQ(av->for_job, "h") << c.name;
      ASSERT_NE(ah, nullptr) << c.name << "\n" << Dump(d);
      EXPECT_EQ(ah->kind, ActionKind::kStart) << c.name;
      EXPECT_EQ(ah->node, 1) << c.name;
      continue;
    }
    EXPECT_EQ(ah, nullptr) << c.name << "\n" << Dump(d);  // it waits for v
    if (av) {
      EXPECT_EQ(av->kind, ActionKind::kEvict) << c.name << "\n" << Dump(d);
    }
    EXPECT_EQ(av != nullptr, c.acked || c.past_deadline) << c.name << "\n" << Dump(d);
  }
}

// A victim checkpointing to make room for a job that is itself being moved (still evicting on its
// old node, restarting on the victim's node) is awaited by that job though it is not pending:
// not withdrawn. (Withdrawn, the moved job found its place gone and restarted elsewhere.)
TEST(Policy, VictimForAJobOnItsWayIsNotWithdrawn) {
  B b({4, 4});
  CheckpointingVictim(&b, 1, "moved");
  Job& m = b.run("moved", H, 4, 0, 600, MakeHints(10));
  m.phase = JobPhase::kEvicting;
  m.move_to = 1;
  m.preemptor = "big";
  b.run("h1", H, 3, 1, 600, MakeHints(10));
  b.pend("big", H, 4, 20);
  Decisions d = Decide(b.st, Hint());
  EXPECT_EQ(find(d, "v"), nullptr) << Dump(d);  // still checkpointing, still promised
  // Once its commit is durable it is evicted for the moved job.
  b.st.jobs[0].hints->request_ack = 3;
  d = Decide(b.st, Hint());
  const JobAction* av = find(d, "v");
  ASSERT_NE(av, nullptr) << Dump(d);
  EXPECT_EQ(av->kind, ActionKind::kEvict) << Dump(d);
  EXPECT_EQ(av->for_job, "moved");
  // A victim whose preemptor is gone altogether is still withdrawn.
  b.st.jobs[0].hints->request_ack = 0;
  b.st.jobs[1].id = "someone";
  d = Decide(b.st, Hint());
  av = find(d, "v");
  ASSERT_NE(av, nullptr) << Dump(d);
  EXPECT_EQ(av->kind, ActionKind::kWithdraw) << Dump(d);
}

// In the simulator, with moves on: no moved job restarts off the node it was moved to (the
// simulator reports that as a violation), with and without the job index.
TEST(Simulator, MovedJobsRestartWhereTheyWereMoved) {
  SyntheticOptions o;
  o.jobs = 300;
  o.nodes = 4;
  o.gpus_per_node = 8;
  o.load = 1.3;
  PolicyOptions p;
  ASSERT_TRUE(PolicyByName("hint-defrag", &p));
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    o.seed = seed;
    const Trace t = SyntheticTrace(o);
    for (bool indexed : {true, false}) {
      SimOptions so;
      so.indexed = indexed;
      SimResult r;
      ASSERT_TRUE(Simulate(t, p, so, &r).ok());
      EXPECT_TRUE(r.violations.empty()) << seed << " " << indexed << ": " << r.violations[0];
    }
  }
}

// After a withdrawal the job is running again, promised to nobody; nothing is sent to it.
TEST(Policy, WithdrawMakesTheVictimRunningAgain) {
  B b({1, 1});
  CheckpointingVictim(&b, 0, "h");
  b.pend("h", H, 1, 20);
  Decisions d = Decide(b.st, Hint());
  int64_t next_request = 3;
  struct NoCalls final : Executor {
    int calls = 0;
    Status start(const Job&, const JobAction&) override { return Status::OK(); }
    Status request_checkpoint(const Job&, int64_t, const JobAction&) override { return ++calls, Status::OK(); }
    Status evict(const Job&, const JobAction&) override { return ++calls, Status::OK(); }
  } exec;
  ASSERT_TRUE(ExecuteDecisions(d, kNow, &exec, &b.st, &next_request).ok());
  EXPECT_EQ(exec.calls, 0);
  EXPECT_EQ(b.st.jobs[0].phase, JobPhase::kRunning);
  EXPECT_TRUE(b.st.jobs[0].preemptor.empty());
  EXPECT_EQ(b.st.jobs[1].phase, JobPhase::kRunning);
  EXPECT_EQ(b.st.jobs[1].node, 1);
  // The next pass leaves both alone.
  EXPECT_TRUE(Decide(b.st, Hint()).actions.empty()) << Dump(Decide(b.st, Hint()));
}

// In the simulator: a high job waits for a slow saver (checkpoint first, ~100 s); a GPU frees on the
// other node 50 s later. The high job starts there and the saver is never preempted: it finishes
// one stall (0.5 s) later than it would have alone.
TEST(Simulator, FreedGpusElsewhereWithdrawTheEviction) {
  Trace t;
  t.name = "withdraw";
  t.nodes = {{"n0", 1}, {"n1", 1}};
  // a's save ~100.7 s: slower than the 30 s grace; 400 s uncommitted at 1000.
  const TraceJob a = SimJobSpec("a-low", L, 1, 0, 5000, 0.5, 100, 30);
  const TraceJob b = SimJobSpec("b-high", H, 1, 0, 1050, 0.5, 100, 30);  // frees n1 at 1050
  const TraceJob h = SimJobSpec("h-high", H, 1, 1000, 100, 0.5, 100, 30);
  t.jobs = {a, b, h};
  SimOptions o;
  o.eviction_latency_s = 1;
  SimResult r;
  ASSERT_TRUE(Simulate(t, PolicyOptions(), o, &r).ok());
  EXPECT_TRUE(r.violations.empty()) << r.violations[0];
  EXPECT_EQ(r.metrics.checkpoint_requests, 1);  // a was asked to checkpoint for h ...
  EXPECT_EQ(r.metrics.preemptions, 0);          // ... and never evicted
  EXPECT_NEAR(r.first_start[2], 1050, 1e-6);    // h on n1 when b finished
  EXPECT_NEAR(r.finish[0], 5000.5, 1e-6);       // a lost only the stall of the requested checkpoint
}

}  // namespace
}  // namespace preempt::sched
