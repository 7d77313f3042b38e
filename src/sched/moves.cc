#include "moves.h"

#include <algorithm>
#include <unordered_map>

#include "reasons.h"
#include "victim_search.h"

namespace preempt::sched {
namespace {
// Bounds on the work of one search: nodes evaluated with destinations, searches per pass.
constexpr int kDefragCandidates = 8, kDefragTries = 16;
}  // namespace

Mover::Mover(PassState* pass, ClusterRules* rules, const VictimCosts* costs)
    : p_(*pass), rules_(*rules), costs_(*costs) {}

// A smaller high job that may be moved for high job j: fresh hints, past its minimum run time,
// not moved or preempted within cooldown + minimum run time, and able to save (killing it would
// throw away more than its save loses).
bool Mover::movable(int vi, const Job& j) const {
  const Job& v = p_.jobs[vi];
  const PolicyOptions& cfg = p_.cfg;
  if (p_.chosen[vi] || v.cls != j.cls || v.gpus >= j.gpus || !HintsFresh(v, p_.now, cfg)) return false;
  if (rules_.in_min_runtime(v, /*note_release=*/false)) return false;
  const double spacing = cfg.cooldown_s + cfg.min_runtime_s;
  if (p_.now < v.last_moved + spacing || p_.now < v.last_preempted + spacing) return false;
  const VictimCost& c = costs_.ordinary()[vi];
  if (c.mode == EvictionMode::kSigterm) return false;
  return c.mode != EvictionMode::kKillCheap || costs_.lost_work_s(vi) <= v.hints->cost.stall_s + v.hints->cost.persist_s;
}

// Lower-priority victims on `node` high job j could take now (not chosen, past their minimum run
// time), cheapest first.
std::vector<int> Mover::lower_victims(int node, const Job& j) const {
  const std::vector<Job>& jobs = p_.jobs;
  std::vector<int> out;
  for (int vi : p_.running_on[node]) {
    const Job& v = jobs[vi];
    if (p_.chosen[vi] || v.cls >= j.cls) continue;
    if (rules_.in_min_runtime(v, /*note_release=*/false)) continue;
    out.push_back(vi);
  }
  const CostView hc = costs_.for_high(j.gpus);
  std::sort(out.begin(), out.end(), [&](int a, int b) {
    if (jobs[a].cls != jobs[b].cls) return jobs[a].cls < jobs[b].cls;
    double ca = hc[a].rank_gpu_s / jobs[a].gpus, cb = hc[b].rank_gpu_s / jobs[b].gpus;
    if (ca != cb) return ca < cb;
    return jobs[a].id < jobs[b].id;
  });
  return out;
}

// Node `node` cleared for high job j with lower-priority victims and moves of smaller high jobs:
// lower victims first (together they are too few), then the cheapest moves, then the most
// expensive unneeded ones dropped.
Mover::Cand Mover::candidate(int node, const Job& j) const {
  const std::vector<Job>& jobs = p_.jobs;
  Cand c;
  if (p_.st.nodes[node].gpus < j.gpus) return c;
  const int avail = std::max(0, p_.free(node));
  std::vector<int> low = lower_victims(node, j);
  std::vector<int> mov;
  int low_g = 0, mov_g = 0;
  for (int vi : low) low_g += jobs[vi].gpus;
  if (avail + low_g >= j.gpus) return c;  // the regular search covers it (a cluster-wide rule said no)
  for (int vi : p_.running_on[node])
    if (movable(vi, j)) mov.push_back(vi), mov_g += jobs[vi].gpus;
  if (avail + low_g + mov_g < j.gpus) return c;
  const CostView ordinary = costs_.ordinary();
  std::sort(mov.begin(), mov.end(), [&](int a, int b) {
    double ca = ordinary[a].rank_gpu_s / jobs[a].gpus, cb = ordinary[b].rank_gpu_s / jobs[b].gpus;
    if (ca != cb) return ca < cb;
    return jobs[a].id < jobs[b].id;
  });
  std::vector<int> order = low, order_gpus;
  order.insert(order.end(), mov.begin(), mov.end());
  for (int vi : order) order_gpus.push_back(jobs[vi].gpus);
  int moves = 0;
  for (int pos : TakeUntilFreed(order_gpus, j.gpus - avail)) {
    const int vi = order[pos];
    const bool moved = pos >= static_cast<int>(low.size());
    const VictimCost& vc = moved ? ordinary[vi] : costs_.for_high(j.gpus)[vi];
    moves += moved;
    c.steps.push_back({vi, node, -1, moved ? -2 : -1, vc});
    c.bound += vc.rank_gpu_s;
    c.wait = std::max(c.wait, vc.wait_s);
  }
  if (moves == 0 || moves > p_.cfg.defrag_max_moves) return Cand{};
  c.bound += j.gpus * c.wait;
  c.node = node;
  return c;
}

// Destinations for moved jobs of `gpus` GPUs (cheapest lower-priority victims per node), built on
// first use in one try from the per-pass cache.
const std::vector<const Mover::DestOption*>& Mover::Destinations(
    int gpus, const Job& moved, std::map<int, std::vector<const DestOption*>>* lists) {
  auto built = lists->find(gpus);
  if (built != lists->end()) return built->second;
  std::vector<const DestOption*>& list = (*lists)[gpus];
  NodeCache<DestOption>& dc = dest_cache_[gpus];
  if (dc.version.empty()) {
    dc.version.assign(p_.n_nodes, -1);
    dc.entry.resize(p_.n_nodes);
  }
  const CostView hc = costs_.for_high(gpus);
  for (int node = 0; node < p_.n_nodes; ++node) {
    if (dc.version[node] != p_.node_version(node)) {
      dc.version[node] = p_.node_version(node);
      DestOption d{0, -1, {}};
      int need = gpus - std::max(0, p_.free(node));
      if (p_.st.nodes[node].gpus >= gpus) {
        for (int vi : lower_victims(node, moved)) {
          if (need <= 0) break;
          d.victims.push_back(vi);
          d.cost += hc[vi].rank_gpu_s;
          need -= p_.jobs[vi].gpus;
        }
      }
      if (need <= 0 && !d.victims.empty()) d.node = node;
      dc.entry[node] = std::move(d);
    }
    if (dc.entry[node].node >= 0) list.push_back(&dc.entry[node]);
  }
  std::sort(list.begin(), list.end(), [](const DestOption* a, const DestOption* b) {
    return a->cost != b->cost ? a->cost < b->cost : a->node < b->node;
  });
  return list;
}

// Destinations for candidate c's moved jobs, largest first: best fit on free GPUs elsewhere, else
// the cheapest lower-priority victims elsewhere (one node per move: a node another move of this
// plan already uses is skipped, so no victim is taken twice). False when a move has nowhere to
// go or the plan costs at least best_cost.
bool Mover::place(const Cand& cand, double best_cost, std::map<int, std::vector<const DestOption*>>* lists,
                  Plan* plan) {
  const std::vector<Job>& jobs = p_.jobs;
  Cand c = cand;
  std::vector<Step> steps;  // victims at the destinations
  std::unordered_map<int, int> used_free;
  std::vector<Step*> moved;
  for (Step& s : c.steps)
    if (s.to_node == -2) moved.push_back(&s);
  std::sort(moved.begin(), moved.end(), [&](const Step* a, const Step* b) {
    return jobs[a->vi].gpus != jobs[b->vi].gpus ? jobs[a->vi].gpus > jobs[b->vi].gpus : a->vi < b->vi;
  });
  double cost = c.bound;
  for (Step* mv : moved) {
    const int g = jobs[mv->vi].gpus;
    int fit = -1, fit_free = 1 << 30;
    for (const auto& [f, node] : p_.by_free()) {  // ascending free: the first that fits is the best fit
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
    const DestOption* dest = nullptr;
    for (const DestOption* d : Destinations(g, jobs[mv->vi], lists)) {
      if (d->node == c.node || used_free.count(d->node)) continue;
      dest = d;
      break;
    }
    if (!dest) return false;
    mv->to_node = dest->node;
    used_free[dest->node] += std::min(g, std::max(0, p_.free(dest->node)));  // (also marks it used)
    for (int vi : dest->victims) {
      const VictimCost& vc = costs_.for_high(g)[vi];
      steps.push_back({vi, dest->node, mv->vi, -1, vc});
      cost += vc.rank_gpu_s;
    }
  }
  if (cost >= best_cost) return false;
  plan->cost = cost;
  plan->steps = std::move(c.steps);
  plan->steps.insert(plan->steps.end(), steps.begin(), steps.end());
  plan->free_use.assign(used_free.begin(), used_free.end());
  return true;
}

// The cluster-wide rules (low share, budgets) over everything the plan evicts or moves.
bool Mover::plan_feasible(const Job& j, const Plan& plan) {
  std::vector<int> victims;
  std::vector<VictimCost> costs;
  int low_taken = 0;
  for (const Step& s : plan.steps) {
    victims.push_back(s.vi);
    costs.push_back(s.cost);
    if (p_.jobs[s.vi].cls == PriorityClass::kLow) low_taken += p_.jobs[s.vi].gpus;
  }
  return rules_.feasible(j, victims, costs, low_taken, /*freed_gpus=*/0);
}

bool Mover::try_defrag(int ji) {
  const Job& j = p_.jobs[ji];
  const PolicyOptions& cfg = p_.cfg;
  if (!p_.hint || cfg.defrag_max_moves <= 0 || j.cls != PriorityClass::kHigh || j.gpus < 2) return false;
  if (p_.before(j.submit_time + cfg.defrag_min_wait_s)) return false;
  if (j.gpus >= fail_gpus_ || tries_ >= kDefragTries) return false;
  ++tries_;
  NodeCache<Cand>& cache = cand_cache_[j.gpus];
  if (cache.version.empty()) {
    cache.version.assign(p_.n_nodes, -1);
    cache.entry.resize(p_.n_nodes);
  }
  std::vector<const Cand*> cands;
  for (int node = 0; node < p_.n_nodes; ++node) {
    if (cache.version[node] != p_.node_version(node)) {
      cache.version[node] = p_.node_version(node);
      cache.entry[node] = candidate(node, j);
    }
    if (cache.entry[node].node >= 0) cands.push_back(&cache.entry[node]);
  }
  std::sort(cands.begin(), cands.end(), [](const Cand* a, const Cand* b) {
    return a->bound != b->bound ? a->bound < b->bound : a->node < b->node;
  });
  Plan best;
  std::map<int, std::vector<const DestOption*>> lists;  // by GPUs moved, cheapest first, on first use
  int evaluated = 0;
  for (const Cand* cp : cands) {
    if (cp->bound >= best.cost || ++evaluated > kDefragCandidates) break;
    Plan plan;
    if (!place(*cp, best.cost, &lists, &plan) || !plan_feasible(j, plan)) continue;
    best = std::move(plan);
  }
  if (best.steps.empty()) {
    fail_gpus_ = std::min(fail_gpus_, j.gpus);
    return false;
  }
  commit(ji, best);
  return true;
}

// Emits the plan's actions; its nodes' GPUs are promised (the cleared node to ji).
void Mover::commit(int ji, Plan& best) {
  const Job& j = p_.jobs[ji];
  const int target = best.steps.front().node;
  int n_moves = 0;
  for (const Step& s : best.steps) n_moves += s.to_node >= 0;
  double wait = 0;
  for (Step& s : best.steps) {
    if (s.for_index < 0) s.for_index = ji;
    const VictimCost& vc = s.cost;
    std::string reason = s.to_node >= 0      ? MoveReason(p_, j, s.node, s.to_node, n_moves, vc)
                         : s.for_index == ji ? ClearReason(p_, j, s.node, n_moves, vc)
                                             : MakeRoomReason(p_, j, p_.jobs[s.for_index], s.node, target, vc);
    if (s.for_index == ji) wait = std::max(wait, vc.wait_s);
    p_.evict(VictimAction(p_, s.vi, s.node, p_.jobs[s.for_index].id, s.for_index, vc, std::move(reason), s.to_node));
    rules_.charge_budget(p_.jobs[s.vi], vc);
  }
  for (const auto& [node, g] : best.free_use) p_.set_free(node, p_.free(node) - g);
  for (const Step& s : best.steps) p_.set_free(s.node, p_.free(s.node));  // every node touched changes version
  p_.set_free(target, 0);
  p_.waiting_high.emplace_back(ji, wait);
}

}  // namespace preempt::sched
