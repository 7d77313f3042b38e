#include "preempt/sched/policy.h"

#include <algorithm>
#include <vector>

#include "cluster_rules.h"
#include "job_index.h"
#include "moves.h"
#include "pass_state.h"
#include "pass_steps.h"
#include "pending_walk.h"
#include "reasons.h"
#include "victim_cost.h"
#include "victim_search.h"

namespace preempt::sched {
namespace {

// Pending jobs in scheduling order: class (highest first; one class under FCFS), then submit
// time, then id.
std::vector<int> PendingOrder(const ClusterState& st, const PolicyOptions& cfg) {
  const std::vector<Job>& jobs = st.jobs;
  std::vector<int> pending;
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i)
    if (jobs[i].phase == JobPhase::kPending) pending.push_back(i);
  struct Key {
    int cls;
    double submit;
    int index;
  };
  std::vector<Key> keys;
  keys.reserve(pending.size());
  for (int i : pending)
    keys.push_back({cfg.kind == PolicyKind::kFcfs ? 0 : static_cast<int>(jobs[i].cls), jobs[i].submit_time, i});
  std::sort(keys.begin(), keys.end(), [&](const Key& x, const Key& y) {
    if (x.cls != y.cls) return x.cls > y.cls;
    if (x.submit != y.submit) return x.submit < y.submit;
    return jobs[x.index].id < jobs[y.index].id;
  });
  for (size_t k = 0; k < keys.size(); ++k) pending[k] = keys[k].index;
  return pending;
}

// Places the pending jobs of one pass, in order: on free GPUs, where victims have left for them,
// or by preempting (victim search, then moves).
class Placer {
 public:
  Placer(PassState* pass, ClusterRules* rules, const VictimCosts* costs, const Awaiting* awaiting)
      : p_(*pass), rules_(*rules), awaiting_(*awaiting), search_(pass, rules, costs), mover_(pass, rules, costs) {}

  void place(int ji) {
    if (waits(ji) || starts_on_free_gpus(ji) || !may_preempt(ji)) return;
    Choice best;
    WaitCause why = WaitCause::kOther;
    if (search_.find(ji, &best, &why)) {
      take_victims(ji, best);
    } else if (!mover_.try_defrag(ji)) {
      p_.block(ji, why);
    }
  }
  const int* searches() const { return &searches_; }

 private:
  // Done with ji for this pass without placing it: it can never fit, is in its cooldown, restarts
  // after a move, or waits for victims leaving for it (starting when they are gone).
  bool waits(int ji) {
    const Job& j = p_.jobs[ji];
    if (p_.suspended[static_cast<int>(j.cls)]) {  // its class is in its suspension window
      p_.recheck(p_.cfg.suspend.next_change(p_.now));
      p_.block(ji, WaitCause::kOther);
      return true;
    }
    if (j.gpus > p_.max_node || j.gpus <= 0) {  // can never fit
      p_.block(ji, WaitCause::kOther);
      return true;
    }
    if (p_.hint && p_.cfg.cooldown_s > 0 && p_.before(j.last_preempted + p_.cfg.cooldown_s)) return true;
    if (j.move_to >= 0 && j.move_to < p_.n_nodes) {
      // Moved off its node for a high job: restart on the node it was moved to, at once (its own
      // hold released first), or wait while GPUs there are on their way out (victims evicted
      // for it or for another job moved there); if neither, the move's place is gone and it is
      // placed like any pending job.
      const int to = j.move_to;
      p_.set_free(to, p_.free(to) + j.gpus);
      if (p_.free(to) >= j.gpus) {
        p_.start(ji, to, Fmt("moved for a high-priority job; restarting on %s (%d of %d GPUs free)",
                             p_.st.nodes[to].name.c_str(), p_.free(to), p_.st.nodes[to].gpus));
        return true;
      }
      if (p_.leaving_on[to] > 0) {
        p_.set_free(to, p_.free(to) - j.gpus);
        if (j.cls == PriorityClass::kHigh) p_.waiting_high.emplace_back(ji, 0.0);
        return true;
      }
    }
    auto aw = awaiting_.node.find(ji);
    if (aw == awaiting_.node.end()) return false;
    const int node = aw->second;
    if (node >= 0 && p_.free(node) >= j.gpus) {
      p_.start(ji, node, Fmt("victims on %s have left; starting", p_.st.nodes[node].name.c_str()));
    } else if (node >= 0 && withdraws_victims(ji, node)) {
      // started elsewhere; its victims keep running
    } else if (node >= 0) {
      p_.set_free(node, std::max(0, p_.free(node) - j.gpus));  // hold what is already free there
      if (j.cls == PriorityClass::kHigh) p_.waiting_high.emplace_back(ji, awaiting_.left.at(ji));
    }
    return true;
  }

  // ji waits for victims on `node` that are all still checkpointing, but now fits on free GPUs
  // elsewhere (GPUs freed since it chose them): it starts there, and the victims' evictions are
  // withdrawn — they keep running, their requested checkpoints ordinary commits — so nobody pays
  // an eviction, a restore and a wait that no longer buy anything.
  bool withdraws_victims(int ji, int node) {
    auto w = awaiting_.withdrawable.find(ji);
    if (w == awaiting_.withdrawable.end() || w->second.empty()) return false;
    const Job& j = p_.jobs[ji];
    const int other = p_.best_fit(j.gpus);
    if (other < 0 || other == node || !rules_.headroom_allows(j) || rules_.keeps_off_reserved_node(j, other))
      return false;
    // Kept when another pending job of a class above a victim's is not waiting for victims of its
    // own: the victims' GPUs would serve it, and withdrawing would only make it preempt others.
    for (int vi : w->second)
      if (others_above(static_cast<int>(p_.jobs[vi].cls)) > 0) return false;
    for (int vi : w->second)
      p_.withdraw(vi, j.id, ji,
                  Fmt("not evicted after all: %s starts on %s instead; keeps running, its requested checkpoint an "
                      "ordinary commit",
                      j.id.c_str(), p_.st.nodes[other].name.c_str()));
    p_.start(ji, other, Fmt("fits on %s (%d of %d GPUs free) before its victims on %s have left; their evictions "
                            "withdrawn",
                            p_.st.nodes[other].name.c_str(), p_.free(other), p_.st.nodes[other].gpus,
                            p_.st.nodes[node].name.c_str()));
    return true;
  }

  // Pending jobs of a class above `cls` that are not waiting for victims of their own.
  int others_above(int cls) {
    if (awaiting_by_class_[0] < 0) {
      for (int c = 0; c < kNumClasses; ++c) awaiting_by_class_[c] = 0;
      for (const auto& entry : awaiting_.node) awaiting_by_class_[static_cast<int>(p_.jobs[entry.first].cls)]++;
    }
    int n = 0;
    for (int c = cls + 1; c < kNumClasses; ++c) n += p_.pending_by_class[c] - awaiting_by_class_[c];
    return n;
  }

  // Starts ji on the best-fitting free GPUs when the headroom allows (off the whole nodes reserved
  // for high priority). Also true when it would fit and only a reserve stops it: it waits instead
  // of preempting lower work.
  bool starts_on_free_gpus(int ji) {
    const Job& j = p_.jobs[ji];
    const int node = p_.best_fit(j.gpus);
    if (node < 0) return false;  // nothing fits: a reserve holds back only a job that fits
    if (rules_.headroom_allows(j)) {
      // The best fit is a reserved whole node only when every node it fits on is one (the reserve
      // is of the largest nodes, and a partly used node that fits is a better fit): it waits.
      if (rules_.keeps_off_reserved_node(j, node)) return true;
      return start_on(ji, node, "best fit");
    }
    // It fits, but the headroom holds it back: it waits rather than preempting lower work. (A job
    // that fits nowhere may preempt; its victims then only replace non-high GPUs:
    // ClusterRules::feasible.)
    return true;
  }

  bool start_on(int ji, int node, const char* how) {
    p_.start(ji, node, Fmt("fits on %s (%d of %d GPUs free, %s)", p_.st.nodes[node].name.c_str(), p_.free(node),
                           p_.st.nodes[node].gpus, how));
    return true;
  }

  // The policy lets ji preempt now (and the pass has searches left).
  bool may_preempt(int ji) {
    const Job& j = p_.jobs[ji];
    const PolicyOptions& cfg = p_.cfg;
    if (cfg.kind == PolicyKind::kFcfs || !cfg.preempts_lower[static_cast<int>(j.cls)]) {
      p_.block(ji, WaitCause::kOther);
      return false;
    }
    if (p_.hint && j.cls != PriorityClass::kHigh && cfg.nonhigh_preempt_delay_s > 0 &&
        p_.before(j.pending_since() + cfg.nonhigh_preempt_delay_s))
      return false;
    // A lower job the reserve binds (PolicyOptions::reserved_nodes) waits: it does not preempt
    // either, since evicting cheap jobs for it would leave the next high arrival a costly victim.
    // (Checked last: a job that may not search anyway is left alone, as the job index's walk
    // passes it over.)
    if (searches_ >= cfg.max_preemptors_per_pass || rules_.reserve_binds(j)) {
      p_.block(ji, WaitCause::kOther);
      return false;
    }
    ++searches_;
    return true;
  }

  // Emits the victims; the node's free GPUs and the victims' GPUs are now promised to ji.
  void take_victims(int ji, const Choice& best) {
    const Job& j = p_.jobs[ji];
    for (size_t k = 0; k < best.victims.size(); ++k) {
      const int vi = best.victims[k];
      const Job& v = p_.jobs[vi];
      VictimCost vc = p_.hint ? best.costs[k] : VictimCost{};
      if (!p_.hint) {
        vc.lost_gpu_s = v.gpus * (EstimatedLostWork(v, p_.now, p_.cfg) + RestoreOf(v, p_.cfg));
        vc.grace_s = SigtermGrace(v, p_.now, p_.cfg);
      }
      std::string reason = SearchVictimReason(p_, vi, j, best.node, best.count, vc);
      p_.evict(VictimAction(p_, vi, best.node, j.id, ji, vc, std::move(reason)));
      rules_.charge_budget(v, vc);
    }
    p_.set_free(best.node, 0);
    if (j.cls == PriorityClass::kHigh) {
      double left = 0;
      for (const VictimCost& vc : best.costs) left = std::max(left, vc.wait_s);
      p_.waiting_high.emplace_back(ji, left);
    }
  }

  PassState& p_;
  ClusterRules& rules_;
  const Awaiting& awaiting_;
  VictimSearch search_;
  Mover mover_;
  int searches_ = 0;
  int awaiting_by_class_[kNumClasses] = {-1, -1, -1};  // computed on first use
};

}  // namespace

const char* PriorityClassName(PriorityClass c) {
  switch (c) {
    case PriorityClass::kLow: return "low";
    case PriorityClass::kMedium: return "medium";
    case PriorityClass::kHigh: return "high";
  }
  return "low";
}

bool ParsePriorityClass(const std::string& s, PriorityClass* out) {
  for (PriorityClass c : {PriorityClass::kLow, PriorityClass::kMedium, PriorityClass::kHigh}) {
    if (s == PriorityClassName(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

const char* PolicyKindName(PolicyKind k) {
  switch (k) {
    case PolicyKind::kFcfs: return "fcfs";
    case PolicyKind::kKubernetes: return "k8s";
    case PolicyKind::kHintAware: return "hint";
  }
  return "hint";
}

const char* JobPhaseName(JobPhase p) {
  switch (p) {
    case JobPhase::kPending: return "pending";
    case JobPhase::kRunning: return "running";
    case JobPhase::kCheckpointing: return "checkpointing";
    case JobPhase::kEvicting: return "evicting";
  }
  return "pending";
}

const char* WaitCauseName(WaitCause c) {
  switch (c) {
    case WaitCause::kVictimsLeaving: return "victims-leaving";
    case WaitCause::kMinRuntime: return "min-runtime";
    case WaitCause::kBudget: return "budget";
    case WaitCause::kLowShare: return "low-share";
    case WaitCause::kNoVictim: return "no-victim";
    case WaitCause::kOther: return "other";
  }
  return "other";
}

const char* EvictionModeName(EvictionMode m) {
  switch (m) {
    case EvictionMode::kNone: return "none";
    case EvictionMode::kSigterm: return "sigterm";
    case EvictionMode::kSaveInGrace: return "save-in-grace";
    case EvictionMode::kCheckpointFirst: return "checkpoint-first";
    case EvictionMode::kKillCheap: return "kill-cheap";
    case EvictionMode::kKillSmall: return "kill-small";
    case EvictionMode::kKillSlow: return "kill-slow";
    case EvictionMode::kAfterCommit: return "after-commit";
    case EvictionMode::kAfterDeadline: return "after-deadline";
  }
  return "none";
}

const char* ActionKindName(ActionKind k) {
  switch (k) {
    case ActionKind::kStart: return "start";
    case ActionKind::kRequestCheckpoint: return "checkpoint-then-evict";
    case ActionKind::kEvict: return "evict";
    case ActionKind::kWithdraw: return "withdraw";
    case ActionKind::kCheckpointAhead: return "checkpoint-ahead";
  }
  return "start";
}

bool HintsFresh(const Job& job, double now, const PolicyOptions& config) {
  if (!job.hints) return false;
  double age = now - job.hints->updated_unix;
  return age <= config.hints_stale_s;
}

double EstimatedLostWork(const Job& job, double now, const PolicyOptions& config) {
  if (!HintsFresh(job, now, config)) return config.unknown_lost_work_s;
  return job.hints->lost_work_at(now);
}

namespace {

Decisions DecideWith(const ClusterState& st, const JobIndex* index, const PolicyOptions& cfg) {
  PassState pass(st, cfg, index);
  const Awaiting awaiting = EvictCheckpointedVictims(&pass);
  ClusterRules rules(&pass);
  // Only high preemptors' costs follow the guard: without one pending it is not computed.
  const bool high_pending = pass.pending_by_class[static_cast<int>(PriorityClass::kHigh)] > 0;
  const VictimCosts costs(st, cfg, pass.running_on, high_pending && HighWaitAtRisk(st, index, cfg));
  SuspendInWindow(&pass, costs);
  Placer placer(&pass, &rules, &costs, &awaiting);
  if (index) {
    PendingWalk walk(pass, rules, awaiting, *index, placer.searches());
    for (int ji = walk.next(); ji >= 0; ji = walk.next()) placer.place(ji);
  } else {
    for (int ji : PendingOrder(st, cfg)) placer.place(ji);
  }
  RefillHeadroom(&pass, &rules, costs);
  RequestCheckpointsAhead(&pass, &rules, costs);
  if (pass.min_runtime_release < kInf) pass.recheck(pass.min_runtime_release);
  EstimateWaits(&pass, rules);
  return std::move(pass.out);
}

}  // namespace

Decisions Decide(const ClusterState& st, const PolicyOptions& cfg) { return DecideWith(st, nullptr, cfg); }

Decisions DecideIndexed(const ClusterState& st, const JobIndex& index, const PolicyOptions& cfg) {
  return DecideWith(st, &index, cfg);
}

}  // namespace preempt::sched
