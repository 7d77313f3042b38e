#include "job_index.h"

#include <algorithm>

namespace preempt::sched {

void JobIndex::add(const std::vector<Job>& jobs, int i) {
  if (entries_.size() <= static_cast<size_t>(i)) entries_.resize(static_cast<size_t>(i) + 1);
  remove(i);
  const Job& j = jobs[i];
  Entry& e = entries_[i];
  e.indexed = true;
  e.cls = static_cast<int>(j.cls);
  e.gpus = j.gpus;
  e.pending = j.phase == JobPhase::kPending;
  e.placed = !e.pending || j.move_to >= 0;
  e.key = PendingKey{j.submit_time, j.id, i};
  e.since = j.pending_since();
  e.preempted = j.preemptions > 0;
  if (e.pending) {
    pending_[e.cls][e.gpus].insert(e.key);
    by_since_.emplace(e.since, i);
    if (e.preempted) pending_preempted_[e.cls].insert(i);
  }
  if (e.placed) placed_.insert(std::lower_bound(placed_.begin(), placed_.end(), i), i);
  by_id_[j.id] = i;
}

void JobIndex::remove(int i) {
  if (static_cast<size_t>(i) >= entries_.size() || !entries_[i].indexed) return;
  Entry& e = entries_[i];
  if (e.pending) {
    auto group = pending_[e.cls].find(e.gpus);
    group->second.erase(e.key);
    if (group->second.empty()) pending_[e.cls].erase(group);
    by_since_.erase({e.since, i});
    if (e.preempted) pending_preempted_[e.cls].erase(i);
  }
  if (e.placed) placed_.erase(std::lower_bound(placed_.begin(), placed_.end(), i));
  auto id = by_id_.find(e.key.id);
  if (id != by_id_.end() && id->second == i) by_id_.erase(id);
  e = Entry{};
}

}  // namespace preempt::sched
