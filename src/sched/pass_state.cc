#include "pass_state.h"

#include <algorithm>
#include <cmath>

#include "job_index.h"

namespace preempt::sched {

void RunningOn::build(int n_nodes, const std::vector<std::pair<int, int>>& node_job) {
  start_.assign(static_cast<size_t>(n_nodes) + 1, 0);
  for (const auto& [node, job] : node_job) start_[node + 1]++;
  for (int n = 0; n < n_nodes; ++n) start_[n + 1] += start_[n];
  jobs_.resize(node_job.size());
  std::vector<int> next(start_.begin(), start_.end() - 1);
  for (const auto& [node, job] : node_job) jobs_[next[node]++] = job;
}

PassState::PassState(const ClusterState& state, const PolicyOptions& config, const JobIndex* job_index)
    : st(state),
      cfg(config),
      jobs(state.jobs),
      now(state.now),
      hint(config.kind == PolicyKind::kHintAware),
      n_nodes(static_cast<int>(state.nodes.size())),
      index(job_index),
      leaving_on(n_nodes, 0),
      chosen(state.jobs.size(), 0),
      free_(n_nodes),
      node_version_(n_nodes, 0) {
  for (int i = 0; i < n_nodes; ++i) {
    free_[i] = st.nodes[i].gpus;
    total_gpus += st.nodes[i].gpus;
    max_node = std::max(max_node, st.nodes[i].gpus);
  }
  // Jobs that hold GPUs, ascending (pending ones are skipped below unless they hold a move).
  std::vector<int> all;
  if (!index) {
    all.resize(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) all[i] = static_cast<int>(i);
  }
  const std::vector<int>& holders = index ? index->placed() : all;
  std::vector<std::pair<int, int>> running;  // (node, job)
  running.reserve(holders.size());
  for (int i : holders) {
    const Job& j = jobs[i];
    if (j.phase == JobPhase::kPending || j.node < 0 || j.node >= n_nodes) continue;
    free_[j.node] -= j.gpus;
    placed_by_class[static_cast<int>(j.cls)] += j.gpus;
    if (j.phase == JobPhase::kRunning) running.emplace_back(j.node, i);
    else leaving_on[j.node] += j.gpus;
  }
  running_on.build(n_nodes, running);
  // Jobs being moved (or moved and not yet restarted) hold their GPUs on the node they restart on.
  for (int i : holders) {
    const Job& j = jobs[i];
    if (j.move_to >= 0 && j.move_to < n_nodes && j.phase != JobPhase::kRunning) free_[j.move_to] -= j.gpus;
  }
  if (index) {
    for (int c = 0; c < kNumClasses; ++c)
      for (const auto& group : index->pending(c)) pending_by_class[c] += static_cast<int>(group.second.size());
  } else {
    for (const Job& j : jobs) pending_by_class[static_cast<int>(j.cls)] += j.phase == JobPhase::kPending;
  }
  for (int i = 0; i < n_nodes; ++i) {
    if (free_[i] > 0) by_free_.emplace(free_[i], i);
    free_sum_ += std::max(0, free_[i]);
    whole_free_ += free_[i] > 0 && free_[i] == st.nodes[i].gpus && st.nodes[i].gpus == max_node;
  }
  if (cfg.kind != PolicyKind::kFcfs && cfg.suspend.open(now)) suspended[static_cast<int>(cfg.suspend.cls)] = true;
  const int medium = static_cast<int>(PriorityClass::kMedium);
  no_medium = placed_by_class[medium] == 0 && pending_by_class[medium] == 0;
  if (hint) {
    const double fraction = no_medium ? cfg.reserved_headroom_without_medium : cfg.reserved_headroom;
    reserve = static_cast<int>(std::floor(fraction * total_gpus));
    if (fraction > 0 && total_gpus >= kReserveMinClusterGpus)
      reserve = std::max(reserve, std::min(cfg.reserved_headroom_min_gpus, total_gpus));
    nonhigh_cap = total_gpus - reserve;
    low_share = std::floor(cfg.low_guaranteed_share * total_gpus);
  }
  for (int i : holders) {
    const Job& j = jobs[i];
    if ((j.phase == JobPhase::kCheckpointing || j.phase == JobPhase::kEvicting) && j.preemptor.empty())
      leaving_unclaimed += j.gpus;
  }
}

int PassState::best_fit(int gpus) const {
  auto it = by_free_.lower_bound({gpus, -1});
  return it == by_free_.end() ? -1 : it->second;
}

void PassState::set_free(int node, int value) {
  if (free_[node] > 0) by_free_.erase({free_[node], node});
  free_sum_ += std::max(0, value) - std::max(0, free_[node]);
  const int gpus = st.nodes[node].gpus;
  if (gpus == max_node) whole_free_ += (value > 0 && value == gpus) - (free_[node] > 0 && free_[node] == gpus);
  node_version_[node]++;
  free_[node] = value;
  if (value > 0) by_free_.emplace(value, node);
}

void PassState::start(int ji, int node, std::string reason) {
  const Job& j = jobs[ji];
  JobAction a;
  a.kind = ActionKind::kStart;
  a.job = j.id;
  a.job_index = ji;
  a.node = node;
  a.reason = std::move(reason);
  out.actions.push_back(std::move(a));
  set_free(node, free_[node] - j.gpus);
  placed_by_class[static_cast<int>(j.cls)] += j.gpus;
  started_by_class[static_cast<int>(j.cls)]++;
  // A class with a suspension window: decide again when the window opens.
  if (cfg.suspend.on && cfg.kind != PolicyKind::kFcfs && j.cls == cfg.suspend.cls) recheck(cfg.suspend.next_change(now));
}

void PassState::withdraw(int vi, const std::string& for_job, int for_index, std::string reason) {
  const Job& v = jobs[vi];
  JobAction a;
  a.kind = ActionKind::kWithdraw;
  a.job = v.id;
  a.job_index = vi;
  a.node = v.node;
  a.for_job = for_job;
  a.for_index = for_index;
  a.reason = std::move(reason);
  chosen[vi] = 1;
  leaving_on[v.node] -= v.gpus;
  out.actions.push_back(std::move(a));
}

void PassState::evict(JobAction a) {
  const Job& v = jobs[a.job_index];
  chosen[a.job_index] = 1;
  // A moved high job keeps its class's GPUs (it restarts at once elsewhere).
  if (v.cls != PriorityClass::kHigh) placed_by_class[static_cast<int>(v.cls)] -= v.gpus;
  out.actions.push_back(std::move(a));
}

}  // namespace preempt::sched
