#include "preempt/sched/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

namespace preempt::sched {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  const int n = vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

double FullRestoreOf(const Job& j, const PolicyConfig& c) { return j.restore_s >= 0 ? j.restore_s : c.restore_s; }
// Restore time a restart after an eviction now costs: nothing when the job never committed
// (it restarts from scratch).
double RestoreOf(const Job& j, const PolicyConfig& c) {
  if (j.hints && j.hints->last_commit.step < 0) return 0;
  return FullRestoreOf(j, c);
}

// What preempting a victim would cost, and how it would leave.
struct VictimCost {
  EvictionMode mode = EvictionMode::kSigterm;
  bool checkpoint_first = false;
  double lost_gpu_s = 0;  // GPU-seconds lost including the restore
  double wait_s = 0;      // how long the preemptor waits for this victim (expected save time)
  double grace_s = -1;    // for the evict action
  double save_s = 0;      // expected save time when it saves (unknown_save_s when not measured)
};

// The longest a high preemptor should wait for victim v's save (0 = no limit): a fixed value, or
// what Kubernetes would make it wait at most, the victim's termination grace period.
double TolerableWait(const Job& v, const PolicyConfig& c) {
  if (c.high_tolerable_wait_s >= 0) return c.high_tolerable_wait_s;
  return v.hints ? v.hints->grace.granted_s : 0;
}

VictimCost CostOf(const Job& v, double now, const PolicyConfig& c, bool for_high) {
  VictimCost out;
  double lost = EstimatedLostWork(v, now, c);
  bool fresh = HintsFresh(v, now, c);
  bool saves = false;  // leaves a fresh commit behind
  if (c.kind == PolicyKind::kHintAware && fresh) {
    const Hints& h = *v.hints;
    // Saving (on SIGTERM or on request) loses the GPU time from the snapshot to the eviction:
    // the stall (training paused to copy the state) and the persist (on SIGTERM the job has
    // stopped; on request its progress meanwhile is thrown away by the eviction). It is worth it
    // when that is less than what is uncommitted now.
    // A cost of zero was never measured (the runtime publishes zeros until its first
    // checkpoint): unknown, so assumed to be unknown_save_s, never free.
    const bool measured = h.checkpoint_s() > 0;
    double save_lost = measured ? h.cost.stall_s + h.cost.persist_s : c.unknown_save_s;
    double save_wait = measured ? h.checkpoint_s() : c.unknown_save_s;
    out.save_s = save_wait;
    double needed = std::max(h.grace.needed_s, save_wait);
    bool sig_ok = c.sigterm_save && h.grace.granted_s > 0 && needed <= h.grace.granted_s;
    bool ckpt_ok = c.checkpoint_then_evict && save_wait <= c.checkpoint_deadline_s;
    double tolerable = TolerableWait(v, c);
    bool too_slow = for_high && tolerable > 0 && save_wait > tolerable &&
                    (c.tolerable_kill_max_lost_s <= 0 || lost <= c.tolerable_kill_max_lost_s);
    if (too_slow) sig_ok = ckpt_ok = false;
    if (for_high && c.kill_now_max_lost_s > 0 && lost <= c.kill_now_max_lost_s) {
      out.mode = EvictionMode::kKillSmall;
      out.grace_s = 0;
    } else if ((save_lost < lost || !c.kill_when_cheaper) && (sig_ok || ckpt_ok)) {
      out.mode = sig_ok ? EvictionMode::kSaveInGrace : EvictionMode::kCheckpointFirst;
      out.checkpoint_first = !sig_ok;
      lost = save_lost;
      out.wait_s = save_wait;
      saves = true;
    } else {
      out.mode = too_slow && save_lost < lost ? EvictionMode::kKillSlow : EvictionMode::kKillCheap;
      out.grace_s = 0;
    }
  }
  // A job that saves first has a commit to restore from, whatever it had before.
  out.lost_gpu_s = v.gpus * (lost + (saves ? FullRestoreOf(v, c) : RestoreOf(v, c)));
  return out;
}

// Victim sets: candidates are taken in the order given until `need` GPUs are freed, then the
// latest-taken ones that turn out not to be needed are dropped again. Returns the kept positions.
std::vector<int> TakeUntilFreed(const std::vector<int>& gpus_in_order, int need) {
  std::vector<int> taken;
  int freed = 0;
  for (int k = 0; k < static_cast<int>(gpus_in_order.size()) && freed < need; ++k) {
    taken.push_back(k);
    freed += gpus_in_order[k];
  }
  for (int t = static_cast<int>(taken.size()) - 1; t >= 0; --t) {
    if (freed - gpus_in_order[taken[t]] >= need) {
      freed -= gpus_in_order[taken[t]];
      taken.erase(taken.begin() + t);
    }
  }
  return taken;
}

// How a victim leaves, for reasons.
const char* HowText(const VictimCost& vc) {
  if (vc.checkpoint_first) return "checkpoint first";
  switch (vc.mode) {
    case EvictionMode::kSaveInGrace: return "SIGTERM, saves within its grace";
    case EvictionMode::kKillCheap: return "kill now (less uncommitted than a save loses)";
    case EvictionMode::kKillSlow: return "kill now (save too slow)";
    case EvictionMode::kKillSmall: return "kill now (little uncommitted work)";
    default: return "SIGTERM with its own grace";
  }
}

struct Budget {
  int count = 0;
  double lost_gpu_h = 0;
  double oldest = kInf;  // oldest record in window
};

// Per-node victim choice result.
struct Choice {
  int node = -1;
  std::vector<int> victims;  // job indices
  std::vector<VictimCost> costs;
  // Ranking keys.
  int max_class = -1;
  double cost = kInf;          // hint-aware: lost GPU-s + preemptor GPU-s waiting
  double lost_work_gpu_s = 0;  // hint-aware tie-break: raw uncommitted work
  int count = 0;
  double latest_start = -kInf;  // k8s: start time of the most recently started highest-priority victim
  int low_taken = 0, freed_gpus = 0;  // for the cluster-wide checks (low share, headroom, budget)
};

bool BetterChoice(const Choice& a, const Choice& b, PolicyKind kind) {
  if (b.node < 0) return true;
  if (a.max_class != b.max_class) return a.max_class < b.max_class;
  if (kind == PolicyKind::kKubernetes) {
    if (a.count != b.count) return a.count < b.count;
    if (a.latest_start != b.latest_start) return a.latest_start > b.latest_start;
    return a.node < b.node;
  }
  if (std::fabs(a.cost - b.cost) > 1e-9) return a.cost < b.cost;
  if (std::fabs(a.lost_work_gpu_s - b.lost_work_gpu_s) > 1e-9) return a.lost_work_gpu_s < b.lost_work_gpu_s;
  if (a.count != b.count) return a.count < b.count;
  return a.node < b.node;
}

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
  }
  return "start";
}

PolicyConfig FcfsPolicy() {
  PolicyConfig c = HintAwareNoRulesPolicy();
  c.kind = PolicyKind::kFcfs;
  c.checkpoint_then_evict = false;
  return c;
}

PolicyConfig KubernetesPolicy() {
  PolicyConfig c = HintAwareNoRulesPolicy();
  c.kind = PolicyKind::kKubernetes;
  c.checkpoint_then_evict = false;
  return c;
}

PolicyConfig HintAwareNoRulesPolicy() {
  PolicyConfig c;
  c.kind = PolicyKind::kHintAware;
  c.min_runtime_s = 0;
  c.cooldown_s = 0;
  c.budget_max_preemptions = 0;
  c.budget_max_lost_gpu_hours = 0;
  c.reserved_headroom = 0;
  c.refill_headroom = false;
  c.low_guaranteed_share = 0;
  c.nonhigh_preempt_delay_s = 0;
  c.defrag_max_moves = 0;
  return c;
}

bool HintsFresh(const Job& job, double now, const PolicyConfig& config) {
  if (!job.hints) return false;
  double age = now - job.hints->updated_unix;
  return age <= config.hints_stale_s;
}

double EstimatedLostWork(const Job& job, double now, const PolicyConfig& config) {
  if (!HintsFresh(job, now, config)) return config.unknown_lost_work_s;
  return job.hints->LostWorkAt(now);
}

Decisions Decide(const ClusterState& st, const PolicyConfig& cfg) {
  Decisions out;
  const double now = st.now;
  const int n_nodes = static_cast<int>(st.nodes.size());
  const auto& jobs = st.jobs;
  const bool hint = cfg.kind == PolicyKind::kHintAware;

  std::vector<int> free(n_nodes);
  int total_gpus = 0, max_node = 0;
  for (int i = 0; i < n_nodes; ++i) {
    free[i] = st.nodes[i].gpus;
    total_gpus += st.nodes[i].gpus;
    max_node = std::max(max_node, st.nodes[i].gpus);
  }
  int placed_by_class[kNumClasses] = {0, 0, 0};
  std::vector<std::vector<int>> running_on(n_nodes);
  std::vector<int> leaving_on(n_nodes, 0);  // GPUs of jobs checkpointing or evicting there
  // Job index by id, only for jobs someone is waiting on (victims name their preemptor).
  std::unordered_map<std::string, int> index_of;
  bool any_leaving = false;
  for (const Job& j : jobs) any_leaving |= j.phase == JobPhase::kCheckpointing || j.phase == JobPhase::kEvicting;
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i) {
    const Job& j = jobs[i];
    if (any_leaving && j.phase == JobPhase::kPending) index_of.emplace(j.id, i);
    if (j.phase == JobPhase::kPending || j.node < 0 || j.node >= n_nodes) continue;
    free[j.node] -= j.gpus;
    placed_by_class[static_cast<int>(j.cls)] += j.gpus;
    if (j.phase == JobPhase::kRunning) running_on[j.node].push_back(i);
    else leaving_on[j.node] += j.gpus;
  }
  // Jobs being moved (or moved and not yet restarted) hold their GPUs on the node they restart on.
  for (const Job& j : jobs) {
    if (j.move_to >= 0 && j.move_to < n_nodes && j.phase != JobPhase::kRunning) free[j.move_to] -= j.gpus;
  }

  // 1. Victims already asked to checkpoint: evict once the commit shows, or at the deadline.
  //    Preemptors with victims in flight wait on those victims' node.
  std::unordered_map<int, int> awaiting_node;      // preemptor index -> node
  std::unordered_map<int, double> awaiting_left;   // preemptor index -> expected seconds left
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i) {
    const Job& j = jobs[i];
    if (j.phase != JobPhase::kCheckpointing && j.phase != JobPhase::kEvicting) continue;
    auto p = index_of.find(j.preemptor);
    if (p != index_of.end() && jobs[p->second].phase == JobPhase::kPending) {
      awaiting_node[p->second] = j.node;
      double left = 0;  // expected time until this victim's commit is durable
      if (j.phase == JobPhase::kCheckpointing && j.hints)
        left = std::max(0.0, j.request_time + j.hints->checkpoint_s() - now);
      double& w = awaiting_left[p->second];
      w = std::max(w, left);
    }
    if (j.phase != JobPhase::kCheckpointing) continue;
    JobAction a;
    a.kind = ActionKind::kEvict;
    a.job = j.id;
    a.job_index = i;
    a.node = j.node;
    a.for_job = j.preemptor;
    a.for_index = p != index_of.end() ? p->second : -1;
    bool acked = j.hints && j.hints->request_ack >= j.request_id;
    a.mode = acked ? EvictionMode::kAfterCommit : EvictionMode::kAfterDeadline;
    if (acked) {
      a.est_lost_gpu_s = j.gpus * (EstimatedLostWork(j, now, cfg) + RestoreOf(j, cfg));
      // The commit is durable: kill at once rather than wait for a second save on SIGTERM.
      if (hint && cfg.kill_after_commit) a.grace_s = 0;
      a.reason = Fmt("checkpoint request %lld acknowledged, commit at step %lld is durable; %s for %s",
                     static_cast<long long>(j.request_id), static_cast<long long>(j.hints->last_commit.step),
                     a.grace_s == 0 ? "killing now" : "evicting", j.preemptor.c_str());
      out.actions.push_back(std::move(a));
    } else if (now >= j.request_time + cfg.checkpoint_deadline_s) {
      a.est_lost_gpu_s = j.gpus * (EstimatedLostWork(j, now, cfg) + RestoreOf(j, cfg));
      a.reason = Fmt("checkpoint request %lld not committed within %.0f s deadline; evicting now for %s",
                     static_cast<long long>(j.request_id), cfg.checkpoint_deadline_s, j.preemptor.c_str());
      out.actions.push_back(std::move(a));
    } else {
      out.recheck_at = std::min(out.recheck_at, j.request_time + cfg.checkpoint_deadline_s);
    }
  }

  // 2. Pending jobs in scheduling order.
  std::vector<int> pending;
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i)
    if (jobs[i].phase == JobPhase::kPending) pending.push_back(i);
  {
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
  }

  // Best-fit index: (free, node).
  std::set<std::pair<int, int>> by_free;
  for (int i = 0; i < n_nodes; ++i)
    if (free[i] > 0) by_free.emplace(free[i], i);
  std::vector<int> node_version(n_nodes, 0);
  int free_sum = 0;
  for (int i = 0; i < n_nodes; ++i) free_sum += std::max(0, free[i]);
  auto set_free = [&](int node, int value) {
    if (free[node] > 0) by_free.erase({free[node], node});
    free_sum += std::max(0, value) - std::max(0, free[node]);
    node_version[node]++;
    free[node] = value;
    if (value > 0) by_free.emplace(value, node);
  };

  // Preemption budget per queue: history inside the window.
  std::map<std::string, Budget> budget;
  const bool budget_on = hint && cfg.budget_window_s > 0 &&
                         (cfg.budget_max_preemptions > 0 || cfg.budget_max_lost_gpu_hours > 0);
  if (budget_on) {
    for (const auto& r : st.history) {
      if (r.time <= now - cfg.budget_window_s || r.time > now) continue;
      Budget& b = budget[r.queue];
      b.count++;
      b.lost_gpu_h += r.lost_gpu_hours;
      b.oldest = std::min(b.oldest, r.time);
    }
  }
  // Whole GPUs: the reserve rounds down, so a one-slot machine reserves nothing.
  const double nonhigh_cap = hint ? total_gpus - std::floor(cfg.reserved_headroom * total_gpus) : kInf;
  const double low_share = hint ? std::floor(cfg.low_guaranteed_share * total_gpus) : 0;
  const int reserve = hint ? static_cast<int>(std::floor(cfg.reserved_headroom * total_gpus)) : 0;
  // GPUs of victims on their way out that nobody is waiting for (headroom refills): they count
  // as free for the reserve, so the reserve is not refilled twice.
  int leaving_unclaimed = 0;
  for (const Job& j : jobs) {
    if ((j.phase == JobPhase::kCheckpointing || j.phase == JobPhase::kEvicting) && j.preemptor.empty())
      leaving_unclaimed += j.gpus;
  }
  std::vector<char> chosen(jobs.size(), 0);
  int searches = 0;
  double min_runtime_release = kInf;   // earliest time a protected lower job becomes preemptible
  bool budget_blocked = false;
  std::string budget_queue;
  std::vector<std::pair<int, WaitCause>> blocked_high;
  std::vector<std::pair<int, double>> waiting_high;  // high jobs waiting for their victims: (job, s left)

  auto start_job = [&](int ji, int node, const std::string& why) {
    const Job& j = jobs[ji];
    JobAction a;
    a.kind = ActionKind::kStart;
    a.job = j.id;
    a.job_index = ji;
    a.node = node;
    a.reason = why;
    out.actions.push_back(std::move(a));
    set_free(node, free[node] - j.gpus);
    placed_by_class[static_cast<int>(j.cls)] += j.gpus;
  };

  // Per running job, computed once: uncommitted work and the cost of preempting it.
  std::vector<double> lostw(jobs.size(), 0);
  std::vector<VictimCost> vcost(jobs.size()), vcost_high(jobs.size());
  // High preemptors of fewer than tolerable_wait_min_gpus GPUs wait for slow savers: their own
  // victim costs, without the tolerable-wait kills.
  const bool split_high = hint && cfg.tolerable_wait_min_gpus > 1 && cfg.high_tolerable_wait_s != 0;
  std::vector<VictimCost> vcost_high_small(split_high ? jobs.size() : 0);
  PolicyConfig cfg_small = cfg;
  cfg_small.high_tolerable_wait_s = 0;
  auto high_costs = [&](int gpus) -> const std::vector<VictimCost>& {
    return split_high && gpus < cfg.tolerable_wait_min_gpus ? vcost_high_small : vcost_high;
  };
  for (int node = 0; node < n_nodes; ++node) {
    for (int vi : running_on[node]) {
      lostw[vi] = EstimatedLostWork(jobs[vi], now, cfg);
      if (cfg.kind != PolicyKind::kFcfs) {
        vcost[vi] = CostOf(jobs[vi], now, cfg, false);
        vcost_high[vi] = CostOf(jobs[vi], now, cfg, true);
        if (split_high) vcost_high_small[vi] = CostOf(jobs[vi], now, cfg_small, true);
      }
    }
  }
  // A high job that has waited past high_min_runtime_override_s may take victims inside their
  // minimum run time.
  auto overrides_min_runtime = [&](const Job& j) {
    return hint && cfg.high_min_runtime_override_s > 0 && j.cls == PriorityClass::kHigh &&
           now - j.submit_time >= cfg.high_min_runtime_override_s;
  };
  bool low_share_blocked = false;  // this search set aside a victim set for low's share
  struct HeapItem {
    int version;
    Choice choice;
  };
  struct Heap {
    bool built = false;
    std::vector<HeapItem> items;
  };
  // std heaps put the largest first: "less" = worse choice.
  auto heap_less = [&](const HeapItem& a, const HeapItem& b) { return BetterChoice(b.choice, a.choice, cfg.kind); };
  std::vector<Heap> heaps(2 * static_cast<size_t>(kNumClasses) * (max_node + 1));
  int fail_gpus[2][kNumClasses] = {{1 << 30, 1 << 30, 1 << 30}, {1 << 30, 1 << 30, 1 << 30}};
  WaitCause fail_cause[2][kNumClasses] = {};

  // The best victim set on one node for pending job j (node = -1 when there is none).
  auto evaluate = [&](int node, const Job& j, int ji) -> Choice {
    (void)ji;
    const int cls = static_cast<int>(j.cls);
      int avail = std::max(0, free[node]);
      int need = j.gpus - avail;
      if (need <= 0) return Choice{};  // (only when headroom blocked a fit; not reached)
      std::vector<int> cand;
      std::vector<VictimCost> cand_cost;
      int cand_gpus = 0;
      const bool ovr = overrides_min_runtime(j);
      const std::vector<VictimCost>& costs = j.cls == PriorityClass::kHigh ? high_costs(j.gpus) : vcost;
      for (int vi : running_on[node]) {
        const Job& v = jobs[vi];
        if (chosen[vi] || static_cast<int>(v.cls) >= cls) continue;
        // The override keeps the anti-thrashing spacing: a victim preempted within cooldown +
        // minimum run time is still protected.
        bool protect = !ovr || now < v.last_preempted + cfg.cooldown_s + cfg.min_runtime_s;
        if (hint && protect && cfg.min_runtime_s > 0 && now < v.start_time + cfg.min_runtime_s) {
          min_runtime_release = std::min(min_runtime_release, v.start_time + cfg.min_runtime_s);
          continue;
        }
        cand.push_back(vi);
        cand_gpus += v.gpus;
      }
      if (cand_gpus < need) return Choice{};
      Choice c;
      c.node = node;
      if (cfg.kind == PolicyKind::kKubernetes) {
        // Remove all lower-priority pods, then reprieve the most important ones (higher priority,
        // then earlier start) while the preemptor still fits.
        std::sort(cand.begin(), cand.end(), [&](int a, int b) {
          if (jobs[a].cls != jobs[b].cls) return jobs[a].cls > jobs[b].cls;
          if (jobs[a].start_time != jobs[b].start_time) return jobs[a].start_time < jobs[b].start_time;
          return jobs[a].id < jobs[b].id;
        });
        int freed = cand_gpus;
        for (int vi : cand) {
          if (freed - jobs[vi].gpus >= need) {
            freed -= jobs[vi].gpus;
          } else {
            c.victims.push_back(vi);
          }
        }
      } else {
        // Cheapest first (lower class first, then lost GPU-s per GPU), then drop the most
        // expensive victims that turn out not to be needed.
        for (int vi : cand) cand_cost.push_back(costs[vi]);
        std::vector<int> order(cand.size());
        for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
        std::sort(order.begin(), order.end(), [&](int a, int b) {
          const Job& x = jobs[cand[a]];
          const Job& y = jobs[cand[b]];
          if (x.cls != y.cls) return x.cls < y.cls;
          double ca = cand_cost[a].lost_gpu_s / x.gpus, cb = cand_cost[b].lost_gpu_s / y.gpus;
          if (ca != cb) return ca < cb;
          return x.id < y.id;
        });
        std::vector<int> order_gpus;
        for (int k : order) order_gpus.push_back(jobs[cand[k]].gpus);
        double wait = 0, lost = 0, raw = 0;
        for (int pos : TakeUntilFreed(order_gpus, need)) {
          const int k = order[pos];
          const Job& v = jobs[cand[k]];
          if (v.cls == PriorityClass::kLow) c.low_taken += v.gpus;
          c.freed_gpus += v.gpus;
          c.victims.push_back(cand[k]);
          c.costs.push_back(cand_cost[k]);
          wait = std::max(wait, cand_cost[k].wait_s);
          lost += cand_cost[k].lost_gpu_s;
          raw += v.gpus * lostw[cand[k]];
        }
        c.cost = lost + j.gpus * wait;
        c.lost_work_gpu_s = raw;
      }
      c.count = static_cast<int>(c.victims.size());
      for (int vi : c.victims) c.max_class = std::max(c.max_class, static_cast<int>(jobs[vi].cls));
      for (int vi : c.victims)
        if (static_cast<int>(jobs[vi].cls) == c.max_class) c.latest_start = std::max(c.latest_start, jobs[vi].start_time);
      if (c.victims.empty()) return Choice{};
      return c;
  };

  // Cluster-wide rules a node's victim set must also pass (they change as the pass goes on, so
  // they are checked at use time, not cached): low's guaranteed share, the non-high cap, and
  // the per-queue preemption budget.
  auto feasible = [&](const Choice& c, const Job& j) -> bool {
    if (!hint) return true;
    if (c.low_taken > 0 && placed_by_class[0] - c.low_taken < low_share) {
      low_share_blocked = true;
      return false;
    }
    if (j.cls != PriorityClass::kHigh &&
        placed_by_class[0] + placed_by_class[1] - c.freed_gpus + j.gpus > nonhigh_cap)
      return false;
    if (!budget_on) return true;
    std::map<std::string, Budget> trial;
    for (size_t k = 0; k < c.victims.size(); ++k) {
      Budget& b = trial[jobs[c.victims[k]].queue];
      b.count++;
      b.lost_gpu_h += c.costs[k].lost_gpu_s / 3600.0;
    }
    for (const auto& [q, t] : trial) {
      auto it = budget.find(q);
      int count = (it == budget.end() ? 0 : it->second.count) + t.count;
      double gh = (it == budget.end() ? 0 : it->second.lost_gpu_h) + t.lost_gpu_h;
      if ((cfg.budget_max_preemptions > 0 && count > cfg.budget_max_preemptions) ||
          (cfg.budget_max_lost_gpu_hours > 0 && gh > cfg.budget_max_lost_gpu_hours)) {
        budget_blocked = true;
        budget_queue = q;
        if (it != budget.end()) out.recheck_at = std::min(out.recheck_at, it->second.oldest + cfg.budget_window_s);
        return false;
      }
    }
    return true;
  };

  auto charge_budget = [&](const Job& v, const VictimCost& vc) {
    if (!budget_on) return;
    Budget& b = budget[v.queue];
    b.count++;
    b.lost_gpu_h += vc.lost_gpu_s / 3600.0;
    b.oldest = std::min(b.oldest, now);
  };

  // Defragmentation (PolicyConfig::defrag_max_moves): for a high job that no node can take from
  // lower-priority jobs alone, clear one node by moving smaller high jobs off it to places where
  // they restart at once (free GPUs, or lower-priority victims evicted for them). Node choice:
  // least total cost (lost work of the victims, saves + restores of the moved jobs, the
  // preemptor's wait at its GPU count), by branch and bound on the cost without destinations.
  int defrag_tries = 0;
  int defrag_fail_gpus = 1 << 30;
  auto movable = [&](int vi, const Job& j) -> bool {
    const Job& v = jobs[vi];
    if (chosen[vi] || v.cls != j.cls || v.gpus >= j.gpus || !HintsFresh(v, now, cfg)) return false;
    if (cfg.min_runtime_s > 0 && now < v.start_time + cfg.min_runtime_s) return false;
    const double spacing = cfg.cooldown_s + cfg.min_runtime_s;
    if (now < v.last_moved + spacing || now < v.last_preempted + spacing) return false;
    const VictimCost& c = vcost[vi];
    if (c.mode == EvictionMode::kSigterm) return false;
    // Killing it would throw away more than its save loses: it must be able to save.
    return c.mode != EvictionMode::kKillCheap || lostw[vi] <= v.hints->cost.stall_s + v.hints->cost.persist_s;
  };
  // Lower-priority victims on `node` a high job could take now (not chosen, past minimum run time),
  // cheapest first.
  auto lower_victims = [&](int node, const Job& j) {
    std::vector<int> out_v;
    for (int vi : running_on[node]) {
      const Job& v = jobs[vi];
      if (chosen[vi] || v.cls >= j.cls) continue;
      if (cfg.min_runtime_s > 0 && now < v.start_time + cfg.min_runtime_s) continue;
      out_v.push_back(vi);
    }
    std::sort(out_v.begin(), out_v.end(), [&](int a, int b) {
      const std::vector<VictimCost>& hc = high_costs(j.gpus);
      double ca = hc[a].lost_gpu_s / jobs[a].gpus, cb = hc[b].lost_gpu_s / jobs[b].gpus;
      if (jobs[a].cls != jobs[b].cls) return jobs[a].cls < jobs[b].cls;
      if (ca != cb) return ca < cb;
      return jobs[a].id < jobs[b].id;
    });
    return out_v;
  };
  struct Step {
    int vi;          // victim or moved job
    int node;        // where it runs
    int for_index;   // the job it makes room for (the preemptor, or a moved job)
    int to_node;     // moved jobs: where they restart; -1 for victims
    VictimCost cost;
  };
  struct DestOption {
    double cost;
    int node;
    std::vector<int> victims;
  };
  // Bounds on the work of one search: nodes evaluated with destinations, searches per pass.
  constexpr int kDefragCandidates = 8, kDefragTries = 16;
  struct Cand {
    double bound = 0;
    int node = -1;  // -1: no candidate on this node
    std::vector<Step> steps;  // for_index -1: the preemptor; moved jobs have to_node -2 until placed
    double wait = 0;
  };
  // Node `node` cleared for high job j with lower-priority victims and moves of smaller high jobs:
  // lower victims first, then the cheapest moves, then the most expensive unneeded ones dropped.
  auto defrag_candidate = [&](int node, const Job& j) -> Cand {
    Cand c;
    if (st.nodes[node].gpus < j.gpus) return c;
    const int avail = std::max(0, free[node]);
    std::vector<int> low = lower_victims(node, j);
    std::vector<int> mov;
    int low_g = 0, mov_g = 0;
    for (int vi : low) low_g += jobs[vi].gpus;
    if (avail + low_g >= j.gpus) return c;  // the regular search covers it (a cluster-wide rule said no)
    for (int vi : running_on[node])
      if (movable(vi, j)) mov.push_back(vi), mov_g += jobs[vi].gpus;
    if (avail + low_g + mov_g < j.gpus) return c;
    std::sort(mov.begin(), mov.end(), [&](int a, int b) {
      double ca = vcost[a].lost_gpu_s / jobs[a].gpus, cb = vcost[b].lost_gpu_s / jobs[b].gpus;
      if (ca != cb) return ca < cb;
      return jobs[a].id < jobs[b].id;
    });
    const int need = j.gpus - avail;
    // All lower victims come first (together they are too few), then the moves.
    std::vector<int> order = low, order_gpus;
    order.insert(order.end(), mov.begin(), mov.end());
    for (int vi : order) order_gpus.push_back(jobs[vi].gpus);
    int moves = 0;
    for (int pos : TakeUntilFreed(order_gpus, need)) {
      const int vi = order[pos];
      const bool moved = pos >= static_cast<int>(low.size());
      const VictimCost& vc = moved ? vcost[vi] : high_costs(j.gpus)[vi];
      moves += moved;
      c.steps.push_back({vi, node, -1, moved ? -2 : -1, vc});
      c.bound += vc.lost_gpu_s;
      c.wait = std::max(c.wait, vc.wait_s);
    }
    if (moves == 0 || moves > cfg.defrag_max_moves) return Cand{};
    c.bound += j.gpus * c.wait;
    c.node = node;
    return c;
  };
  struct DefragCache {
    std::vector<int> version;  // node_version the entry was computed at
    std::vector<Cand> cand;
  };
  std::map<int, DefragCache> defrag_cache;  // by the preemptor's GPU count (all high)
  // Destinations for moved jobs of g GPUs: the cheapest lower-priority victims per node, cached
  // per pass like the candidates.
  struct DestCache {
    std::vector<int> version;
    std::vector<DestOption> opt;  // node -1: none on that node
  };
  std::map<int, DestCache> dest_cache;
  auto try_defrag = [&](int ji) -> bool {
    const Job& j = jobs[ji];
    if (!hint || cfg.defrag_max_moves <= 0 || j.cls != PriorityClass::kHigh || j.gpus < 2) return false;
    if (now < j.submit_time + cfg.defrag_min_wait_s) {
      out.recheck_at = std::min(out.recheck_at, j.submit_time + cfg.defrag_min_wait_s);
      return false;
    }
    if (j.gpus >= defrag_fail_gpus || defrag_tries >= kDefragTries) return false;

    ++defrag_tries;
    // Candidate nodes with a lower bound on their cost (no destinations yet), cached per pass
    // for this GPU count and refreshed for nodes that changed since.
    DefragCache& cache = defrag_cache[j.gpus];
    if (cache.version.empty()) {
      cache.version.assign(n_nodes, -1);
      cache.cand.resize(n_nodes);
    }
    std::vector<const Cand*> cands;
    for (int node = 0; node < n_nodes; ++node) {
      if (cache.version[node] != node_version[node]) {
        cache.version[node] = node_version[node];
        cache.cand[node] = defrag_candidate(node, j);
      }
      if (cache.cand[node].node >= 0) cands.push_back(&cache.cand[node]);
    }
    std::sort(cands.begin(), cands.end(), [](const Cand* a, const Cand* b) {
      return a->bound != b->bound ? a->bound < b->bound : a->node < b->node;
    });
    double best_cost = kInf;
    std::vector<Step> best;
    std::map<int, std::vector<const DestOption*>> dest_lists;  // by GPUs moved, cheapest first, on first use
    std::map<int, char> dest_built;
    int evaluated = 0;
    std::vector<std::pair<int, int>> best_free_use;  // (node, free GPUs taken there)
    for (const Cand* cp : cands) {
      if (cp->bound >= best_cost || ++evaluated > kDefragCandidates) break;
      Cand c = *cp;
      // Destinations, largest moved job first: best fit on free GPUs elsewhere, else the
      // cheapest lower-priority victims elsewhere.
      std::vector<Step> steps;
      std::unordered_map<int, int> used_free;
      std::vector<Step*> moved;
      for (Step& s : c.steps)
        if (s.to_node == -2) moved.push_back(&s);
      std::sort(moved.begin(), moved.end(), [&](const Step* a, const Step* b) {
        return jobs[a->vi].gpus != jobs[b->vi].gpus ? jobs[a->vi].gpus > jobs[b->vi].gpus : a->vi < b->vi;
      });
      double cost = c.bound;
      bool ok = true;
      for (Step* mv : moved) {
        const int g = jobs[mv->vi].gpus;
        int fit = -1, fit_free = 1 << 30;
        for (const auto& [f, node] : by_free) {  // ascending free: the first that fits is the best fit
          if (node == c.node) continue;
          auto used = used_free.find(node);
          int left = f - (used == used_free.end() ? 0 : used->second);
          if (left >= g && left < fit_free) {
            fit = node;
            fit_free = left;
            if (left == g) break;
          }
        }
        if (fit >= 0) {
          mv->to_node = fit;
          used_free[fit] += g;
          continue;
        }
        // Cheapest lower-priority victims elsewhere, from this try's list for g GPUs. One node
        // per move: a node another move of this plan already uses (free GPUs or victims) is
        // skipped, so no victim is taken twice.
        std::vector<const DestOption*>& list = dest_lists[g];
        if (!dest_built[g]) {
          dest_built[g] = 1;
          DestCache& dc = dest_cache[g];
          if (dc.version.empty()) {
            dc.version.assign(n_nodes, -1);
            dc.opt.resize(n_nodes);
          }
          for (int node = 0; node < n_nodes; ++node) {
            if (dc.version[node] != node_version[node]) {
              dc.version[node] = node_version[node];
              DestOption d{0, -1, {}};
              int need_m = g - std::max(0, free[node]);
              if (st.nodes[node].gpus >= g) {
                for (int vi : lower_victims(node, jobs[mv->vi])) {
                  if (need_m <= 0) break;
                  d.victims.push_back(vi);
                  d.cost += high_costs(g)[vi].lost_gpu_s;
                  need_m -= jobs[vi].gpus;
                }
              }
              if (need_m <= 0 && !d.victims.empty()) d.node = node;
              dc.opt[node] = std::move(d);
            }
            if (dc.opt[node].node >= 0) list.push_back(&dc.opt[node]);
          }
          std::sort(list.begin(), list.end(), [](const DestOption* a, const DestOption* b) {
            return a->cost != b->cost ? a->cost < b->cost : a->node < b->node;
          });
        }
        int dest = -1;
        const std::vector<int>* dest_victims = nullptr;
        for (const DestOption* d : list) {
          if (d->node == c.node || used_free.count(d->node)) continue;
          dest = d->node;
          dest_victims = &d->victims;
          break;
        }
        if (dest < 0) {
          ok = false;
          break;
        }
        mv->to_node = dest;
        used_free[dest] += std::min(g, std::max(0, free[dest]));  // (also marks dest as used)
        for (int vi : *dest_victims) {
          steps.push_back({vi, dest, mv->vi, -1, high_costs(g)[vi]});
          cost += high_costs(g)[vi].lost_gpu_s;
        }
      }
      if (!ok || cost >= best_cost) continue;
      // Cluster-wide rules (low share, budgets) over everything this plan evicts or moves.
      Choice all;
      all.node = c.node;
      for (const auto* list : {&c.steps, &steps}) {
        for (const Step& s : *list) {
          all.victims.push_back(s.vi);
          all.costs.push_back(s.cost);
          if (jobs[s.vi].cls == PriorityClass::kLow) all.low_taken += jobs[s.vi].gpus;
        }
      }
      if (!feasible(all, j)) continue;
      best_cost = cost;
      best = c.steps;
      best.insert(best.end(), steps.begin(), steps.end());
      best_free_use.assign(used_free.begin(), used_free.end());
    }
    if (best.empty()) {
      defrag_fail_gpus = std::min(defrag_fail_gpus, j.gpus);
      return false;
    }
    const int target = best.front().node;
    int n_moves = 0;
    for (const Step& s : best) n_moves += s.to_node >= 0;
    double wait = 0;
    for (Step& s : best) {
      if (s.for_index < 0) s.for_index = ji;
      const Job& v = jobs[s.vi];
      const VictimCost& vc = s.cost;
      chosen[s.vi] = 1;
      JobAction a;
      a.kind = vc.checkpoint_first ? ActionKind::kRequestCheckpoint : ActionKind::kEvict;
      a.mode = vc.mode;
      a.grace_s = vc.grace_s;
      a.job = v.id;
      a.job_index = s.vi;
      a.node = s.node;
      a.for_job = jobs[s.for_index].id;
      a.for_index = s.for_index;
      a.to_node = s.to_node;
      a.est_lost_gpu_s = vc.lost_gpu_s;
      if (s.to_node >= 0) {
        a.reason = Fmt("move to %s so high job %s fits on %s (%d move(s)): %s, loses %.0f GPU-s incl. restore",
                       st.nodes[s.to_node].name.c_str(), j.id.c_str(), st.nodes[s.node].name.c_str(), n_moves,
                       HowText(vc), vc.lost_gpu_s);
      } else if (s.for_index == ji) {
        a.reason = Fmt("clear %s for high job %s (with %d move(s) of high jobs): %s, loses %.0f GPU-s incl. restore",
                       st.nodes[s.node].name.c_str(), j.id.c_str(), n_moves, HowText(vc), vc.lost_gpu_s);
      } else {
        a.reason = Fmt("make room on %s for %s, moved off %s for high job %s: %s, loses %.0f GPU-s incl. restore",
                       st.nodes[s.node].name.c_str(), jobs[s.for_index].id.c_str(), st.nodes[target].name.c_str(),
                       j.id.c_str(), HowText(vc), vc.lost_gpu_s);
      }
      if (s.for_index == ji) wait = std::max(wait, vc.wait_s);
      out.actions.push_back(std::move(a));
      if (v.cls != PriorityClass::kHigh) placed_by_class[static_cast<int>(v.cls)] -= v.gpus;
      charge_budget(v, vc);
    }
    for (const auto& [node, g] : best_free_use) set_free(node, free[node] - g);
    for (const Step& s : best) set_free(s.node, free[s.node]);  // every node touched changes version
    set_free(target, 0);
    waiting_high.emplace_back(ji, wait);
    return true;
  };

  for (int ji : pending) {
    const Job& j = jobs[ji];
    const int cls = static_cast<int>(j.cls);
    if (j.gpus > max_node || j.gpus <= 0) {  // can never fit
      if (j.cls == PriorityClass::kHigh) blocked_high.emplace_back(ji, WaitCause::kOther);
      continue;
    }
    if (hint && cfg.cooldown_s > 0 && now < j.last_preempted + cfg.cooldown_s) {
      out.recheck_at = std::min(out.recheck_at, j.last_preempted + cfg.cooldown_s);
      continue;
    }
    auto aw = awaiting_node.find(ji);
    if (j.move_to >= 0 && j.move_to < n_nodes) {
      // Moved off its node for a high job: restart on the node it was moved to, at once (its own
      // hold released first), or wait while GPUs there are on their way out (victims evicted
      // for it or for another job moved there); if neither, the move's place is gone and it is
      // placed like any pending job.
      const int to = j.move_to;
      set_free(to, free[to] + j.gpus);
      if (free[to] >= j.gpus) {
        start_job(ji, to, Fmt("moved for a high-priority job; restarting on %s (%d of %d GPUs free)",
                              st.nodes[to].name.c_str(), free[to], st.nodes[to].gpus));
        continue;
      }
      if (leaving_on[to] > 0) {
        set_free(to, free[to] - j.gpus);
        if (j.cls == PriorityClass::kHigh) waiting_high.emplace_back(ji, 0.0);
        continue;
      }
    }
    if (aw != awaiting_node.end()) {
      // Victims are leaving this node for us; start when enough of them are gone.
      int node = aw->second;
      if (node >= 0 && free[node] >= j.gpus) {
        start_job(ji, node, Fmt("victims on %s have left; starting", st.nodes[node].name.c_str()));
      } else if (node >= 0) {
        set_free(node, std::max(0, free[node] - j.gpus));  // hold what is already free there
        if (j.cls == PriorityClass::kHigh) waiting_high.emplace_back(ji, awaiting_left[ji]);
      }
      continue;
    }
    // Headroom for high priority; low keeps its guaranteed share.
    bool headroom_ok = true;
    if (j.cls != PriorityClass::kHigh) {
      int nonhigh = placed_by_class[0] + placed_by_class[1];
      bool within_share = j.cls == PriorityClass::kLow && placed_by_class[0] + j.gpus <= low_share;
      headroom_ok = within_share || nonhigh + j.gpus <= nonhigh_cap;
      // With refill on, the reserve is kept free: non-high work does not start into it.
      if (cfg.refill_headroom && !within_share && free_sum + leaving_unclaimed - j.gpus < reserve)
        headroom_ok = false;
    }
    if (headroom_ok) {
      auto it = by_free.lower_bound({j.gpus, -1});
      if (it != by_free.end()) {
        int node = it->second;
        start_job(ji, node, Fmt("fits on %s (%d of %d GPUs free, best fit)", st.nodes[node].name.c_str(),
                                free[node], st.nodes[node].gpus));
        continue;
      }
    } else if (cfg.kind == PolicyKind::kFcfs) {
      continue;
    } else if (by_free.lower_bound({j.gpus, -1}) != by_free.end()) {
      continue;  // it would fit, only the reserve stops it: wait instead of preempting lower work
    }
    // (A non-high job blocked by the headroom may still preempt lower jobs: it then only
    // replaces non-high GPUs; checked per candidate below.)
    if (cfg.kind == PolicyKind::kFcfs || !cfg.preempts_lower[cls]) {
      if (j.cls == PriorityClass::kHigh) blocked_high.emplace_back(ji, WaitCause::kOther);
      continue;
    }
    if (hint && j.cls != PriorityClass::kHigh && cfg.nonhigh_preempt_delay_s > 0) {
      double since = std::max(j.submit_time, j.last_preempted);  // pending since
      if (now < since + cfg.nonhigh_preempt_delay_s) {
        out.recheck_at = std::min(out.recheck_at, since + cfg.nonhigh_preempt_delay_s);
        continue;
      }
    }
    if (searches >= cfg.max_preemptors_per_pass) {
      if (j.cls == PriorityClass::kHigh) blocked_high.emplace_back(ji, WaitCause::kOther);
      continue;
    }
    ++searches;

    // 3. Victim search over nodes. A (class, GPUs) that found nothing cannot succeed later in
    //    this pass (nodes only fill up), nor can a larger request of the same class.
    const int ovr = overrides_min_runtime(j) ? 1 : 0;
    if (j.gpus >= fail_gpus[ovr][cls]) {
      if (try_defrag(ji)) continue;
      if (j.cls == PriorityClass::kHigh) blocked_high.emplace_back(ji, fail_cause[ovr][cls]);
      continue;
    }
    // Lazy heap of nodes by their (optimistic) best victim set for this (class, GPUs): within a
    // pass a node's choice only gets worse, so a stale entry is re-evaluated and pushed back.
    // Jobs that override the minimum run time see more victims: their own heaps.
    const size_t hkey = (static_cast<size_t>(ovr) * kNumClasses + cls) * (max_node + 1) + j.gpus;
    low_share_blocked = false;
    const bool budget_was_blocked = budget_blocked;
    budget_blocked = false;
    Heap& heap = heaps[hkey];
    if (!heap.built) {
      heap.built = true;
      for (int node = 0; node < n_nodes; ++node) {
        if (st.nodes[node].gpus < j.gpus) continue;
        Choice c = evaluate(node, j, ji);
        if (c.node < 0) continue;
        heap.items.push_back({node_version[node], std::move(c)});
      }
      std::make_heap(heap.items.begin(), heap.items.end(), heap_less);
    }
    Choice best;
    std::vector<HeapItem> set_aside;  // locally fine, but failing a cluster-wide rule now
    while (!heap.items.empty()) {
      std::pop_heap(heap.items.begin(), heap.items.end(), heap_less);
      HeapItem top = std::move(heap.items.back());
      heap.items.pop_back();
      int node = top.choice.node;
      if (top.version != node_version[node]) {
        Choice c = evaluate(node, j, ji);
        if (c.node >= 0) {
          heap.items.push_back({node_version[node], std::move(c)});
          std::push_heap(heap.items.begin(), heap.items.end(), heap_less);
        }
        continue;
      }
      if (!feasible(top.choice, j)) {
        set_aside.push_back(std::move(top));
        continue;
      }
      best = std::move(top.choice);  // consumed: the node changes below
      break;
    }
    for (auto& it : set_aside) {
      heap.items.push_back(std::move(it));
      std::push_heap(heap.items.begin(), heap.items.end(), heap_less);
    }
    if (best.node < 0) {
      WaitCause why = low_share_blocked ? WaitCause::kLowShare
                      : budget_blocked  ? WaitCause::kBudget
                      : min_runtime_release < kInf ? WaitCause::kMinRuntime
                                                              : WaitCause::kNoVictim;
      budget_blocked = budget_blocked || budget_was_blocked;
      if (j.gpus < fail_gpus[ovr][cls]) {
        fail_gpus[ovr][cls] = j.gpus;
        fail_cause[ovr][cls] = why;
      }
      if (try_defrag(ji)) continue;
      if (j.cls == PriorityClass::kHigh) blocked_high.emplace_back(ji, why);
      continue;
    }
    budget_blocked = budget_blocked || budget_was_blocked;
    // Emit the victims; the node's free GPUs and the victims' GPUs are now promised to j.
    for (size_t k = 0; k < best.victims.size(); ++k) {
      int vi = best.victims[k];
      const Job& v = jobs[vi];
      chosen[vi] = 1;
      VictimCost vc = cfg.kind == PolicyKind::kHintAware ? best.costs[k] : VictimCost{};
      if (cfg.kind != PolicyKind::kHintAware) vc.lost_gpu_s = v.gpus * (EstimatedLostWork(v, now, cfg) + RestoreOf(v, cfg));
      JobAction a;
      a.kind = vc.checkpoint_first ? ActionKind::kRequestCheckpoint : ActionKind::kEvict;
      a.mode = vc.mode;
      a.grace_s = vc.grace_s;
      a.job = v.id;
      a.job_index = vi;
      a.node = best.node;
      a.for_job = j.id;
      a.for_index = ji;
      a.est_lost_gpu_s = vc.lost_gpu_s;
      double uncommitted = EstimatedLostWork(v, now, cfg);
      if (cfg.kind == PolicyKind::kKubernetes) {
        a.reason = Fmt("k8s order: %s victim on %s for %s job %s (%d victim(s) on node, started %.0f s ago)",
                       PriorityClassName(v.cls), st.nodes[best.node].name.c_str(), PriorityClassName(j.cls),
                       j.id.c_str(), best.count, now - v.start_time);
      } else if (vc.mode == EvictionMode::kSaveInGrace) {
        a.reason = Fmt("least lost work on %s for %s job %s: SIGTERM, saves within its %.0f s grace (needs %.1f s), "
                       "loses %.0f GPU-s incl. restore vs %.0f s uncommitted now",
                       st.nodes[best.node].name.c_str(), PriorityClassName(j.cls), j.id.c_str(),
                       v.hints->grace.granted_s, vc.wait_s, vc.lost_gpu_s, uncommitted);
      } else if (vc.mode == EvictionMode::kKillSmall) {
        a.reason = Fmt("least lost work on %s for high job %s: kill now, only %.0f s uncommitted (<= %.0f s, no "
                       "wait for a save), %.0f GPU-s incl. restore",
                       st.nodes[best.node].name.c_str(), j.id.c_str(), uncommitted, cfg.kill_now_max_lost_s,
                       vc.lost_gpu_s);
      } else if (vc.mode == EvictionMode::kKillSlow) {
        a.reason = Fmt("least lost work on %s for high job %s: kill now, its save (%.1f s) would outlast the %.0f s "
                       "tolerable wait%s; %.0f s uncommitted, %.0f GPU-s incl. restore",
                       st.nodes[best.node].name.c_str(), j.id.c_str(), vc.save_s, TolerableWait(v, cfg),
                       cfg.high_tolerable_wait_s < 0 ? " (its grace period)" : "", uncommitted, vc.lost_gpu_s);
      } else if (vc.mode == EvictionMode::kKillCheap) {
        a.reason = Fmt("least lost work on %s for %s job %s: kill now, %.0f s uncommitted is less than a save "
                       "would lose, %.0f GPU-s incl. restore",
                       st.nodes[best.node].name.c_str(), PriorityClassName(j.cls), j.id.c_str(), uncommitted,
                       vc.lost_gpu_s);
      } else if (vc.checkpoint_first) {
        a.reason = Fmt("least lost work on %s for %s job %s: checkpoint first (%.1f s) loses %.0f GPU-s incl. "
                       "restore vs %.0f s uncommitted now",
                       st.nodes[best.node].name.c_str(), PriorityClassName(j.cls), j.id.c_str(), vc.wait_s,
                       vc.lost_gpu_s, uncommitted);
      } else {
        a.reason = Fmt("least lost work on %s for %s job %s: SIGTERM with its own grace, %.0f s uncommitted%s, %.0f GPU-s incl. restore",
                       st.nodes[best.node].name.c_str(), PriorityClassName(j.cls), j.id.c_str(), uncommitted,
                       HintsFresh(v, now, cfg) ? "" : " (no fresh hints: assumed)", vc.lost_gpu_s);
      }
      out.actions.push_back(std::move(a));
      placed_by_class[static_cast<int>(v.cls)] -= v.gpus;
      charge_budget(v, vc);
    }
    set_free(best.node, 0);
    if (j.cls == PriorityClass::kHigh) {
      double left = 0;
      for (const auto& vc : best.costs) left = std::max(left, vc.wait_s);
      waiting_high.emplace_back(ji, left);
    }
  }
  // 4. Keep the reserved headroom free for high-priority arrivals: when high-priority work has
  //    used it up, checkpoint-then-evict the cheapest lower-priority jobs in the background, so
  //    the next high arrival starts at once instead of waiting for a checkpoint.
  int deficit = reserve - free_sum - leaving_unclaimed;
  if (hint && cfg.refill_headroom && deficit > 0) {
    std::vector<std::pair<double, int>> cands;  // (class-major cost per GPU, job)
    std::vector<VictimCost> cost_of(jobs.size());
    for (int node = 0; node < n_nodes; ++node) {
      for (int vi : running_on[node]) {
        const Job& v = jobs[vi];
        if (chosen[vi] || v.cls == PriorityClass::kHigh) continue;
        if (cfg.min_runtime_s > 0 && now < v.start_time + cfg.min_runtime_s) {
          min_runtime_release = std::min(min_runtime_release, v.start_time + cfg.min_runtime_s);
          continue;
        }
        cost_of[vi] = CostOf(v, now, cfg, false);
        cands.emplace_back(static_cast<int>(v.cls) * 1e12 + cost_of[vi].lost_gpu_s / v.gpus, vi);
      }
    }
    std::sort(cands.begin(), cands.end());
    for (const auto& [key, vi] : cands) {
      if (deficit <= 0) break;
      const Job& v = jobs[vi];
      if (v.cls == PriorityClass::kLow && placed_by_class[0] - v.gpus < low_share) continue;
      if (budget_on) {
        auto it = budget.find(v.queue);
        if (it != budget.end()) {
          const Budget& b = it->second;
          if ((cfg.budget_max_preemptions > 0 && b.count + 1 > cfg.budget_max_preemptions) ||
              (cfg.budget_max_lost_gpu_hours > 0 &&
               b.lost_gpu_h + cost_of[vi].lost_gpu_s / 3600.0 > cfg.budget_max_lost_gpu_hours)) {
            out.recheck_at = std::min(out.recheck_at, b.oldest + cfg.budget_window_s);
            continue;
          }
        }
      }
      const VictimCost& vc = cost_of[vi];
      chosen[vi] = 1;
      JobAction a;
      a.kind = vc.checkpoint_first ? ActionKind::kRequestCheckpoint : ActionKind::kEvict;
      a.mode = vc.mode;
      a.job = v.id;
      a.job_index = vi;
      a.node = v.node;
      a.est_lost_gpu_s = vc.lost_gpu_s;
      a.grace_s = vc.grace_s;
      a.reason = Fmt("refill reserved headroom for high priority (%d of %d GPUs free): %s, loses %.0f GPU-s incl. "
                     "restore",
                     free_sum, reserve, HowText(vc), vc.lost_gpu_s);
      out.actions.push_back(std::move(a));
      placed_by_class[static_cast<int>(v.cls)] -= v.gpus;
      deficit -= v.gpus;
      charge_budget(v, vc);
    }
  }
  if (min_runtime_release < kInf) out.recheck_at = std::min(out.recheck_at, min_runtime_release);

  // 5. Wait estimates for high-priority jobs left pending: those waiting for victims' commits,
  //    then the blocked ones, with a suggestion when the estimate passes wait_alert_s.
  for (const auto& [ji, left] : waiting_high) {
    WaitEstimate w;
    w.job = jobs[ji].id;
    w.job_index = ji;
    w.cause = WaitCause::kVictimsLeaving;
    w.waited_s = now - jobs[ji].submit_time;
    w.est_wait_s = w.waited_s + left;
    out.waits.push_back(std::move(w));
  }
  for (const auto& [ji, cause] : blocked_high) {
    const Job& j = jobs[ji];
    WaitEstimate w;
    w.job = j.id;
    w.job_index = ji;
    w.cause = cause;
    if (cause == WaitCause::kMinRuntime && hint && cfg.high_min_runtime_override_s > 0)
      out.recheck_at = std::min(out.recheck_at, j.submit_time + cfg.high_min_runtime_override_s);
    w.waited_s = now - j.submit_time;
    bool lower_running = placed_by_class[0] + placed_by_class[1] > 0;
    if (j.gpus > max_node) {
      w.est_wait_s = kInf;
      w.suggestion = Fmt("add capacity: %s needs %d GPUs on one node, the largest node has %d", j.id.c_str(), j.gpus,
                         max_node);
    } else if (!cfg.preempts_lower[static_cast<int>(j.cls)] || cfg.kind == PolicyKind::kFcfs || !lower_running) {
      w.est_wait_s = kInf;
      if (!lower_running)
        w.suggestion = Fmt("add capacity: all GPUs are held by high-priority jobs; %d more GPU(s) on one node "
                           "would start %s", j.gpus, j.id.c_str());
      else
        w.suggestion = Fmt("policy does not preempt for %s; add capacity (%d GPU(s)) or enable preemption",
                           j.id.c_str(), j.gpus);
    } else if (budget_blocked) {
      w.est_wait_s = w.waited_s + std::max(0.0, out.recheck_at - now);
      w.suggestion = Fmt("queue '%s' preemption budget exhausted; raise its budget (accept a higher priority "
                         "cost) or add capacity (%d GPU(s))", budget_queue.c_str(), j.gpus);
    } else if (min_runtime_release < kInf) {
      w.est_wait_s = w.waited_s + (min_runtime_release - now);
      w.suggestion = Fmt("lower-priority jobs are within their minimum run time; a victim frees up in %.0f s",
                         min_runtime_release - now);
    } else {
      w.est_wait_s = kInf;
      w.suggestion = Fmt("no node can free %d GPU(s) from lower-priority jobs; add capacity", j.gpus);
    }
    if (!(w.est_wait_s > cfg.wait_alert_s)) w.suggestion.clear();
    out.waits.push_back(std::move(w));
  }
  return out;
}

}  // namespace preempt::sched
