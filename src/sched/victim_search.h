// victim_search.h — the best node and victim set for one pending job.
//
// Per node, the cheapest set of lower-priority running jobs that frees enough GPUs (hint-aware:
// by lost GPU-seconds plus the preemptor's wait; k8s: Kubernetes' own order); across nodes, the
// best set that passes the cluster-wide rules. Nodes are kept in a lazy heap per (class, GPUs,
// override): within a pass a node's choice only gets worse, so a stale entry is re-evaluated and
// pushed back. A (class, GPUs) that found nothing cannot succeed later in the pass (nodes only
// fill up), nor can a larger request of the same class.
#pragma once

#include <vector>

#include "cluster_rules.h"
#include "pass_state.h"
#include "victim_cost.h"

namespace preempt::sched {

// One node's victim set and the keys that rank it against other nodes'.
struct Choice {
  int node = -1;  // -1: none
  std::vector<int> victims;  // job indices
  std::vector<VictimCost> costs;
  int max_class = -1;
  double cost = kInf;           // hint-aware: lost GPU-s + preemptor GPU-s waiting
  double lost_work_gpu_s = 0;   // hint-aware tie-break: raw uncommitted work
  int count = 0;
  double latest_start = -kInf;  // k8s: start of the most recently started highest-priority victim
  int low_taken = 0, freed_gpus = 0;  // for the cluster-wide rules
  // GPUs of victims inside their minimum run time (taken by a high job past the override): the
  // fewer the better, before cost.
  int protected_gpus = 0;
  // A high preemptor's victims take longer than high_wait_guard_s to leave (high_in_time_first):
  // ranked after every choice that is in time, after protected GPUs.
  bool late = false;
  // How the number of victims ranks the choice, after `late`, lower first. With
  // PolicyOptions::few_victims_first: 1 when more victims than that, else 0 (excess_key 0). While
  // fewest_victims_without_medium applies: the number of victims, then the GPUs freed beyond the
  // preemptor's need. (The excess can shrink when the node fills up during the pass; the lazy
  // heap then re-ranks that node only when its stale entry reaches the top.)
  int victims_key = 0, excess_key = 0;
  // PolicyOptions::pack_high_jobs: a high preemptor smaller than the node would take victims on a
  // node that runs no high job (ranked after the nodes that run one, before cost).
  bool spreads_high = false;
};
bool BetterChoice(const Choice& a, const Choice& b, PolicyKind kind);

// Candidates are taken in the order given until `need` GPUs are freed, then the latest-taken ones
// that turn out not to be needed are dropped again. Returns the kept positions.
std::vector<int> TakeUntilFreed(const std::vector<int>& gpus_in_order, int need);

class VictimSearch {
 public:
  VictimSearch(PassState* pass, ClusterRules* rules, const VictimCosts* costs);

  // The best victim set for pending job ji that passes the cluster rules now. False when there
  // is none, with the reason in *why.
  bool find(int ji, Choice* best, WaitCause* why);

 private:
  struct HeapItem {
    int version;
    Choice choice;
  };
  struct Heap {
    bool built = false;
    std::vector<HeapItem> items;
  };
  Choice evaluate(int node, const Job& j);
  void kubernetes_order(const std::vector<int>& cand, int cand_gpus, int need, Choice* c) const;
  // prot[k]: cand[k] is inside its minimum run time (the preemptor overrides it).
  void cheapest_first(const Job& j, const std::vector<int>& cand, const std::vector<char>& prot, int need,
                      Choice* c) const;
  bool heap_less(const HeapItem& a, const HeapItem& b) const;

  PassState& p_;
  ClusterRules& rules_;
  const VictimCosts& costs_;
  std::vector<Heap> heaps_;
  bool by_count_ = false;  // fewest_victims_without_medium applies in this pass
  bool pack_high_ = false;  // pack_high_jobs applies in this pass
  int fail_gpus_[2][kNumClasses] = {{1 << 30, 1 << 30, 1 << 30}, {1 << 30, 1 << 30, 1 << 30}};
  WaitCause fail_cause_[2][kNumClasses] = {};
};

}  // namespace preempt::sched
