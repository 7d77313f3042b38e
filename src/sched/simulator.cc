// The discrete-event simulator (simulator.h): the event loop, and the simulator as an Executor.
#include "preempt/sched/simulator.h"

#include <chrono>
#include <functional>
#include <queue>
#include <set>
#include <string>
#include <unordered_map>

#include "job_index.h"
#include "preempt/sched/executor.h"
#include "sim_job.h"

namespace preempt::sched {
namespace {

class Simulation final : public Executor {
 public:
  Simulation(const Trace& trace, const PolicyOptions& policy, const SimOptions& opt, SimResult* res);
  void run();

  // Executor: the model of what each action does to the job's run.
  Status start(const Job& j, const JobAction& a) override;
  Status request_checkpoint(const Job& j, int64_t request_id, const JobAction& a) override;
  Status evict(const Job& j, const JobAction& a) override;

 private:
  void push(double time, EvType type, int job, int gen) { q_.push({time, seq_++, type, job, gen}); }
  void violation(const std::string& s) {
    if (res_.violations.size() < 20) res_.violations.push_back(s);
  }
  void deactivate(int i);
  void release(int i);
  void end_run(int i, bool finished);
  void handle(const Event& e);
  void refresh_hints();
  void trim_history();
  void attribute_waits(const Decisions& d);
  void check_capacity();
  void reindex(int active) {
    if (opt_.indexed) index_.add(cs_.jobs, active);
  }
  void progress(bool last);

  const PolicyOptions& policy_;
  const SimOptions& opt_;
  SimResult& res_;
  SimMetrics& m_;
  int total_gpus_ = 0;
  std::vector<SimJob> sj_;
  std::unordered_map<int, Job> parked_;  // preempted, back in the queue after restart_delay_s
  ClusterState cs_;
  std::vector<int> used_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
  uint64_t seq_ = 0;
  std::set<double> wakes_;
  int64_t next_request_ = 0;
  double now_ = 0, first_submit_ = kSimInf, last_event_ = 0, decide_total_us_ = 0;
  // Wait attribution: the causes the last decision reported for pending high jobs, charged with
  // the time until the next event.
  std::vector<std::array<double, SimMetrics::kCauses>> wait_by_;
  std::vector<std::pair<int, int>> waiting_now_;  // (sim job, cause slot)
  JobIndex index_;  // cs_.jobs by phase (SimOptions::indexed)
  // FCFS, indexed: every pending high job is blocked (cause "other") until it starts; its wait is
  // charged at its start from the clock of waited time since its arrival (pending high jobs
  // passed over by the indexed pass are not listed in Decisions::waits).
  bool fcfs_lazy_ = false;
  double waited_clock_ = 0;
  std::vector<double> other_from_;
  std::chrono::steady_clock::time_point wall_start_ = std::chrono::steady_clock::now(), last_progress_ = wall_start_;
};

Simulation::Simulation(const Trace& trace, const PolicyOptions& policy, const SimOptions& opt, SimResult* res)
    : policy_(policy), opt_(opt), res_(*res), m_(res->metrics), sj_(trace.jobs.size()),
      used_(trace.nodes.size(), 0), wait_by_(trace.jobs.size()) {
  fcfs_lazy_ = opt.indexed && policy.kind == PolicyKind::kFcfs;
  if (fcfs_lazy_) other_from_.assign(trace.jobs.size(), -1);
  m_.policy = PolicyKindName(policy.kind);
  m_.jobs = static_cast<int>(trace.jobs.size());
  for (const auto& n : trace.nodes) {
    total_gpus_ += n.gpus;
  }
  cs_.nodes = trace.nodes;
  for (size_t i = 0; i < trace.jobs.size(); ++i) {
    sj_[i].t = &trace.jobs[i];
    const TraceJob& tj = trace.jobs[i];
    sj_[i].grace = opt.grace_period_s > 0
                       ? opt.grace_period_s
                       : opt.grace_factor * (tj.ckpt_drain_s + tj.ckpt_stall_s + tj.ckpt_persist_s) + opt.grace_extra_s;
    push(tj.submit, EvType::kArrival, static_cast<int>(i), 0);
  }
}

void Simulation::deactivate(int i) {
  int a = sj_[i].active;
  int last = static_cast<int>(cs_.jobs.size()) - 1;
  index_.remove(a);
  if (a != last) {
    index_.remove(last);
    cs_.jobs[a] = std::move(cs_.jobs[last]);
    sj_[cs_.jobs[a].user].active = a;
    reindex(a);
  }
  cs_.jobs.pop_back();
  sj_[i].active = -1;
}

void Simulation::release(int i) {
  SimJob& s = sj_[i];
  if (s.placed) used_[s.node] -= s.t->gpus;
  s.placed = false;
  s.node = -1;
}

// Ends the current run now (finish or eviction) and accounts its GPU time.
void Simulation::end_run(int i, bool finished) {
  SimJob& s = sj_[i];
  double alloc = now_ - s.seg_start;
  double committed = finished ? s.t->duration_s : s.committed(now_);
  double gain = committed - s.p0;
  double lost = alloc - gain;
  if (lost < -1e-6) violation("job " + s.t->id + ": negative lost work");
  if (gain < -1e-6) violation("job " + s.t->id + ": committed progress went backwards");
  s.allocated_gpu_s += s.t->gpus * alloc;
  s.lost_gpu_s += s.t->gpus * std::max(0.0, lost);
  double restore = std::min(alloc, s.seg_restore);
  double trained = s.trained(now_);
  double stopped = std::max(0.0, alloc - restore - trained);
  s.lost_restore_gpu_s += s.t->gpus * restore;
  s.lost_stopped_gpu_s += s.t->gpus * stopped;
  s.lost_discarded_gpu_s += s.t->gpus * std::max(0.0, lost - restore - stopped);
  s.p0 = committed;
  s.gen++;
  s.extra_progress = -1;
  s.extra_time = kSimInf;
  s.stop_at = kSimInf;
  s.stalls.clear();
  s.extra_stall_at = kSimInf;
  release(i);
}

void Simulation::handle(const Event& e) {
  SimJob* s = e.job >= 0 ? &sj_[e.job] : nullptr;
  switch (e.type) {
    case EvType::kArrival: {
      first_submit_ = std::min(first_submit_, now_);
      Job j;
      j.id = s->t->id;
      j.cls = s->t->cls;
      j.queue = s->t->queue;
      j.gpus = s->t->gpus;
      j.submit_time = s->t->submit;
      j.restore_s = s->t->restore_s;
      j.user = e.job;
      s->active = static_cast<int>(cs_.jobs.size());
      cs_.jobs.push_back(std::move(j));
      reindex(s->active);
      if (fcfs_lazy_ && s->t->cls == PriorityClass::kHigh) other_from_[e.job] = waited_clock_;
      break;
    }
    case EvType::kFinish: {
      if (e.gen != s->gen || s->active < 0) break;
      if (s->progress(now_) < s->t->duration_s - 1e-6) break;  // a stall delayed it: a later event is queued
      end_run(e.job, true);
      s->finish = now_;
      m_.completed++;
      deactivate(e.job);
      break;
    }
    case EvType::kCkptDone: {
      if (e.gen != s->gen || s->active < 0) break;
      Job& j = cs_.jobs[s->active];
      // A victim's, a withdrawn victim's or an ahead-of-need request: the commit is durable.
      if (j.phase != JobPhase::kPending && j.request_id > 0 && j.hints) j.hints->request_ack = j.request_id;
      break;
    }
    case EvType::kEvictDone: {
      if (e.gen != s->gen || s->active < 0) break;
      Job& j = cs_.jobs[s->active];
      if (s->preemptions + s->moves > 0 && now_ - s->seg_start < opt_.repreempt_window_s) m_.repreemptions++;
      end_run(e.job, false);
      // Thrash: preempted or moved again within the window of its previous preemption or move.
      if (now_ - std::max(s->last_preempted, s->last_moved) < opt_.thrash_window_s) m_.thrash_cycles++;
      if (RequeueAfterExit(now_, &j)) {  // moved for a high job (defragmentation), not preempted
        m_.moves++;
        s->moves++;
        s->moved_at = s->last_moved = now_;
      } else {
        s->last_preempted = now_;
        s->preemptions++;
        m_.preemptions++;
        if (opt_.restart_delay_s > 0) {  // out of the queue until it may restart
          Job parked = j;
          deactivate(e.job);
          parked_.emplace(e.job, std::move(parked));
          push(now_ + opt_.restart_delay_s, EvType::kRequeued, e.job, s->gen);
          break;
        }
      }
      reindex(s->active);
      break;
    }
    case EvType::kRequeued: {
      auto it = parked_.find(e.job);
      if (it == parked_.end()) break;
      s->active = static_cast<int>(cs_.jobs.size());
      cs_.jobs.push_back(std::move(it->second));
      parked_.erase(it);
      reindex(s->active);
      break;
    }
    case EvType::kWake:
      wakes_.erase(now_);
      break;
  }
}

// Exact, fresh hints for every placed job.
void Simulation::refresh_hints() {
  auto refresh = [this](Job& j) {
    if (j.phase == JobPhase::kPending) return;
    const SimJob& s = sj_[j.user];
    if (!j.hints) {  // a new run: what stays the same while it runs
      Hints& h = j.hints.emplace();
      h.gpus = j.gpus;
      h.cost.drain_s = s.t->ckpt_drain_s;
      h.cost.stall_s = s.t->ckpt_stall_s;
      h.cost.persist_s = s.t->ckpt_persist_s;
      h.grace.needed_s = h.checkpoint_s();
      h.grace.granted_s = opt_.sigterm_saves ? s.grace : 0;  // a naive job does not save on SIGTERM
    }
    Hints& h = *j.hints;
    h.updated_unix = now_;
    const double progress = s.progress(now_);
    const double committed = s.committed_at_progress(now_, progress);
    // GPU time of this run not yet turned into a durable commit: with no new commit since it
    // (re)started, that includes the restore it is paying now.
    h.lost_work_s = committed > s.p0 ? std::max(0.0, progress - committed) : now_ - s.seg_start;
    h.last_commit.step = committed > 0 ? static_cast<int64_t>(committed) : -1;
    h.last_commit.committed_at = s.commit_time_of(now_, committed);
    h.step = static_cast<int64_t>(progress);
    h.state = j.phase == JobPhase::kCheckpointing ? JobState::kCheckpointing : JobState::kTraining;
  };
  if (!opt_.indexed) {
    for (Job& j : cs_.jobs) refresh(j);
  } else {
    for (int i : index_.placed()) refresh(cs_.jobs[i]);
  }
}

// Forget budget history older than any window.
void Simulation::trim_history() {
  std::vector<PreemptionRecord>& h = cs_.history;
  if (h.empty() || h.front().time >= now_ - policy_.budget_window_s) return;
  size_t k = 0;
  while (k < h.size() && h[k].time < now_ - policy_.budget_window_s) ++k;
  h.erase(h.begin(), h.begin() + static_cast<long>(k));
}

Status Simulation::start(const Job& j, const JobAction& a) {
  if (j.phase != JobPhase::kPending) {
    violation("start of non-pending job " + j.id);
    return Status(StatusCode::kInvalidArgument, "start of non-pending job " + j.id);
  }
  const int i = static_cast<int>(j.user);
  SimJob& s = sj_[i];
  used_[a.node] += j.gpus;
  if (used_[a.node] > cs_.nodes[a.node].gpus) {
    m_.capacity_violations++;
    violation("node " + cs_.nodes[a.node].name + " over capacity starting " + j.id);
  }
  if (j.move_to >= 0) {
    if (a.node != j.move_to) violation("moved job " + j.id + " restarted off the node it was moved to");
    if (s.moved_at >= 0) {
      m_.move_restart_wait_s += now_ - s.moved_at;
      m_.move_restarts++;
    }
    s.moved_at = -1;
  }
  s.placed = true;
  s.node = a.node;
  s.seg_start = now_;
  s.seg_restore = s.p0 > 0 ? s.t->restore_s : 0;
  s.gen++;
  if (s.first_start < 0) s.first_start = now_;
  if (fcfs_lazy_ && other_from_[i] >= 0) {
    wait_by_[i][static_cast<int>(WaitCause::kOther)] += waited_clock_ - other_from_[i];
    other_from_[i] = -1;
  }
  push(now_ + s.seg_restore + (s.t->duration_s - s.p0), EvType::kFinish, i, s.gen);
  return Status::OK();
}

Status Simulation::request_checkpoint(const Job& j, int64_t request_id, const JobAction& a) {
  const int i = static_cast<int>(j.user);
  SimJob& s = sj_[i];
  m_.checkpoint_requests++;
  // A save in flight answers the request (the runtime does not queue a second one behind it):
  // a requested one, or the periodic save of progress c while progress is in [c, c + persist).
  if (s.extra_time < kSimInf && s.extra_time > now_) return Status::OK();
  const double interval = s.t->ckpt_interval_s, persist = s.t->ckpt_persist_s;
  if (interval > 0 && persist > 0) {
    const double p = s.progress(now_);
    const double c = std::floor(p / interval) * interval;
    if (c > s.p0 && p < c + persist) {
      s.extra_progress = c;
      s.extra_time = s.time_at(c + persist);
      s.extra_stall_at = kSimInf;
      push(s.extra_time, EvType::kCkptDone, i, s.gen);
      return Status::OK();
    }
  }
  // The in-flight step drains, the snapshot is taken at its end, training pauses for the stall
  // (copy to staging) and continues while the snapshot persists. Every requested save pays its
  // stall (after all earlier ones of the run: none is in flight).
  double snap = now_ + s.t->ckpt_drain_s;
  s.extra_progress = s.progress(snap);
  s.extra_time = snap + s.t->ckpt_stall_s + s.t->ckpt_persist_s;
  s.extra_stall_at = snap;
  if (s.t->ckpt_stall_s > 0) {
    s.stalls.push_back({snap, s.t->ckpt_stall_s});
    push(s.time_at(s.t->duration_s), EvType::kFinish, i, s.gen);  // the stall delays the end
  }
  push(s.extra_time, EvType::kCkptDone, i, s.gen);
  return Status::OK();
}

// SIGTERM (or a kill at once when grace_s == 0); see the model in simulator.h.
Status Simulation::evict(const Job& j, const JobAction& a) {
  const int i = static_cast<int>(j.user);
  SimJob& s = sj_[i];
  double exit_at = now_;
  if (a.grace_s != 0 && opt_.sigterm_saves) {
    double grace = a.grace_s > 0 ? a.grace_s : s.grace;
    double save_end = now_;
    if (s.extra_time < kSimInf && s.extra_time > now_) {
      // A requested save is in flight: the stop finishes it; training stops at its snapshot.
      save_end = s.extra_time;
      s.stop_at = std::max(now_, s.extra_stall_at);
    } else if (s.progress(now_) > s.committed(now_) + 1e-9) {
      // The stop snapshot: the in-flight step drains, then training is over; the stall and the
      // persist follow.
      double snap = now_ + s.t->ckpt_drain_s;
      s.extra_progress = s.progress(snap);
      s.extra_time = snap + s.t->ckpt_stall_s + s.t->ckpt_persist_s;
      s.stop_at = snap;
      save_end = s.extra_time;
    } else {
      s.stop_at = now_;  // nothing new to save: it exits at once
    }
    if (save_end <= now_ + grace) {
      exit_at = save_end;
    } else {  // SIGKILL at the end of the grace period: the save is lost
      s.extra_progress = -1;
      s.extra_time = kSimInf;
      exit_at = now_ + grace;
    }
  }
  s.exit_at = exit_at;
  s.gen++;  // pending finish/commit events of this run no longer apply
  push(exit_at + opt_.eviction_latency_s, EvType::kEvictDone, i, s.gen);
  return Status::OK();
}

// Which pending high jobs wait, and why (victims leaving: saving or just exiting).
void Simulation::attribute_waits(const Decisions& d) {
  if (fcfs_lazy_) return;
  std::unordered_map<std::string, bool> saving_for;
  auto note = [&](const Job& j) {
    if ((j.phase != JobPhase::kCheckpointing && j.phase != JobPhase::kEvicting) || j.preemptor.empty()) return;
    const SimJob& v = sj_[j.user];
    bool saving = j.phase == JobPhase::kCheckpointing || now_ < v.exit_at;
    saving_for[j.preemptor] = saving_for[j.preemptor] || saving;
  };
  if (opt_.indexed) {
    for (int i : index_.placed()) note(cs_.jobs[i]);
  } else {
    for (const Job& j : cs_.jobs) note(j);
  }
  for (const WaitEstimate& w : d.waits) {
    if (w.job_index < 0 || w.job_index >= static_cast<int>(cs_.jobs.size())) continue;
    const Job& j = cs_.jobs[w.job_index];
    if (j.phase != JobPhase::kPending || sj_[j.user].first_start >= 0) continue;  // first-start waits only
    int slot = static_cast<int>(w.cause);
    if (w.cause == WaitCause::kVictimsLeaving) {
      auto it = saving_for.find(j.id);
      slot = it != saving_for.end() && it->second ? 0 : kNumWaitCauses;
    }
    waiting_now_.emplace_back(static_cast<int>(j.user), slot);
  }
}

void Simulation::check_capacity() {
  for (size_t n = 0; n < used_.size(); ++n) {
    if (used_[n] < 0 || used_[n] > cs_.nodes[n].gpus) {
      m_.capacity_violations++;
      violation("node " + cs_.nodes[n].name + " uses " + std::to_string(used_[n]) + " of " +
                std::to_string(cs_.nodes[n].gpus) + " GPUs");
    }
  }
}

void Simulation::run() {
  double prev_now = 0;
  while (!q_.empty()) {
    now_ = q_.top().time;
    if (opt_.horizon_s > 0 && now_ > opt_.horizon_s) break;
    for (const auto& [i, slot] : waiting_now_) wait_by_[i][slot] += now_ - prev_now;
    waiting_now_.clear();
    waited_clock_ += now_ - prev_now;
    prev_now = now_;
    while (!q_.empty() && q_.top().time == now_) {
      Event e = q_.top();
      q_.pop();
      last_event_ = now_;
      handle(e);
    }
    refresh_hints();
    cs_.now = now_;
    trim_history();
    auto t0 = std::chrono::steady_clock::now();
    Decisions d = opt_.indexed ? DecideIndexed(cs_, index_, policy_) : Decide(cs_, policy_);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    m_.decisions++;
    decide_total_us_ += us;
    m_.decide_max_us = std::max(m_.decide_max_us, us);
    if (opt_.on_decisions) opt_.on_decisions(cs_, d);
    // The only refusal is a start of a job that is not pending: already recorded as a violation.
    (void)ExecuteDecisions(d, now_, this, &cs_, &next_request_).ok();
    for (const JobAction& a : d.actions) reindex(a.job_index);
    attribute_waits(d);
    if (d.recheck_at < kSimInf && d.recheck_at > now_ && !wakes_.count(d.recheck_at)) {
      wakes_.insert(d.recheck_at);
      push(d.recheck_at, EvType::kWake, -1, 0);
    }
    if (opt_.check_invariants) check_capacity();
    if (opt_.progress && (m_.decisions & 255) == 0) progress(false);
  }
  for (size_t i = 0; i < other_from_.size(); ++i)
    if (other_from_[i] >= 0) wait_by_[i][static_cast<int>(WaitCause::kOther)] += waited_clock_ - other_from_[i];
  if (opt_.progress) progress(true);
  double end = opt_.horizon_s > 0 ? std::min(opt_.horizon_s, last_event_) : last_event_;
  int largest_node = 0;
  for (const Node& n : cs_.nodes) largest_node = std::max(largest_node, n.gpus);
  FinishMetrics(sj_, wait_by_, end, first_submit_, total_gpus_, largest_node, decide_total_us_, opt_, &res_);
  FinishBill(sj_, end, policy_, &m_);
}

// A progress line every progress_every_s of wall time (and at the end).
void Simulation::progress(bool last) {
  auto t = std::chrono::steady_clock::now();
  if (!last && std::chrono::duration<double>(t - last_progress_).count() < opt_.progress_every_s) return;
  last_progress_ = t;
  SimProgress p;
  p.jobs = m_.jobs;
  p.finished = m_.completed;
  for (const SimJob& s : sj_) p.arrived += s.active >= 0 || s.finish >= 0;
  for (const Job& j : cs_.jobs) p.pending += j.phase == JobPhase::kPending;
  p.sim_time_s = now_ - (first_submit_ < kSimInf ? first_submit_ : now_);
  p.wall_s = std::chrono::duration<double>(t - wall_start_).count();
  p.done = last;
  opt_.progress(p);
}

}  // namespace

Status Simulate(const Trace& trace, const PolicyOptions& policy, const SimOptions& opt, SimResult* out) {
  PREEMPT_RETURN_IF_ERROR(ValidateTrace(trace));
  if (!(opt.restart_delay_s >= 0 && opt.restart_delay_s <= 86400))
    return Status(StatusCode::kInvalidArgument,
                  "simulate: restart_delay_s must be in [0, 86400] s, got " + std::to_string(opt.restart_delay_s));
  SimResult res;
  Simulation sim(trace, policy, opt, &res);
  sim.run();
  *out = std::move(res);
  return Status::OK();
}

}  // namespace preempt::sched
