#include "cluster_rules.h"

#include <algorithm>

#include "job_index.h"

namespace preempt::sched {

ClusterRules::ClusterRules(PassState* pass) : p_(*pass) {
  const PolicyOptions& cfg = p_.cfg;
  budget_on_ = p_.hint && cfg.budget_window_s > 0 &&
               (cfg.budget_max_preemptions > 0 || cfg.budget_max_lost_gpu_hours > 0);
  if (!budget_on_) return;
  for (const PreemptionRecord& r : p_.st.history) {
    if (r.time <= p_.now - cfg.budget_window_s || r.time > p_.now) continue;
    QueueBudget& b = budget_[r.queue];
    b.count++;
    b.lost_gpu_h += r.lost_gpu_hours;
    b.oldest = std::min(b.oldest, r.time);
  }
}

bool ClusterRules::in_min_runtime(const Job& v, bool note_release) {
  const PolicyOptions& cfg = p_.cfg;
  // A job preempted or moved before is protected the longer after each restart.
  const double min_runtime_s = cfg.min_runtime_s + cfg.min_runtime_per_preemption_s * (v.preemptions + v.moves);
  if (!p_.hint || cfg.min_runtime_s <= 0 || p_.now >= v.start_time + min_runtime_s) return false;
  if (note_release) p_.min_runtime_release = std::min(p_.min_runtime_release, v.start_time + min_runtime_s);
  return true;
}

bool ClusterRules::serial_victim(const Job& v, const Job& j, bool note_release) {
  const PolicyOptions& cfg = p_.cfg;
  if (!p_.hint || cfg.protect_after_preemptions <= 0 || v.preemptions + v.moves < cfg.protect_after_preemptions)
    return false;
  if (note_release && j.cls == PriorityClass::kHigh && cfg.high_min_runtime_override_s > 0)
    p_.min_runtime_release = std::min(p_.min_runtime_release, j.submit_time + cfg.high_min_runtime_override_s);
  return true;
}

bool ClusterRules::overrides_min_runtime(const Job& j) const {
  return p_.hint && p_.cfg.high_min_runtime_override_s > 0 && j.cls == PriorityClass::kHigh &&
         p_.now - j.submit_time >= p_.cfg.high_min_runtime_override_s;
}

std::optional<std::string> ClusterRules::exceeds_budget(const std::vector<int>& victims,
                                                       const std::vector<VictimCost>& costs) {
  if (!budget_on_) return std::nullopt;
  const PolicyOptions& cfg = p_.cfg;
  std::map<std::string, QueueBudget> trial;
  for (size_t k = 0; k < victims.size(); ++k) {
    QueueBudget& b = trial[p_.jobs[victims[k]].queue];
    b.count++;
    b.lost_gpu_h += costs[k].lost_gpu_s / 3600.0;
  }
  for (const auto& [queue, t] : trial) {
    auto it = budget_.find(queue);
    int count = (it == budget_.end() ? 0 : it->second.count) + t.count;
    double gpu_h = (it == budget_.end() ? 0 : it->second.lost_gpu_h) + t.lost_gpu_h;
    if ((cfg.budget_max_preemptions > 0 && count > cfg.budget_max_preemptions) ||
        (cfg.budget_max_lost_gpu_hours > 0 && gpu_h > cfg.budget_max_lost_gpu_hours)) {
      if (it != budget_.end()) p_.recheck(it->second.oldest + cfg.budget_window_s);
      return queue;
    }
  }
  return std::nullopt;
}

void ClusterRules::charge_budget(const Job& v, const VictimCost& vc) {
  if (!budget_on_) return;
  QueueBudget& b = budget_[v.queue];
  b.count++;
  b.lost_gpu_h += vc.lost_gpu_s / 3600.0;
  b.oldest = std::min(b.oldest, p_.now);
}

bool ClusterRules::feasible(const Job& j, const std::vector<int>& victims, const std::vector<VictimCost>& costs,
                            int low_taken, int freed_gpus) {
  if (!p_.hint) return true;
  const int* placed = p_.placed_by_class;
  if (low_taken > 0 && placed[0] - low_taken < p_.low_share) {
    low_share_blocked = true;
    return false;
  }
  if (j.cls != PriorityClass::kHigh && placed[0] + placed[1] - freed_gpus + j.gpus > p_.nonhigh_cap) return false;
  if (std::optional<std::string> queue = exceeds_budget(victims, costs)) {
    budget_blocked = true;
    budget_queue = *queue;
    return false;
  }
  return true;
}

bool ClusterRules::headroom_allows(const Job& j) const {
  if (j.cls == PriorityClass::kHigh) return true;
  const int* placed = p_.placed_by_class;
  int nonhigh = placed[0] + placed[1];
  bool within_share = j.cls == PriorityClass::kLow && placed[0] + j.gpus <= p_.low_share;
  bool ok = within_share || nonhigh + j.gpus <= p_.nonhigh_cap;
  // While the reserve is kept free, non-high work does not start into it; some low jobs may.
  const int left_free = p_.free_sum() + p_.leaving_unclaimed - j.gpus;
  if (!ok || within_share || left_free >= p_.reserve) return ok;
  const double exempt_at = low_exempt_at(j, left_free);
  if (p_.now >= exempt_at || !headroom_kept_free()) return true;
  if (exempt_at < kInf) p_.recheck(exempt_at);  // held until then
  return false;
}

double ClusterRules::low_exempt_at(const Job& j, int left_free) const {
  if (j.cls != PriorityClass::kLow) return kInf;
  const PolicyOptions& cfg = p_.cfg;
  if (cfg.headroom_low_restarts && j.preemptions > 0) return -kInf;  // preempted before
  if (cfg.headroom_low_wait_s <= 0 || j.gpus > p_.reserve) return kInf;
  // One GPU of the reserve at a time goes to waiting low jobs.
  if (left_free < p_.reserve - 1) return kInf;
  return j.submit_time + cfg.headroom_low_wait_s;
}

bool ClusterRules::headroom_keep_free_on() const {
  return p_.reserve > 0 && (p_.cfg.headroom_keep_free || p_.cfg.refill_headroom);
}

bool ClusterRules::headroom_kept_free() const {
  const PolicyOptions& cfg = p_.cfg;
  if (!headroom_keep_free_on()) return false;
  if (cfg.headroom_high_window_s <= 0) return true;
  return p_.before(last_high_submit() + cfg.headroom_high_window_s);  // recent high demand
}

bool ClusterRules::keeps_off_reserved_node(const Job& j, int node) {
  if (node < 0 || p_.free(node) != p_.st.nodes[node].gpus) return false;  // not a whole free node
  if (p_.st.nodes[node].gpus != p_.max_node) return false;  // the reserve is of the largest nodes
  if (j.claimed_node == node) return false;                               // its victims' node
  return reserve_binds(j);
}

bool ClusterRules::reserve_binds(const Job& j) {
  const PolicyOptions& cfg = p_.cfg;
  if (!p_.hint || cfg.reserved_nodes <= 0 || j.cls == PriorityClass::kHigh) return false;
  if (p_.whole_free() > cfg.reserved_nodes) return false;  // more are free than reserved
  if (j.gpus * FullRestoreOf(j, cfg) < cfg.reserved_nodes_min_restore_gpu_s) return false;
  if (cfg.reserved_nodes_high_window_s > 0 && !p_.before(last_high_submit() + cfg.reserved_nodes_high_window_s))
    return false;  // no recent high demand
  // Without medium work, the jobs kept off are low jobs: a shorter bound on the wait for a first start.
  const double max_wait = p_.no_medium && j.preemptions == 0 ? cfg.reserved_nodes_max_first_wait_without_medium_s
                                                             : cfg.reserved_nodes_max_wait_s;
  if (max_wait > 0 && !p_.before(j.pending_since() + max_wait)) return false;  // kept off long enough
  return true;
}

double ClusterRules::last_high_submit() const {
  if (last_high_known_) return last_high_submit_;
  last_high_known_ = true;
  const int high = static_cast<int>(PriorityClass::kHigh);
  double t = -kInf;
  if (p_.index) {
    for (int i : p_.index->placed())
      if (p_.jobs[i].cls == PriorityClass::kHigh) t = std::max(t, p_.jobs[i].submit_time);
    for (const auto& group : p_.index->pending(high))
      if (!group.second.empty()) t = std::max(t, group.second.rbegin()->submit);  // ordered by submit
  } else {
    for (const Job& x : p_.jobs)
      if (x.cls == PriorityClass::kHigh) t = std::max(t, x.submit_time);
  }
  return last_high_submit_ = t;
}

}  // namespace preempt::sched
