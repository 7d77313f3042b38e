// policy_test_support.h — cluster-state builders shared by the Decide() tests.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "preempt/sched/policy.h"
#include "preempt/sched/simulator.h"

namespace preempt::sched::policy_testing {

inline constexpr double kNow = 100000;

// A simulator job: `gpus` GPUs for duration_s of training from `submit`; a save of 0.2 s of drain
// + stall_s + persist_s, a restore of restore_s, a periodic commit every 600 s.
inline TraceJob SimJobSpec(std::string id, PriorityClass cls, int gpus, double submit, double duration_s,
                           double stall_s, double persist_s, double restore_s) {
  TraceJob j;
  j.id = std::move(id);
  j.cls = cls;
  j.gpus = gpus;
  j.submit = submit;
  j.duration_s = duration_s;
  j.ckpt_interval_s = 600;
  j.ckpt_drain_s = 0.2;
  j.ckpt_stall_s = stall_s;
  j.ckpt_persist_s = persist_s;
  j.restore_s = restore_s;
  return j;
}

inline Hints MakeHints(double lost_s, double persist_s = 2, double age_s = 0) {
  Hints h;
  h.job = "j";
  h.updated_unix = kNow - age_s;
  h.lost_work_s = lost_s;
  h.cost.drain_s = 0.1;
  h.cost.stall_s = 0.4;
  h.cost.persist_s = persist_s;
  h.last_commit.step = 100;  // has committed: a restart pays the restore
  return h;
}

struct B {  // a small builder for cluster states
  ClusterState st;
  explicit B(std::vector<int> node_gpus) {
    st.now = kNow;
    for (size_t i = 0; i < node_gpus.size(); ++i) st.nodes.push_back({"n" + std::to_string(i), node_gpus[i]});
  }
  Job& run(const std::string& id, PriorityClass c, int gpus, int node, double started_ago, std::optional<Hints> h,
           const std::string& queue = "q") {
    Job j;
    j.id = id;
    j.cls = c;
    j.gpus = gpus;
    j.node = node;
    j.queue = queue;
    j.phase = JobPhase::kRunning;
    j.submit_time = kNow - started_ago - 10;
    j.start_time = kNow - started_ago;
    j.hints = h;
    j.restore_s = 10;
    st.jobs.push_back(j);
    return st.jobs.back();
  }
  Job& pend(const std::string& id, PriorityClass c, int gpus, double waited = 5) {
    Job j;
    j.id = id;
    j.cls = c;
    j.gpus = gpus;
    j.submit_time = kNow - waited;
    st.jobs.push_back(j);
    return st.jobs.back();
  }
};

inline const JobAction* find(const Decisions& d, const std::string& job) {
  for (const auto& a : d.actions)
    if (a.job == job) return &a;
  return nullptr;
}

inline std::string Dump(const Decisions& d) {
  std::string s;
  for (const auto& a : d.actions) s += std::string(ActionKindName(a.kind)) + " " + a.job + " # " + a.reason + "\n";
  return s;
}

inline constexpr auto L = PriorityClass::kLow;
inline constexpr auto M = PriorityClass::kMedium;
inline constexpr auto H = PriorityClass::kHigh;

inline PolicyOptions Hint() {
  PolicyOptions c = HintAwareNoRulesPolicy();
  c.kill_now_max_lost_s = 0;  // the kill-now rule has its own tests (KillNow*); these test the rest
  return c;
}

}  // namespace preempt::sched::policy_testing
