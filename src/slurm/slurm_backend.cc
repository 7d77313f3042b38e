// The SLURM executor of sched::Decide(): observe (squeue/scontrol + hints), decide, act
// (checkpoint request file, `scontrol requeue`). See include/preempt/sched/slurm.h.
#include <algorithm>
#include <cmath>

#include "preempt/hints.h"
#include "preempt/sched/slurm.h"
#include "preempt/slurm_env.h"

namespace preempt::sched {
namespace {

std::string Fixed(double v, int digits = 1) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

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
    if (pending && t.phase == JobPhase::kEvicting) {  // our requeue went through
      t.phase = JobPhase::kRunning;
      t.last_preempted = s.now;
      t.preemptions++;
      history_.push_back({s.now, sj.partition, 0});
      events->push_back({s.now, "requeued", sj.id, "back in the queue (restart " + std::to_string(sj.restarts) + ")"});
    }
    j.last_preempted = t.last_preempted;
    j.preemptions = std::max(t.preemptions, sj.restarts);
    if (placed) {
      j.phase = sj.state == "COMPLETING" ? JobPhase::kEvicting : JobPhase::kRunning;
      for (size_t n = 0; n < s.nodes.size(); ++n)
        if (s.nodes[n].name == sj.nodes) j.node = static_cast<int>(n);
      if (j.node < 0) continue;  // multi-node jobs are not managed
      j.start_time = sj.start_unix;
      if (t.phase == JobPhase::kCheckpointing || t.phase == JobPhase::kEvicting) {
        j.phase = t.phase;
        j.request_id = t.request_id;
        j.request_time = t.request_time;
        j.preemptor = t.preemptor;
      }
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
  return Status::OK();
}

Status SlurmBackend::carry_out(const JobAction& a, const ClusterState& st, std::vector<SlurmEvent>* events) {
  double now = NowUnix();
  Tracked& t = tracked_[a.job];
  switch (a.kind) {
    case ActionKind::kStart:
      return Status::OK();  // SLURM starts it once its GPUs are free
    case ActionKind::kRequestCheckpoint: {
      const std::string& hints = hints_path_[a.job];
      if (hints.empty()) return Status(StatusCode::kInvalidArgument, "job " + a.job + ": no hints location");
      CheckpointRequest req;
      req.id = ++next_request_;
      PREEMPT_RETURN_IF_ERROR(WriteCheckpointRequest(hints + ".request", req));
      t.phase = JobPhase::kCheckpointing;
      t.request_id = req.id;
      t.request_time = now;
      t.preemptor = a.for_job;
      t.acked = false;
      events->push_back({now, "request", a.job, "checkpoint request " + std::to_string(req.id) + " for " + a.for_job});
      return Status::OK();
    }
    case ActionKind::kEvict: {
      std::string out;
      PREEMPT_RETURN_IF_ERROR(RunCommand({opt_.scontrol, "requeue", a.job}, opt_.command_timeout_s, &out));
      t.phase = JobPhase::kEvicting;
      t.preemptor = a.for_job;
      events->push_back({now, "requeue", a.job, "scontrol requeue for " + a.for_job});
      return Status::OK();
    }
  }
  return Status::OK();
}

Status SlurmBackend::tick(bool execute, Decisions* d, ClusterState* st, std::vector<SlurmEvent>* events) {
  PREEMPT_RETURN_IF_ERROR(observe(st, events));
  *d = Decide(*st, opt_.policy);
  for (const JobAction& a : d->actions) {
    events->push_back({st->now, "decide", a.job,
                       std::string(ActionKindName(a.kind)) + (a.for_job.empty() ? "" : " for " + a.for_job) + " # " +
                           a.reason});
    if (!execute) continue;
    Status s = carry_out(a, *st, events);
    if (!s.ok()) events->push_back({NowUnix(), "error", a.job, s.to_string()});
  }
  return Status::OK();
}

}  // namespace preempt::sched
