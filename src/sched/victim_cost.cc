#include "victim_cost.h"

#include <algorithm>

#include "job_index.h"

namespace preempt::sched {

double FullRestoreOf(const Job& j, const PolicyOptions& c) { return j.restore_s >= 0 ? j.restore_s : c.restore_s; }

double RestoreOf(const Job& j, const PolicyOptions& c) {
  if (j.hints && j.hints->last_commit.step < 0) return 0;
  return FullRestoreOf(j, c);
}

double TolerableWait(const Job& v, const PolicyOptions& c) {
  switch (c.high_tolerable_wait) {
    case TolerableWait::kFixed: return c.high_tolerable_wait_s;
    case TolerableWait::kOff: return 0;
    case TolerableWait::kVictimGrace: break;
  }
  return v.hints ? v.hints->grace.granted_s : 0;
}

double SigtermGrace(const Job& v, double now, const PolicyOptions& c) {
  if (c.victim_grace != VictimGrace::kHintSized || !HintsFresh(v, now, c) || v.hints->checkpoint_s() <= 0) return -1;
  return kSizedGraceFactor * std::max(v.hints->grace.needed_s, v.hints->checkpoint_s()) + kSizedGraceExtraS;
}

bool SaveInFlight(const Job& v, double now, const PolicyOptions& c) {
  return v.phase == JobPhase::kRunning && v.request_id > 0 && v.hints && v.hints->request_ack < v.request_id &&
         now < v.request_time + c.checkpoint_deadline_s;
}

double KillMaxLost(const PolicyOptions& c, bool high_wait_at_risk) {
  const double limit = c.tolerable_kill_max_lost_s;
  if (!high_wait_at_risk || limit <= 0) return limit;
  return c.high_wait_guard_kill_max_lost_s <= 0 ? 0 : std::max(limit, c.high_wait_guard_kill_max_lost_s);
}

double RepeatFactor(const Job& v, const PolicyOptions& c) {
  if (c.kind != PolicyKind::kHintAware) return 1;
  return 1 + c.repeat_victim_weight * (v.preemptions + v.moves);
}

VictimCost CostOf(const Job& v, double now, const PolicyOptions& c, bool for_high, int preemptor_gpus,
                  bool high_wait_at_risk) {
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
    if (c.ahead_checkpoints > 0 && SaveInFlight(v, now, c))
      save_wait = std::max(0.0, v.request_time + save_wait - now);
    out.save_s = save_wait;
    double needed = std::max(h.grace.needed_s, save_wait);
    // A job that saves on SIGTERM at all (granted > 0) gets a sized grace when the policy gives one.
    const double sized = SigtermGrace(v, now, c);
    const double granted = h.grace.granted_s > 0 && sized > 0 ? sized : h.grace.granted_s;
    bool sig_ok = c.sigterm_save && granted > 0 && needed <= granted;
    bool ckpt_ok = c.checkpoint_then_evict && save_wait <= c.checkpoint_deadline_s;
    double tolerable = TolerableWait(v, c);
    // Killing a slow saver saves the preemptor the wait; the wait costs the GPUs it holds beyond
    // the victim's own (those are busy with the save, priced as save_lost).
    const int idle_gpus = std::max(0, preemptor_gpus - v.gpus);
    const double kill_limit = KillMaxLost(c, high_wait_at_risk);
    bool too_slow = for_high && tolerable > 0 && save_wait > tolerable && (kill_limit <= 0 || lost <= kill_limit) &&
                    (preemptor_gpus <= 0 || high_wait_at_risk ||
                     v.gpus * lost <= v.gpus * save_lost + idle_gpus * save_wait);
    if (too_slow) sig_ok = ckpt_ok = false;
    if (for_high && c.kill_now_max_lost_s > 0 && lost <= c.kill_now_max_lost_s) {
      out.mode = EvictionMode::kKillSmall;
      out.grace_s = 0;
    } else if ((save_lost < lost || !c.kill_when_cheaper) && (sig_ok || ckpt_ok)) {
      out.mode = sig_ok ? EvictionMode::kSaveInGrace : EvictionMode::kCheckpointFirst;
      out.checkpoint_first = !sig_ok;
      if (sig_ok && granted != h.grace.granted_s) out.grace_s = granted;
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
  out.rank_gpu_s = out.lost_gpu_s * RepeatFactor(v, c);
  return out;
}

void VictimCosts::init(CostTable* t, const PolicyOptions* config, bool for_high, int preemptor_gpus) const {
  t->config = config;
  t->for_high = for_high;
  t->preemptor_gpus = preemptor_gpus;
  t->cost.clear();  // sized on its first lookup
  t->done.clear();
}

const VictimCost& VictimCosts::lookup(CostTable* t, int job) const {
  static const VictimCost kNotRunning;
  const int k = slot_[job];
  if (k < 0) return kNotRunning;
  if (t->done.empty()) {
    t->cost.resize(running_.size());
    t->done.assign(running_.size(), 0);
  }
  if (!t->done[k]) {
    if (cfg_.kind != PolicyKind::kFcfs) t->cost[k] = CostOf(st_.jobs[job], st_.now, *t->config, t->for_high, t->preemptor_gpus,
                                                     t->for_high && t->preemptor_gpus > 0 && high_wait_at_risk_);
    t->done[k] = 1;
  }
  return t->cost[k];
}

double VictimCosts::lost_work_s(int job) const {
  const int k = slot_[job];
  if (k < 0) return 0;
  if (!lost_done_[k]) {
    lost_work_s_[k] = EstimatedLostWork(st_.jobs[job], st_.now, cfg_);
    lost_done_[k] = 1;
  }
  return lost_work_s_[k];
}

CostView VictimCosts::for_high(int gpus) const {
  if (!split_high_) return {this, &for_high_};
  if (gpus < min_gpus_) return {this, &for_small_high_};
  auto it = for_high_by_gpus_.find(gpus);
  if (it != for_high_by_gpus_.end()) return {this, &it->second};
  CostTable& t = for_high_by_gpus_[gpus];
  init(&t, &cfg_, true, gpus);
  return {this, &t};
}

VictimCosts::VictimCosts(const ClusterState& st, const PolicyOptions& cfg, const RunningOn& running_on,
                         bool high_wait_at_risk)
    : st_(st), cfg_(cfg), small_(cfg), slot_(st.jobs.size(), -1), high_wait_at_risk_(high_wait_at_risk) {
  // With a tolerable wait, high preemptors' costs depend on their size (for_high()).
  split_high_ = cfg.kind == PolicyKind::kHintAware && cfg.high_tolerable_wait != TolerableWait::kOff;
  min_gpus_ = std::max(1, cfg.tolerable_wait_min_gpus);
  small_.high_tolerable_wait = TolerableWait::kOff;
  running_.reserve(running_on.total());
  for (int node = 0; node < running_on.nodes(); ++node) {
    for (int vi : running_on[node]) {
      slot_[vi] = static_cast<int>(running_.size());
      running_.push_back(vi);
    }
  }
  lost_work_s_.resize(running_.size(), 0);
  lost_done_.assign(running_.size(), 0);
  init(&ordinary_, &cfg_, false, 0);
  if (split_high_) init(&for_small_high_, &small_, true, 0);
  else init(&for_high_, &cfg_, true, 0);
}

bool HighWaitAtRisk(const ClusterState& st, const JobIndex* index, const PolicyOptions& c) {
  if (c.kind != PolicyKind::kHintAware || c.high_wait_guard_s <= 0 || c.high_tolerable_wait == TolerableWait::kOff)
    return false;
  int n = 0, late = 0;
  const double since = st.now - c.high_wait_guard_window_s;
  for (auto it = st.high_starts.rbegin(); it != st.high_starts.rend() && it->time >= since; ++it) {
    n++;
    late += it->wait_s > c.high_wait_guard_s;
  }
  // High jobs still waiting for their first start count with the wait so far.
  auto count_pending = [&](const Job& j) {
    if (j.cls != PriorityClass::kHigh || j.phase != JobPhase::kPending || j.preemptions > 0 || j.moves > 0) return;
    n++;
    late += st.now - j.submit_time > c.high_wait_guard_s;
  };
  if (index) {
    for (const auto& group : index->pending(static_cast<int>(PriorityClass::kHigh)))
      for (const PendingKey& k : group.second) count_pending(st.jobs[k.index]);
  } else {
    for (const Job& j : st.jobs) count_pending(j);
  }
  return n >= c.high_wait_guard_min_jobs && late + 1 > c.high_wait_guard_fraction * n &&
         late <= c.high_wait_guard_hopeless_fraction * n;
}

}  // namespace preempt::sched
