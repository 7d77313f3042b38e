// moves.h — defragmentation for high priority: moving smaller high jobs off one node.
//
// When no node can free enough GPUs for a high job from lower-priority jobs alone, because
// smaller high jobs are spread over the nodes, up to defrag_max_moves of them are moved off one
// node (saved, then restarted at once elsewhere, on free GPUs or in place of lower-priority
// victims evicted for them). Node choice: least total cost (lost work of the victims, saves and
// restores of the moved jobs, the preemptor's wait at its GPU count), by branch and bound on the
// cost without destinations. Candidates and destinations are cached per pass by GPU count and
// recomputed for nodes whose free GPUs changed.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "cluster_rules.h"
#include "pass_state.h"
#include "victim_cost.h"

namespace preempt::sched {

class Mover {
 public:
  Mover(PassState* pass, ClusterRules* rules, const VictimCosts* costs);

  // Clears a node for pending high job ji with moves when the rules and bounds allow: emits the
  // actions and returns true, or returns false and emits nothing.
  bool try_defrag(int ji);

 private:
  struct Step {
    int vi;         // victim or moved job
    int node;       // where it runs
    int for_index;  // the job it makes room for (the preemptor, or a moved job); -1: the preemptor
    int to_node;    // moved jobs: where they restart (-2 until placed); -1 for victims
    VictimCost cost;
  };
  struct Cand {  // a node cleared by lower victims and moves, destinations not yet chosen
    double bound = 0;
    int node = -1;  // -1: no candidate on this node
    std::vector<Step> steps;
    double wait = 0;
  };
  struct DestOption {  // lower-priority victims on one node that make room for a moved job
    double cost;
    int node;
    std::vector<int> victims;
  };
  struct Plan {  // a candidate with destinations
    double cost = kInf;
    std::vector<Step> steps;
    std::vector<std::pair<int, int>> free_use;  // (node, free GPUs taken there)
  };
  template <typename T>
  struct NodeCache {  // per-node entries, valid while the node's version is unchanged
    std::vector<int> version;
    std::vector<T> entry;
  };

  bool movable(int vi, const Job& j) const;
  std::vector<int> lower_victims(int node, const Job& j) const;
  Cand candidate(int node, const Job& j) const;
  const std::vector<const DestOption*>& Destinations(int gpus, const Job& moved,
                                                     std::map<int, std::vector<const DestOption*>>* lists);
  bool place(const Cand& c, double best_cost, std::map<int, std::vector<const DestOption*>>* lists, Plan* plan);
  bool plan_feasible(const Job& j, const Plan& plan);
  void commit(int ji, Plan& best);

  PassState& p_;
  ClusterRules& rules_;
  const VictimCosts& costs_;
  int tries_ = 0;
  int fail_gpus_ = 1 << 30;
  std::map<int, NodeCache<Cand>> cand_cache_;        // by the preemptor's GPU count (all high)
  std::map<int, NodeCache<DestOption>> dest_cache_;  // by the moved job's GPU count
};

}  // namespace preempt::sched
