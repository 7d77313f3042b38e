#include "pending_walk.h"

#include <algorithm>

namespace preempt::sched {

PendingWalk::PendingWalk(const PassState& pass, const ClusterRules& rules, const Awaiting& awaiting,
                         const JobIndex& index, const int* searches)
    : p_(pass), rules_(rules), searches_(searches), fcfs_(pass.cfg.kind == PolicyKind::kFcfs) {
  for (int c = kNumClasses - 1; c >= 0; --c)
    for (const auto& [gpus, jobs] : index.pending(c)) groups_.emplace_back(c, &jobs);
  // The keys of the jobs visited one by one live in the index's groups.
  std::vector<int> one_by_one;
  if (p_.hint) {
    // Cooldown (since the last preemption) and the non-high preemption delay (since pending):
    // both windows end within `window` of max(submit, last preemption). A second of margin keeps
    // rounding on the safe side: visiting a job needlessly changes nothing.
    const double window = std::max(p_.cfg.cooldown_s, p_.cfg.nonhigh_preempt_delay_s);
    const auto& recent = index.by_since();
    for (auto it = recent.rbegin(); it != recent.rend() && it->first >= p_.now - window - 1; ++it)
      one_by_one.push_back(it->second);
  }
  // Low jobs preempted before may restart into the kept-free headroom, which keeps their group
  // out otherwise (PolicyOptions::headroom_low_restarts).
  if (p_.cfg.headroom_low_restarts && rules_.headroom_keep_free_on())
    for (int i : index.pending_preempted(static_cast<int>(PriorityClass::kLow))) one_by_one.push_back(i);
  for (const auto& [ji, node] : awaiting.node) one_by_one.push_back(ji);
  for (int i : index.placed())
    if (p_.jobs[i].phase == JobPhase::kPending) one_by_one.push_back(i);  // restarting after a move
  for (int i : one_by_one) {
    const Job& j = p_.jobs[i];
    const auto& group = index.pending(static_cast<int>(j.cls)).at(j.gpus);
    auto it = group.find(PendingKey{j.submit_time, j.id, i});
    visit_.push_back({static_cast<int>(j.cls), &*it});
  }
  std::sort(visit_.begin(), visit_.end(), [this](const Pos& a, const Pos& b) { return before(a, b); });
  visit_.erase(std::unique(visit_.begin(), visit_.end(), [](const Pos& a, const Pos& b) { return a.key == b.key; }),
               visit_.end());
}

bool PendingWalk::before(const Pos& a, const Pos& b) const {
  if (!fcfs_ && a.cls != b.cls) return a.cls > b.cls;
  return *a.key < *b.key;
}

// True when no job of this group (class, GPU count), from the one submitted at `submit` on, that is
// not visited one by one can change the pass now: Placer::Place would only block it (or, under
// FCFS, list it as blocked). The group is in submission order, so a low job that has not waited
// long enough to enter the headroom (PolicyOptions::headroom_low_wait_s) has none after it that has.
bool PendingWalk::inert(int cls, int gpus, double submit) {
  const PolicyOptions& cfg = p_.cfg;
  if (cls == static_cast<int>(PriorityClass::kHigh) && !fcfs_) return false;
  if (p_.suspended[cls]) return true;  // waits for its window to close
  if (gpus <= 0 || gpus > p_.max_node) return true;  // can never fit
  probe_.cls = static_cast<PriorityClass>(cls);
  probe_.gpus = gpus;
  probe_.submit_time = submit;
  if (p_.best_fit(gpus) >= 0) return !rules_.headroom_allows(probe_);  // starts, or waits for the reserve
  if (fcfs_ || !cfg.preempts_lower[cls]) return true;
  return *searches_ >= cfg.max_preemptors_per_pass;
}

// The first job of `group` after the last one returned, in scheduling order (null: none).
const PendingKey* PendingWalk::next_in(int cls, const std::set<PendingKey>& group) const {
  auto it = group.begin();
  if (cur_.key) {
    if (!fcfs_ && cls > cur_.cls) return nullptr;
    if (fcfs_ || cls == cur_.cls) it = group.upper_bound(*cur_.key);
  }
  return it == group.end() ? nullptr : &*it;
}

int PendingWalk::next() {
  Pos best;
  while (visit_pos_ < visit_.size() && cur_.key && !before(cur_, visit_[visit_pos_])) ++visit_pos_;
  if (visit_pos_ < visit_.size()) best = visit_[visit_pos_];
  for (const auto& [cls, group] : groups_) {
    const PendingKey* k = next_in(cls, *group);
    if (!k) continue;
    const Pos pos{cls, k};
    if (best.key && !before(pos, best)) continue;
    if (inert(cls, k->index >= 0 ? p_.jobs[k->index].gpus : 0, k->submit)) continue;
    best = pos;
  }
  if (!best.key) return -1;
  cur_ = best;
  return best.key->index;
}

}  // namespace preempt::sched
