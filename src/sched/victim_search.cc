#include "victim_search.h"

#include <algorithm>
#include <cmath>

namespace preempt::sched {

bool BetterChoice(const Choice& a, const Choice& b, PolicyKind kind) {
  if (b.node < 0) return true;
  if (a.max_class != b.max_class) return a.max_class < b.max_class;
  if (kind == PolicyKind::kKubernetes) {
    if (a.count != b.count) return a.count < b.count;
    if (a.latest_start != b.latest_start) return a.latest_start > b.latest_start;
    return a.node < b.node;
  }
  if (a.protected_gpus != b.protected_gpus) return a.protected_gpus < b.protected_gpus;
  if (a.late != b.late) return !a.late;
  if (a.victims_key != b.victims_key) return a.victims_key < b.victims_key;
  if (a.excess_key != b.excess_key) return a.excess_key < b.excess_key;
  if (a.spreads_high != b.spreads_high) return !a.spreads_high;
  if (std::fabs(a.cost - b.cost) > 1e-9) return a.cost < b.cost;
  if (std::fabs(a.lost_work_gpu_s - b.lost_work_gpu_s) > 1e-9) return a.lost_work_gpu_s < b.lost_work_gpu_s;
  if (a.count != b.count) return a.count < b.count;
  return a.node < b.node;
}

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

VictimSearch::VictimSearch(PassState* pass, ClusterRules* rules, const VictimCosts* costs)
    : p_(*pass), rules_(*rules), costs_(*costs), heaps_(2 * static_cast<size_t>(kNumClasses) * (p_.max_node + 1)) {
  // Decided once per pass from the state it started with, so every node's choice is ranked alike.
  by_count_ = p_.cfg.fewest_victims_without_medium && p_.no_medium;
  pack_high_ = p_.cfg.pack_high_jobs && !p_.no_medium;
}

// std heaps put the largest first: "less" = worse choice.
bool VictimSearch::heap_less(const HeapItem& a, const HeapItem& b) const {
  return BetterChoice(b.choice, a.choice, p_.cfg.kind);
}

// Kubernetes: remove all lower-priority pods, then reprieve the most important ones (higher
// priority, then earlier start) while the preemptor still fits.
void VictimSearch::kubernetes_order(const std::vector<int>& cand_in, int cand_gpus, int need, Choice* c) const {
  const std::vector<Job>& jobs = p_.jobs;
  std::vector<int> cand = cand_in;
  std::sort(cand.begin(), cand.end(), [&](int a, int b) {
    if (jobs[a].cls != jobs[b].cls) return jobs[a].cls > jobs[b].cls;
    if (jobs[a].start_time != jobs[b].start_time) return jobs[a].start_time < jobs[b].start_time;
    return jobs[a].id < jobs[b].id;
  });
  int freed = cand_gpus;
  for (int vi : cand) {
    if (freed - jobs[vi].gpus >= need) freed -= jobs[vi].gpus;
    else c->victims.push_back(vi);
  }
}

// Hint-aware: cheapest first (lower class first, then jobs outside their minimum run time, then
// lost GPU-s per GPU), then the most expensive victims that turn out not to be needed dropped.
void VictimSearch::cheapest_first(const Job& j, const std::vector<int>& cand, const std::vector<char>& prot,
                                  int need, Choice* c) const {
  const std::vector<Job>& jobs = p_.jobs;
  const CostView costs = costs_.for_preemptor(j);
  std::vector<VictimCost> cand_cost;
  for (int vi : cand) cand_cost.push_back(costs[vi]);
  std::vector<int> order(cand.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Job& x = jobs[cand[a]];
    const Job& y = jobs[cand[b]];
    if (x.cls != y.cls) return x.cls < y.cls;
    if (prot[a] != prot[b]) return prot[a] < prot[b];
    double ca = cand_cost[a].rank_gpu_s / x.gpus, cb = cand_cost[b].rank_gpu_s / y.gpus;
    if (ca != cb) return ca < cb;
    return x.id < y.id;
  });
  std::vector<int> order_gpus;
  for (int k : order) order_gpus.push_back(jobs[cand[k]].gpus);
  double wait = 0, lost = 0, raw = 0;
  for (int pos : TakeUntilFreed(order_gpus, need)) {
    const int k = order[pos];
    const Job& v = jobs[cand[k]];
    if (v.cls == PriorityClass::kLow) c->low_taken += v.gpus;
    c->freed_gpus += v.gpus;
    if (prot[k]) c->protected_gpus += v.gpus;
    c->victims.push_back(cand[k]);
    c->costs.push_back(cand_cost[k]);
    wait = std::max(wait, cand_cost[k].wait_s);
    lost += cand_cost[k].rank_gpu_s;
    raw += v.gpus * costs_.lost_work_s(cand[k]);
  }
  c->cost = lost + j.gpus * wait;
  const PolicyOptions& cfg = p_.cfg;
  c->late = j.cls == PriorityClass::kHigh && cfg.high_in_time_first && cfg.high_wait_guard_s > 0 &&
            wait > cfg.high_wait_guard_s;
  c->lost_work_gpu_s = raw;
  const int count = static_cast<int>(c->victims.size());
  if (by_count_) {
    c->victims_key = count;
    c->excess_key = std::max(0, c->freed_gpus - need);
  } else {
    c->victims_key = cfg.few_victims_first > 0 && count > cfg.few_victims_first;
  }
}

// The best victim set on one node for pending job j (node = -1 when there is none).
Choice VictimSearch::evaluate(int node, const Job& j) {
  const std::vector<Job>& jobs = p_.jobs;
  const int cls = static_cast<int>(j.cls);
  int need = j.gpus - std::max(0, p_.free(node));
  if (need <= 0) return Choice{};  // (only when headroom blocked a fit; not reached)
  std::vector<int> cand;
  std::vector<char> prot;  // by candidate: inside its minimum run time, which the override lifts
  int cand_gpus = 0;
  const bool ovr = rules_.overrides_min_runtime(j);
  bool runs_high = false;
  for (int vi : p_.running_on[node]) {
    const Job& v = jobs[vi];
    runs_high = runs_high || v.cls == PriorityClass::kHigh;
    if (p_.chosen[vi] || static_cast<int>(v.cls) >= cls) continue;
    // Protected: a candidate only past the override (its release then matters to nobody).
    const bool in_min_runtime =
        rules_.in_min_runtime(v, /*note_release=*/!ovr) || rules_.serial_victim(v, j, /*note_release=*/!ovr);
    if (in_min_runtime && !ovr) continue;
    prot.push_back(in_min_runtime);
    cand.push_back(vi);
    cand_gpus += v.gpus;
  }
  if (cand_gpus < need) return Choice{};
  Choice c;
  c.node = node;
  if (p_.cfg.kind == PolicyKind::kKubernetes) kubernetes_order(cand, cand_gpus, need, &c);
  else cheapest_first(j, cand, prot, need, &c);
  c.count = static_cast<int>(c.victims.size());
  for (int vi : c.victims) c.max_class = std::max(c.max_class, static_cast<int>(jobs[vi].cls));
  for (int vi : c.victims)
    if (static_cast<int>(jobs[vi].cls) == c.max_class) c.latest_start = std::max(c.latest_start, jobs[vi].start_time);
  if (c.victims.empty()) return Choice{};
  c.spreads_high = pack_high_ && j.cls == PriorityClass::kHigh && j.gpus < p_.st.nodes[node].gpus && !runs_high;
  return c;
}

bool VictimSearch::find(int ji, Choice* best, WaitCause* why) {
  const Job& j = p_.jobs[ji];
  const int cls = static_cast<int>(j.cls);
  const int ovr = rules_.overrides_min_runtime(j) ? 1 : 0;
  if (j.gpus >= fail_gpus_[ovr][cls]) {
    *why = fail_cause_[ovr][cls];
    return false;
  }
  auto less = [this](const HeapItem& a, const HeapItem& b) { return heap_less(a, b); };
  // Jobs that override the minimum run time see more victims: their own heaps.
  const size_t key = (static_cast<size_t>(ovr) * kNumClasses + cls) * (p_.max_node + 1) + j.gpus;
  rules_.low_share_blocked = false;
  const bool budget_was_blocked = rules_.budget_blocked;
  rules_.budget_blocked = false;
  Heap& heap = heaps_[key];
  if (!heap.built) {
    heap.built = true;
    for (int node = 0; node < p_.n_nodes; ++node) {
      if (p_.st.nodes[node].gpus < j.gpus) continue;
      Choice c = evaluate(node, j);
      if (c.node < 0) continue;
      heap.items.push_back({p_.node_version(node), std::move(c)});
    }
    std::make_heap(heap.items.begin(), heap.items.end(), less);
  }
  *best = Choice{};
  std::vector<HeapItem> set_aside;  // locally fine, but failing a cluster-wide rule now
  while (!heap.items.empty()) {
    std::pop_heap(heap.items.begin(), heap.items.end(), less);
    HeapItem top = std::move(heap.items.back());
    heap.items.pop_back();
    const int node = top.choice.node;
    if (top.version != p_.node_version(node)) {
      Choice c = evaluate(node, j);
      if (c.node >= 0) {
        heap.items.push_back({p_.node_version(node), std::move(c)});
        std::push_heap(heap.items.begin(), heap.items.end(), less);
      }
      continue;
    }
    const Choice& c = top.choice;
    if (!rules_.feasible(j, c.victims, c.costs, c.low_taken, c.freed_gpus)) {
      set_aside.push_back(std::move(top));
      continue;
    }
    *best = std::move(top.choice);  // consumed: the node changes when its victims are taken
    break;
  }
  for (auto& it : set_aside) {
    heap.items.push_back(std::move(it));
    std::push_heap(heap.items.begin(), heap.items.end(), less);
  }
  if (best->node >= 0) {
    rules_.budget_blocked = rules_.budget_blocked || budget_was_blocked;
    return true;
  }
  *why = rules_.low_share_blocked         ? WaitCause::kLowShare
         : rules_.budget_blocked          ? WaitCause::kBudget
         : p_.min_runtime_release < kInf  ? WaitCause::kMinRuntime
                                          : WaitCause::kNoVictim;
  rules_.budget_blocked = rules_.budget_blocked || budget_was_blocked;
  fail_gpus_[ovr][cls] = j.gpus;  // smaller than any before (larger requests returned above)
  fail_cause_[ovr][cls] = *why;
  return false;
}

}  // namespace preempt::sched
