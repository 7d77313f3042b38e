// pass_state.h — the mutable state of one Decide() pass.
//
// Decide() places pending jobs one after another; each placement or victim choice changes what
// the next one sees. PassState holds that state: free GPUs per node (with a best-fit index and a
// version per node, so cached per-node results know when they are stale), GPUs placed per class,
// the running jobs per node, the victims already chosen, and the Decisions being built. It is
// created from the ClusterState and dies with the pass.
#pragma once

#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "preempt/sched/policy.h"

namespace preempt::sched {

class JobIndex;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The running jobs of every node (job indices, ascending within a node), in one array: a pass
// builds it once, and a cluster of many nodes does not pay an allocation per node per pass.
class RunningOn {
 public:
  struct Jobs {
    const int* b;
    const int* e;
    const int* begin() const { return b; }
    const int* end() const { return e; }
    size_t size() const { return static_cast<size_t>(e - b); }
  };
  Jobs operator[](int node) const { return {jobs_.data() + start_[node], jobs_.data() + start_[node + 1]}; }
  int nodes() const { return static_cast<int>(start_.size()) - 1; }
  size_t total() const { return jobs_.size(); }
  // (node, job) pairs in ascending job order; every node in [0, n_nodes).
  void build(int n_nodes, const std::vector<std::pair<int, int>>& node_job);

 private:
  std::vector<int> start_{0};  // node n's jobs are jobs_[start_[n], start_[n + 1])
  std::vector<int> jobs_;
};

class PassState {
 public:
  // With `index` (job_index.h), only the jobs holding GPUs are read here.
  PassState(const ClusterState& state, const PolicyOptions& config, const JobIndex* index = nullptr);
  // The pass keeps references to both: a temporary state or options would dangle.
  PassState(ClusterState&&, const PolicyOptions&, const JobIndex* = nullptr) = delete;
  PassState(const ClusterState&, PolicyOptions&&, const JobIndex* = nullptr) = delete;

  const ClusterState& st;
  const PolicyOptions& cfg;
  const std::vector<Job>& jobs;
  const double now;
  const bool hint;  // cfg.kind == kHintAware: the hint-aware rules apply
  const int n_nodes;
  const JobIndex* const index;  // null: every job is read
  int total_gpus = 0, max_node = 0;

  // Running jobs per node (job indices), and GPUs of jobs checkpointing or evicting there.
  RunningOn running_on;
  std::vector<int> leaving_on;
  // GPUs held per class by placed jobs (victims chosen in this pass no longer count).
  int placed_by_class[kNumClasses] = {0, 0, 0};
  int pending_by_class[kNumClasses] = {0, 0, 0};  // pending jobs per class at the start of the pass
  // No medium-class job held or waited for GPUs at the start of the pass (two priority classes, or
  // a lull in medium work): PolicyOptions::fewest_victims_without_medium and
  // reserved_headroom_without_medium apply.
  bool no_medium = false;
  int started_by_class[kNumClasses] = {0, 0, 0};  // ... of which started in this pass
  std::vector<char> chosen;  // by job index: already a victim (or moved) in this pass
  // GPUs of victims on their way out that nobody is waiting for (headroom refills): they count
  // as free for the reserve, so the reserve is not refilled twice.
  int leaving_unclaimed = 0;
  // Cluster limits from the configuration (hint-aware only; whole GPUs: the reserve rounds down,
  // so a one-slot machine reserves nothing).
  // Classes in their suspension window now (PolicyOptions::suspend; never under FCFS).
  bool suspended[kNumClasses] = {false, false, false};
  double nonhigh_cap = kInf;
  double low_share = 0;
  int reserve = 0;

  Decisions out;
  // Earliest time a lower job protected by its minimum run time becomes preemptible.
  double min_runtime_release = kInf;
  // High-priority jobs left pending: waiting for victims (seconds left), or blocked (why).
  std::vector<std::pair<int, double>> waiting_high;
  std::vector<std::pair<int, WaitCause>> blocked_high;

  int free(int node) const { return free_[node]; }
  int free_sum() const { return free_sum_; }  // free GPUs over all nodes (negative counts as 0)
  // Nodes of the largest size (max_node GPUs) with every GPU free: the whole nodes the reserve
  // (PolicyOptions::reserved_nodes) counts. A smaller node, free, does not help a job that needs a
  // large one.
  int whole_free() const { return whole_free_; }
  // Bumped on every change of a node's free GPUs.
  int node_version(int node) const { return node_version_[node]; }
  // (free, node) of nodes with free GPUs, ascending: the first that fits is the best fit.
  const std::set<std::pair<int, int>>& by_free() const { return by_free_; }
  int best_fit(int gpus) const;  // -1 when no node has that many free
  void set_free(int node, int value);

  void recheck(double at) { out.recheck_at = std::min(out.recheck_at, at); }
  // Is it still before `at`? Then a recheck is asked for at `at`: a rule that holds until then
  // (a cooldown, a delay, a window, a bound) lapses on its own.
  bool before(double at) {
    if (now >= at) return false;
    recheck(at);
    return true;
  }
  void block(int ji, WaitCause why) {
    if (jobs[ji].cls == PriorityClass::kHigh) blocked_high.emplace_back(ji, why);
  }
  // Emits a start of job ji on `node` and takes its GPUs there.
  void start(int ji, int node, std::string reason);
  // Emits a victim action (built by VictimAction) and takes the victim's GPUs from its class.
  void evict(JobAction action);
  // Emits the withdrawal of checkpointing victim vi's eviction (promised to `for_job`, index
  // for_index or -1): it stays on its node, so its GPUs no longer count as leaving.
  void withdraw(int vi, const std::string& for_job, int for_index, std::string reason);

 private:
  std::vector<int> free_;
  std::set<std::pair<int, int>> by_free_;
  std::vector<int> node_version_;
  int free_sum_ = 0;
  int whole_free_ = 0;
};

}  // namespace preempt::sched
