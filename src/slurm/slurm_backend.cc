// The SLURM executor of sched::Decide(): observe (squeue/scontrol + hints), decide, act
// (checkpoint request file, `scontrol requeuehold` / `release`). See include/preempt/sched/slurm.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "preempt/hints.h"
#include "preempt/sched/executor.h"
#include "preempt/sched/slurm.h"
#include "preempt/slurm_env.h"

namespace preempt::sched {
namespace {

std::string Fixed(double v, int digits = 1) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void DecideEvent(const JobAction& a, double now, std::vector<SlurmEvent>* events) {
  events->push_back({now, "decide", a.job,
                     std::string(ActionKindName(a.kind)) + (a.for_job.empty() ? "" : " for " + a.for_job) + " # " +
                         a.reason});
}

// What Decide()'s actions mean on a SLURM cluster (executor.h). The lifecycle bookkeeping
// (phases, request ids, the per-partition history) is ApplyDecision's; this class only acts and
// reports each action as events.
class SlurmExecutor final : public Executor {
 public:
  SlurmExecutor(const SlurmBackendOptions& opt, const std::map<std::string, std::string>& hints_path,
                std::vector<SlurmEvent>* events)
      : opt_(opt), hints_path_(hints_path), events_(events) {}

  // SLURM starts a job itself once its GPUs are free.
  Status start(const Job&, const JobAction& a) override {
    DecideEvent(a, NowUnix(), events_);
    return Status::OK();
  }

  Status request_checkpoint(const Job& j, int64_t request_id, const JobAction& a) override {
    DecideEvent(a, NowUnix(), events_);
    auto it = hints_path_.find(j.id);
    if (it == hints_path_.end() || it->second.empty())
      return report(j.id, Status(StatusCode::kInvalidArgument, "job " + j.id + ": no hints location"));
    CheckpointRequest req;
    req.id = request_id;
    PREEMPT_RETURN_IF_ERROR(report(j.id, WriteCheckpointRequest(it->second + ".request", req)));
    events_->push_back({NowUnix(), "request", j.id,
                        "checkpoint request " + std::to_string(request_id) + " " +
                            (a.for_job.empty() ? std::string("ahead of need") : "for " + a.for_job)});
    return Status::OK();
  }

  // `scontrol requeuehold`: SLURM sends SIGTERM, SIGKILL after KillWait, and puts the job back
  // in the queue, held until its preemptor runs (SlurmBackend::ReleaseVictims), so that SLURM
  // does not start it again on the GPUs freed for the preemptor. action.grace_s == 0 (kill at
  // once: the commit the job resumes from is durable, or a save would lose more than it keeps):
  // SIGKILL to every process of the job first, then the requeue.
  Status evict(const Job& j, const JobAction& a) override {
    DecideEvent(a, NowUnix(), events_);
    std::string out;
    const bool kill = a.grace_s == 0;
    if (kill)
      PREEMPT_RETURN_IF_ERROR(report(
          j.id, RunCommand({opt_.scancel, "--signal=KILL", "--full", j.id}, opt_.command_timeout_s, &out)));
    Status s;
    // A killed job may be refused for a moment while SLURM completes it.
    for (int attempt = 0; attempt < (kill ? 20 : 1); ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(250));
      s = RunCommand({opt_.scontrol, "requeuehold", j.id}, opt_.command_timeout_s, &out);
      if (s.ok()) break;
    }
    PREEMPT_RETURN_IF_ERROR(report(j.id, s));
    events_->push_back({NowUnix(), "requeue", j.id,
                        std::string(kill ? "SIGKILL, " : "") + "scontrol requeuehold for " + a.for_job});
    return Status::OK();
  }

 private:
  Status report(const std::string& job, Status s) {
    if (!s.ok()) events_->push_back({NowUnix(), "error", job, s.to_string()});
    return s;
  }

  const SlurmBackendOptions& opt_;
  const std::map<std::string, std::string>& hints_path_;
  std::vector<SlurmEvent>* events_;
};

}  // namespace

SlurmBackend::SlurmBackend(SlurmBackendOptions options)
    : opt_(std::move(options)),
      // Request ids must grow across backend restarts too (a job ignores ids it has seen).
      next_request_(static_cast<int64_t>(NowUnix() * 1000)) {}

PriorityClass SlurmBackend::class_of(const std::string& partition) const {
  auto it = opt_.partition_class.find(partition);
  if (it != opt_.partition_class.end()) return it->second;
  int lo = 1 << 30, hi = -(1 << 30), tier = 0;
  for (const auto& p : partitions_) {
    if (!opt_.partitions.empty() && !opt_.partitions.count(p.name)) continue;
    lo = std::min(lo, p.priority_tier);
    hi = std::max(hi, p.priority_tier);
    if (p.name == partition) tier = p.priority_tier;
  }
  if (tier == hi && hi > lo) return PriorityClass::kHigh;
  if (tier == lo) return PriorityClass::kLow;
  return PriorityClass::kMedium;
}

void SlurmBackend::warn_grace(const SlurmJob& sj, const Job& j, std::vector<SlurmEvent>* events) {
  Tracked& t = tracked_[sj.id];
  if (t.grace_warned || !j.hints || j.hints->grace.needed_s <= 0) return;
  const SlurmPartition* part = nullptr;
  for (const auto& p : partitions_)
    if (p.name == sj.partition) part = &p;
  if (!part) return;
  // SLURM's own preemption grants GraceTime; this backend's requeue grants KillWait.
  bool slurm_preempts = part->preempt_mode != "OFF" && !part->preempt_mode.empty();
  double granted = slurm_preempts ? part->grace_time_s : kill_wait_s_;
  double need = j.hints->grace.needed_s;
  if (need <= granted) return;
  t.grace_warned = true;
  long suggest = static_cast<long>(std::ceil(need * 1.25));
  std::string what = slurm_preempts ? "partition " + part->name + "'s GraceTime " + Fixed(granted, 0) + " s"
                                    : "KillWait " + Fixed(granted, 0) + " s (the grace of `scontrol requeue`)";
  std::string fix = slurm_preempts ? "set GraceTime=" + std::to_string(suggest) + " on partition " + part->name +
                                         " (or its QOS)"
                                   : "set KillWait=" + std::to_string(suggest) + " in slurm.conf";
  events->push_back({NowUnix(), "warn", sj.id,
                     "grace need " + Fixed(need) + " s exceeds " + what + ": " + fix + " and PREEMPT_GRACE_S=" +
                         std::to_string(suggest) + " in the job"});
}

Status SlurmBackend::observe(ClusterState* st, std::vector<SlurmEvent>* events) {
  std::string text;
  PREEMPT_RETURN_IF_ERROR(RunCommand({opt_.scontrol, "show", "partition", "-o"}, opt_.command_timeout_s, &text));
  PREEMPT_RETURN_IF_ERROR(ParsePartitions(text, &partitions_));
  PREEMPT_RETURN_IF_ERROR(RunCommand({opt_.scontrol, "show", "config"}, opt_.command_timeout_s, &text));
  kill_wait_s_ = ParseKillWait(text);
  ClusterState s;
  PREEMPT_RETURN_IF_ERROR(RunCommand({opt_.scontrol, "show", "node", "-o"}, opt_.command_timeout_s, &text));
  PREEMPT_RETURN_IF_ERROR(ParseNodes(text, &s.nodes));
  std::vector<SlurmJob> jobs;
  PREEMPT_RETURN_IF_ERROR(RunCommand({opt_.squeue, "--json"}, opt_.command_timeout_s, &text));
  PREEMPT_RETURN_IF_ERROR(ParseSqueueJson(text, "squeue --json", &jobs));
  s.now = NowUnix();
  for (const SlurmJob& sj : jobs) {
    if (sj.gpus <= 0 || (!opt_.partitions.empty() && !opt_.partitions.count(sj.partition))) continue;
    bool pending = sj.state == "PENDING" || sj.state == "REQUEUED" || sj.state == "REQUEUE_HOLD";
    bool placed = sj.state == "RUNNING" || sj.state == "COMPLETING";
    if (!pending && !placed) continue;
    Job j;
    j.id = sj.id;
    j.cls = class_of(sj.partition);
    j.queue = sj.partition;
    j.gpus = sj.gpus;
    j.submit_time = sj.submit_unix;
    Tracked& t = tracked_[sj.id];
    j.last_preempted = t.last_preempted;
    j.preemptions = t.preemptions;
    if (pending && t.phase == JobPhase::kEvicting) {  // our requeue went through
      RequeueAfterExit(s.now, &j);
      t.phase = JobPhase::kRunning;
      t.request_id = 0;
      t.preemptor.clear();
      t.last_preempted = j.last_preempted;
      t.preemptions = j.preemptions;
      events->push_back({s.now, "requeued", sj.id, "back in the queue (restart " + std::to_string(sj.restarts) + ")"});
    }
    j.preemptions = std::max(j.preemptions, sj.restarts);
    if (placed) {
      j.phase = sj.state == "COMPLETING" ? JobPhase::kEvicting : JobPhase::kRunning;
      for (size_t n = 0; n < s.nodes.size(); ++n)
        if (s.nodes[n].name == sj.nodes) j.node = static_cast<int>(n);
      if (j.node < 0) continue;  // multi-node jobs are not managed
      j.start_time = sj.start_unix;
      if (t.phase == JobPhase::kCheckpointing || t.phase == JobPhase::kEvicting) {
        j.phase = t.phase;
        j.preemptor = t.preemptor;
      }
      j.request_id = t.request_id;  // running: its last request (ahead of need, or withdrawn)
      j.request_time = t.request_time;
      std::string path = HintsPathForJob(sj, opt_.hints_dir);
      hints_path_[sj.id] = path;
      Hints h;
      // Hints written by an earlier run of a requeued job describe work that no longer runs.
      if (!path.empty() && ReadHints(path, &h).ok() && h.updated_unix >= sj.start_unix - 1) {
        j.hints = h;
        if (t.phase == JobPhase::kCheckpointing && h.request_ack >= t.request_id && !t.acked) {
          t.acked = true;
          events->push_back({s.now, "ack", sj.id,
                             "request " + std::to_string(t.request_id) + " committed at step " +
                                 std::to_string(h.last_commit.step)});
        }
        warn_grace(sj, j, events);
      }
    }
    s.jobs.push_back(std::move(j));
  }
  s.history = history_;
  *st = std::move(s);
  last_jobs_ = std::move(jobs);
  return Status::OK();
}

void SlurmBackend::release_victims(bool all, std::vector<SlurmEvent>* events) {
  std::map<std::string, std::string> state;
  for (const SlurmJob& sj : last_jobs_) state[sj.id] = sj.state;
  const double now = NowUnix();
  for (auto& [id, t] : tracked_) {
    if (t.phase == JobPhase::kEvicting || t.held_at == 0) continue;
    auto it = state.find(id);
    const bool pending = it != state.end() && (it->second == "PENDING" || it->second == "REQUEUE_HOLD");
    if (!pending) {  // gone, or someone released it already
      if (it == state.end() || it->second == "RUNNING") {
        t.held_for.clear();
        t.held_at = 0;
      }
      continue;
    }
    auto p = state.find(t.held_for);
    const bool preemptor_waits = p != state.end() && p->second == "PENDING";
    std::string why;
    if (all) why = "the backend stops";
    else if (!preemptor_waits) why = "its preemptor " + t.held_for + " is no longer pending";
    else if (now - t.held_at > opt_.hold_max_s) why = "held for " + Fixed(now - t.held_at, 0) + " s";
    else continue;
    std::string out;
    Status s = RunCommand({opt_.scontrol, "release", id}, opt_.command_timeout_s, &out);
    if (!s.ok()) {
      events->push_back({now, "error", id, s.to_string()});
      continue;
    }
    events->push_back({now, "release", id, why});
    t.held_for.clear();
    t.held_at = 0;
  }
}

// Keeps what the lifecycle decided about each job for the next pass (the next Observe builds the
// state from SLURM again): jobs that entered kCheckpointing or kEvicting, the ones whose eviction
// was withdrawn (running again), and the history.
void SlurmBackend::remember(const ClusterState& before, const ClusterState& after) {
  for (size_t k = 0; k < after.jobs.size(); ++k) {
    const Job& j = after.jobs[k];
    const Job& was = before.jobs[k];
    if (j.phase == was.phase && j.request_id == was.request_id) continue;
    if (was.phase == JobPhase::kCheckpointing && j.phase == JobPhase::kRunning) {  // eviction withdrawn
      Tracked& t = tracked_[j.id];
      t.phase = JobPhase::kRunning;
      t.preemptor.clear();
      continue;
    }
    if (j.phase == JobPhase::kRunning) {  // asked to checkpoint ahead of need
      Tracked& t = tracked_[j.id];
      t.request_id = j.request_id;
      t.request_time = j.request_time;
      continue;
    }
    if (j.phase != JobPhase::kCheckpointing && j.phase != JobPhase::kEvicting) continue;
    Tracked& t = tracked_[j.id];
    if (j.phase == JobPhase::kCheckpointing) t.acked = false;
    if (j.phase == JobPhase::kEvicting) {
      t.held_for = j.preemptor;
      t.held_at = after.now;
    }
    t.phase = j.phase;
    t.request_id = j.request_id;
    t.request_time = j.request_time;
    t.preemptor = j.preemptor;
  }
  history_ = after.history;
}

void SlurmBackend::release_held(std::vector<SlurmEvent>* events) {
  // A victim still completing is held only once it is back in the queue: wait for it, briefly.
  for (int pass = 0; pass < 30; ++pass) {
    ClusterState st;
    if (!observe(&st, events).ok()) return;
    release_victims(true, events);
    bool waiting = false;
    for (const auto& [id, t] : tracked_) waiting |= t.held_at != 0;
    if (!waiting) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

Status SlurmBackend::tick(bool execute, Decisions* d, ClusterState* st, std::vector<SlurmEvent>* events) {
  PREEMPT_RETURN_IF_ERROR(observe(st, events));
  *d = Decide(*st, opt_.policy);
  if (!execute) {
    for (const JobAction& a : d->actions) DecideEvent(a, st->now, events);
    return Status::OK();
  }
  const ClusterState before = *st;
  SlurmExecutor executor(opt_, hints_path_, events);
  // An action that failed is reported as an event by the executor and decided again next pass.
  (void)ExecuteDecisions(*d, st->now, &executor, st, &next_request_);
  remember(before, *st);
  release_victims(false, events);
  return Status::OK();
}

}  // namespace preempt::sched
