// Tests of the units Decide() is built from (src/sched: PassState, VictimCosts, ClusterRules,
// TakeUntilFreed, the victim-action builder) and of the shared lifecycle (executor.h).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cluster_rules.h"
#include "pass_state.h"
#include "preempt/sched/executor.h"
#include "reasons.h"
#include "victim_cost.h"
#include "victim_search.h"

namespace preempt::sched {
namespace {

constexpr double kNow = 50000;

Job Running(const std::string& id, PriorityClass cls, int gpus, int node, double started_ago) {
  Job j;
  j.id = id;
  j.cls = cls;
  j.gpus = gpus;
  j.node = node;
  j.phase = JobPhase::kRunning;
  j.start_time = kNow - started_ago;
  j.queue = "q";
  return j;
}

Hints FreshHints(double lost_s, double persist_s, double granted_s) {
  Hints h;
  h.updated_unix = kNow;
  h.lost_work_s = lost_s;
  h.cost.drain_s = 0.1;
  h.cost.stall_s = 0.4;
  h.cost.persist_s = persist_s;
  h.grace.granted_s = granted_s;
  h.grace.needed_s = h.checkpoint_s();
  h.last_commit.step = 10;
  return h;
}

ClusterState TwoNodes() {
  ClusterState st;
  st.now = kNow;
  st.nodes = {{"a", 8}, {"b", 4}};
  st.jobs.push_back(Running("low", PriorityClass::kLow, 2, 0, 1000));
  st.jobs.push_back(Running("med", PriorityClass::kMedium, 4, 1, 10));
  return st;
}

TEST(SchedUnits, TakeUntilFreedDropsUnneededVictims) {
  EXPECT_EQ(TakeUntilFreed({4, 1, 2}, 3), (std::vector<int>{0}));
  EXPECT_EQ(TakeUntilFreed({1, 1, 4}, 4), (std::vector<int>{2}));
  EXPECT_EQ(TakeUntilFreed({1, 2}, 5), (std::vector<int>{0, 1}));  // not enough: all of them
}

TEST(SchedUnits, PassStateTracksFreeGpusAndVersions) {
  ClusterState st = TwoNodes();
  PolicyOptions headroom;
  headroom.reserved_headroom = 0.15;
  headroom.reserved_headroom_without_medium = 0.15;
  PassState p(st, headroom);
  EXPECT_EQ(p.free(0), 6);
  EXPECT_EQ(p.free(1), 0);
  EXPECT_EQ(p.free_sum(), 6);
  EXPECT_EQ(p.best_fit(2), 0);
  EXPECT_EQ(p.best_fit(7), -1);
  EXPECT_EQ(p.placed_by_class[0], 2);
  EXPECT_EQ(p.placed_by_class[1], 4);
  const int v = p.node_version(0);
  p.set_free(0, 1);
  EXPECT_EQ(p.node_version(0), v + 1);
  EXPECT_EQ(p.free_sum(), 1);
  EXPECT_EQ(p.best_fit(1), 0);
  EXPECT_EQ(p.best_fit(2), -1);
  // 15% of 12 GPUs reserved for high priority, rounded down to whole GPUs.
  EXPECT_EQ(p.reserve, 1);
  EXPECT_EQ(p.nonhigh_cap, 11);
}

// Running jobs per node in one array: every node listed (empty ones too), jobs in index order.
TEST(SchedUnits, RunningOnListsEachNodesJobsInOrder) {
  ClusterState st = TwoNodes();
  st.nodes.push_back({"c", 8});
  st.jobs.push_back(Running("low2", PriorityClass::kLow, 1, 0, 500));
  st.jobs.push_back(Running("gone", PriorityClass::kLow, 1, 0, 500));
  st.jobs.back().phase = JobPhase::kEvicting;  // leaving: holds GPUs, not a running job
  const PolicyOptions defaults;
  PassState p(st, defaults);
  ASSERT_EQ(p.running_on.nodes(), 3);
  EXPECT_EQ(p.running_on.total(), 3u);
  EXPECT_EQ(std::vector<int>(p.running_on[0].begin(), p.running_on[0].end()), (std::vector<int>{0, 2}));
  EXPECT_EQ(std::vector<int>(p.running_on[1].begin(), p.running_on[1].end()), (std::vector<int>{1}));
  EXPECT_EQ(p.running_on[2].size(), 0u);
  EXPECT_EQ(p.leaving_on[0], 1);
  EXPECT_EQ(p.free(0), 4);
}

// VictimCosts computes each cost on its first lookup: the same as CostOf, in every variant, and a
// job that is not running reads as the default.
TEST(SchedUnits, VictimCostsLookUpWhatCostOfSays) {
  ClusterState st = TwoNodes();
  st.jobs[0].hints = FreshHints(900, 40, 30);  // a save slower than its grace
  st.jobs[1].hints = FreshHints(20, 2, 30);
  Job pending = Running("p", PriorityClass::kHigh, 1, -1, 0);
  pending.phase = JobPhase::kPending;
  st.jobs.push_back(pending);
  const PolicyOptions cfg;
  PassState p(st, cfg);
  const VictimCosts costs(st, cfg, p.running_on);
  PolicyOptions small = cfg;
  small.high_tolerable_wait = TolerableWait::kOff;
  for (int vi = 0; vi < 2; ++vi) {
    const Job& v = st.jobs[vi];
    for (int rep = 0; rep < 2; ++rep) {  // computed, then read back
      EXPECT_EQ(costs.ordinary()[vi].lost_gpu_s, CostOf(v, kNow, cfg, false).lost_gpu_s);
      EXPECT_EQ(costs.ordinary()[vi].mode, CostOf(v, kNow, cfg, false).mode);
      EXPECT_EQ(costs.for_high(1)[vi].mode, CostOf(v, kNow, small, true).mode);
      EXPECT_EQ(costs.for_high(8)[vi].mode, CostOf(v, kNow, cfg, true, 8).mode);
      EXPECT_EQ(costs.for_high(8)[vi].rank_gpu_s, CostOf(v, kNow, cfg, true, 8).rank_gpu_s);
      EXPECT_EQ(costs.lost_work_s(vi), EstimatedLostWork(v, kNow, cfg));
    }
  }
  EXPECT_EQ(costs.for_high(8)[2].lost_gpu_s, 0);
  EXPECT_EQ(costs.lost_work_s(2), 0);
}

TEST(SchedUnits, VictimCostModes) {
  PolicyOptions cfg = HintAwareNoRulesPolicy();
  Job v = Running("v", PriorityClass::kLow, 2, 0, 1000);
  v.restore_s = 10;
  // No hints: SIGTERM with its own grace, unknown_lost_work_s assumed lost.
  VictimCost none = CostOf(v, kNow, cfg, true);
  EXPECT_EQ(none.mode, EvictionMode::kSigterm);
  EXPECT_DOUBLE_EQ(none.lost_gpu_s, 2 * (cfg.unknown_lost_work_s + 10));
  // A save that fits the grace: SIGTERM, loses the stall and persist plus the restore.
  v.hints = FreshHints(900, 2, 30);
  VictimCost save = CostOf(v, kNow, cfg, true);
  EXPECT_EQ(save.mode, EvictionMode::kSaveInGrace);
  EXPECT_FALSE(save.checkpoint_first);
  EXPECT_DOUBLE_EQ(save.lost_gpu_s, 2 * (0.4 + 2 + 10));
  EXPECT_DOUBLE_EQ(save.wait_s, v.hints->checkpoint_s());
  // Little uncommitted work, high preemptor, kill-now rule on: killed at once.
  cfg.kill_now_max_lost_s = 120;
  v.hints = FreshHints(60, 2, 30);
  VictimCost small = CostOf(v, kNow, cfg, true);
  EXPECT_EQ(small.mode, EvictionMode::kKillSmall);
  EXPECT_EQ(small.grace_s, 0);
  // The same for a medium preemptor saves.
  EXPECT_EQ(CostOf(v, kNow, cfg, false).mode, EvictionMode::kSaveInGrace);
}

// A victim chosen before is dearer in the search (rank), not in the estimate of what it loses.
TEST(SchedUnits, RepeatVictimsRankDearer) {
  PolicyOptions cfg = HintAwareNoRulesPolicy();
  cfg.repeat_victim_weight = 0.5;
  Job v = Running("v", PriorityClass::kLow, 2, 0, 1000);
  v.restore_s = 10;
  v.hints = FreshHints(900, 2, 30);
  VictimCost first = CostOf(v, kNow, cfg, true);
  EXPECT_DOUBLE_EQ(first.rank_gpu_s, first.lost_gpu_s);
  v.preemptions = 2;
  v.moves = 1;
  VictimCost again = CostOf(v, kNow, cfg, true);
  EXPECT_DOUBLE_EQ(again.lost_gpu_s, first.lost_gpu_s);
  EXPECT_DOUBLE_EQ(again.rank_gpu_s, first.lost_gpu_s * (1 + 0.5 * 3));
  EXPECT_DOUBLE_EQ(RepeatFactor(v, KubernetesPolicy()), 1);  // the baselines rank as they always did
}

// Kubernetes order with the runtime: SIGTERM with a grace sized from measured hints, own otherwise.
TEST(SchedUnits, SigtermGraceSizedFromHints) {
  PolicyOptions k8s;
  ASSERT_TRUE(PolicyByName("k8s+runtime", &k8s));
  EXPECT_EQ(k8s.kind, PolicyKind::kKubernetes);
  Job v = Running("v", PriorityClass::kLow, 1, 0, 1000);
  EXPECT_EQ(SigtermGrace(v, kNow, k8s), -1);  // no hints
  v.hints = FreshHints(900, 40, 30);
  EXPECT_DOUBLE_EQ(SigtermGrace(v, kNow, k8s), 1.5 * v.hints->checkpoint_s() + 10);
  EXPECT_EQ(SigtermGrace(v, kNow, KubernetesPolicy()), -1);  // the plain order: its own grace
  v.hints->cost = Hints::Cost{};  // never measured
  EXPECT_EQ(SigtermGrace(v, kNow, k8s), -1);
  // The hint policy with sized grace: a save longer than the job's own 30 s grace fits the sized one.
  PolicyOptions hint = HintAwareNoRulesPolicy();
  hint.victim_grace = VictimGrace::kHintSized;
  v.hints = FreshHints(900, 40, 30);
  VictimCost c = CostOf(v, kNow, hint, false);
  EXPECT_EQ(c.mode, EvictionMode::kSaveInGrace);
  EXPECT_DOUBLE_EQ(c.grace_s, 1.5 * v.hints->checkpoint_s() + 10);
}

// Each earlier preemption or move lengthens the minimum run time after a restart.
TEST(SchedUnits, MinimumRunTimeGrowsWithPreemptions) {
  ClusterState st = TwoNodes();
  st.jobs[0].start_time = kNow - 1000;  // ran 1000 s since its restart
  PolicyOptions cfg;
  cfg.min_runtime_s = 300;
  cfg.min_runtime_per_preemption_s = 900;
  PassState p(st, cfg);
  ClusterRules rules(&p);
  EXPECT_FALSE(rules.in_min_runtime(st.jobs[0], true));  // never preempted: 300 s
  st.jobs[0].preemptions = 1;                                   // 300 + 900 = 1200 s
  EXPECT_TRUE(rules.in_min_runtime(st.jobs[0], true));
  EXPECT_EQ(p.min_runtime_release, kNow + 200);
  st.jobs[0].preemptions = 0;
  st.jobs[0].moves = 1;  // a move counts the same
  EXPECT_TRUE(rules.in_min_runtime(st.jobs[0], false));
}

TEST(SchedUnits, MinimumRunTimeGuard) {
  ClusterState st = TwoNodes();
  st.jobs[1].last_preempted = kNow - 100;  // preempted recently
  PolicyOptions cfg;  // min_runtime_s 300
  PassState p(st, cfg);
  ClusterRules rules(&p);
  EXPECT_FALSE(rules.in_min_runtime(st.jobs[0], true));  // ran 1000 s
  EXPECT_TRUE(rules.in_min_runtime(st.jobs[1], false));  // ran 10 s
  EXPECT_EQ(p.min_runtime_release, kInf);                      // not noted
  EXPECT_TRUE(rules.in_min_runtime(st.jobs[1], true));
  EXPECT_EQ(p.min_runtime_release, kNow + 290);
  // Baselines have no minimum run time.
  const PolicyOptions k8s_cfg = KubernetesPolicy();  // PassState keeps a reference: it must outlive it
  PassState k8s(st, k8s_cfg);
  ClusterRules k8s_rules(&k8s);
  EXPECT_FALSE(k8s_rules.in_min_runtime(st.jobs[1], true));
}

TEST(SchedUnits, BudgetCheckCountsHistoryAndCharges) {
  ClusterState st = TwoNodes();
  st.history = {{kNow - 100, "q", 0.5}, {kNow - 7200, "q", 5}};  // the second is outside the window
  PolicyOptions cfg;
  cfg.budget_max_preemptions = 2;
  PassState p(st, cfg);
  ClusterRules rules(&p);
  VictimCost vc;
  vc.lost_gpu_s = 360;
  EXPECT_FALSE(rules.exceeds_budget({0}, {vc}).has_value());
  rules.charge_budget(st.jobs[0], vc);
  std::optional<std::string> q = rules.exceeds_budget({1}, {vc});
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(*q, "q");
  EXPECT_EQ(p.out.recheck_at, kNow - 100 + cfg.budget_window_s);  // when the oldest leaves the window
  EXPECT_FALSE(rules.feasible(st.jobs[1], {1}, {vc}, 0, 4));
  EXPECT_TRUE(rules.budget_blocked);
  EXPECT_EQ(rules.budget_queue, "q");
}

TEST(SchedUnits, VictimActionBuilder) {
  ClusterState st = TwoNodes();
  const PolicyOptions defaults;
  PassState p(st, defaults);
  VictimCost vc;
  vc.mode = EvictionMode::kCheckpointFirst;
  vc.checkpoint_first = true;
  vc.lost_gpu_s = 42;
  JobAction a = VictimAction(p, 0, 0, "hi", 5, vc, "why", 1);
  EXPECT_EQ(a.kind, ActionKind::kRequestCheckpoint);
  EXPECT_EQ(a.mode, EvictionMode::kCheckpointFirst);
  EXPECT_EQ(a.job, "low");
  EXPECT_EQ(a.job_index, 0);
  EXPECT_EQ(a.for_job, "hi");
  EXPECT_EQ(a.for_index, 5);
  EXPECT_EQ(a.to_node, 1);
  EXPECT_EQ(a.est_lost_gpu_s, 42);
  EXPECT_EQ(a.reason, "why");
  vc.mode = EvictionMode::kKillCheap;
  vc.checkpoint_first = false;
  vc.grace_s = 0;
  a = VictimAction(p, 1, 1, "", -1, vc, "");
  EXPECT_EQ(a.kind, ActionKind::kEvict);
  EXPECT_EQ(a.grace_s, 0);
  EXPECT_EQ(a.to_node, -1);
}

TEST(SchedUnits, FmtIsNotTruncated) {
  std::string long_id(2000, 'x');
  EXPECT_EQ(Fmt("job %s!", long_id.c_str()), "job " + long_id + "!");
}

// The lifecycle every executor shares.
TEST(SchedLifecycle, ApplyDecisionAndRequeue) {
  ClusterState st = TwoNodes();
  Job pending;
  pending.id = "p";
  pending.gpus = 2;
  st.jobs.push_back(pending);
  JobAction start;
  start.kind = ActionKind::kStart;
  start.job_index = 2;
  start.node = 0;
  ApplyDecision(start, kNow, 0, &st);
  EXPECT_EQ(st.jobs[2].phase, JobPhase::kRunning);
  EXPECT_EQ(st.jobs[2].node, 0);
  EXPECT_EQ(st.jobs[2].start_time, kNow);

  JobAction ckpt;
  ckpt.kind = ActionKind::kRequestCheckpoint;
  ckpt.job_index = 0;
  ckpt.for_job = "p";
  ckpt.est_lost_gpu_s = 7200;
  ApplyDecision(ckpt, kNow, 9, &st);
  EXPECT_EQ(st.jobs[0].phase, JobPhase::kCheckpointing);
  EXPECT_EQ(st.jobs[0].request_id, 9);
  EXPECT_EQ(st.jobs[0].preemptor, "p");
  ASSERT_EQ(st.history.size(), 1u);
  EXPECT_EQ(st.history[0].lost_gpu_hours, 2);

  JobAction evict;
  evict.kind = ActionKind::kEvict;
  evict.job_index = 0;
  evict.for_job = "p";
  ApplyDecision(evict, kNow + 5, 0, &st);
  EXPECT_EQ(st.jobs[0].phase, JobPhase::kEvicting);
  EXPECT_EQ(st.history.size(), 1u);  // counted once, at the request

  EXPECT_FALSE(RequeueAfterExit(kNow + 10, &st.jobs[0]));
  EXPECT_EQ(st.jobs[0].phase, JobPhase::kPending);
  EXPECT_EQ(st.jobs[0].preemptions, 1);
  EXPECT_EQ(st.jobs[0].last_preempted, kNow + 10);
  EXPECT_EQ(st.jobs[0].request_id, 0);
  EXPECT_TRUE(st.jobs[0].preemptor.empty());

  evict.job_index = 1;
  evict.to_node = 0;
  ApplyDecision(evict, kNow, 0, &st);
  EXPECT_EQ(st.jobs[1].move_to, 0);
  EXPECT_EQ(st.history.size(), 2u);  // evicted from running: counted now
  EXPECT_TRUE(RequeueAfterExit(kNow + 10, &st.jobs[1]));
  EXPECT_EQ(st.jobs[1].moves, 1);
  EXPECT_EQ(st.jobs[1].preemptions, 0);
  EXPECT_EQ(st.jobs[1].move_to, 0);  // restarts there
}

class RecordingExecutor : public Executor {
 public:
  Status start(const Job& j, const JobAction&) override {
    calls.push_back("start " + j.id);
    return refuse_starts ? Status(StatusCode::kUnavailable, "busy") : Status::OK();
  }
  Status request_checkpoint(const Job& j, int64_t id, const JobAction&) override {
    calls.push_back("request " + j.id + " " + std::to_string(id));
    return Status::OK();
  }
  Status evict(const Job& j, const JobAction&) override {
    calls.push_back("evict " + j.id);
    return Status::OK();
  }
  bool refuse_starts = false;
  std::vector<std::string> calls;
};

TEST(SchedLifecycle, ExecuteDecisionsAppliesWhatTheExecutorAccepted) {
  ClusterState st = TwoNodes();
  Job pending;
  pending.id = "p";
  st.jobs.push_back(pending);
  Decisions d;
  JobAction start;
  start.kind = ActionKind::kStart;
  start.job_index = 2;
  start.node = 0;
  JobAction ckpt;
  ckpt.kind = ActionKind::kRequestCheckpoint;
  ckpt.job_index = 0;
  d.actions = {start, ckpt};
  RecordingExecutor ex;
  ex.refuse_starts = true;
  int64_t next_id = 41;
  Status s = ExecuteDecisions(d, kNow, &ex, &st, &next_id);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(ex.calls, (std::vector<std::string>{"start p", "request low 42"}));
  EXPECT_EQ(st.jobs[2].phase, JobPhase::kPending);  // refused: unchanged
  EXPECT_EQ(st.jobs[0].phase, JobPhase::kCheckpointing);
  EXPECT_EQ(st.jobs[0].request_id, 42);
  EXPECT_EQ(next_id, 42);
}

// docs/sched.md's options table is the one PolicyFieldsMarkdown() generates from the field table.
TEST(SchedOptions, DocsTableIsGeneratedFromTheFieldTable) {
  std::ifstream in(std::string(PREEMPT_SOURCE_DIR) + "/docs/sched.md");
  ASSERT_TRUE(in) << "docs/sched.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string begin = "<!-- policy-fields:begin -->\n", end = "<!-- policy-fields:end -->";
  size_t a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), PolicyFieldsMarkdown())
      << "regenerate the table in docs/sched.md from PolicyFieldsMarkdown()";
}

// Every field of the table parses its own default back, and names itself in --help.
TEST(SchedOptions, EveryFieldRoundTripsItsDefault) {
  const PolicyOptions defaults;
  const std::string help = PolicyFieldsHelp();
  for (const PolicyField& f : PolicyFields()) {
    PolicyOptions p;
    p.kind = PolicyKind::kFcfs;  // changed, so that "kind" is really parsed back
    std::string json = std::string("{\"") + f.name + "\":" + PolicyFieldValue(defaults, f.name) + "}";
    ASSERT_TRUE(PolicyFromJson(json, &p).ok()) << json;
    EXPECT_EQ(PolicyFieldValue(p, f.name), PolicyFieldValue(defaults, f.name)) << f.name;
    EXPECT_NE(help.find(f.name), std::string::npos) << f.name;
  }
}

}  // namespace
}  // namespace preempt::sched
