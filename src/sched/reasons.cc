#include "reasons.h"

#include <cstdarg>
#include <cstdio>

namespace preempt::sched {

std::string Fmt(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  const int n = vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

JobAction VictimAction(const PassState& p, int vi, int node, const std::string& for_job, int for_index,
                       const VictimCost& vc, std::string reason, int to_node) {
  JobAction a;
  a.kind = vc.checkpoint_first ? ActionKind::kRequestCheckpoint : ActionKind::kEvict;
  a.mode = vc.mode;
  a.grace_s = vc.grace_s;
  a.job = p.jobs[vi].id;
  a.job_index = vi;
  a.node = node;
  a.for_job = for_job;
  a.for_index = for_index;
  a.to_node = to_node;
  a.est_lost_gpu_s = vc.lost_gpu_s;
  a.reason = std::move(reason);
  return a;
}

const char* HowText(const VictimCost& vc) {
  if (vc.checkpoint_first) return "checkpoint first";
  switch (vc.mode) {
    case EvictionMode::kSaveInGrace: return "SIGTERM, saves within its grace";
    case EvictionMode::kKillCheap: return "kill now (less uncommitted than a save loses)";
    case EvictionMode::kKillSlow: return "kill now (save too slow)";
    case EvictionMode::kKillSmall: return "kill now (little uncommitted work)";
    default: return "SIGTERM with its own grace";
  }
}

namespace {
// Whom a leaving victim's GPUs go to: its preemptor, or nobody yet (a headroom refill, a
// suspension window).
std::string ForWhom(const Job& v) {
  return v.preemptor.empty() ? "(no job waits for its GPUs)" : "for " + v.preemptor;
}
}  // namespace

std::string CommittedReason(const Job& v, bool kill_now) {
  return Fmt("checkpoint request %lld acknowledged, commit at step %lld is durable; %s %s",
             static_cast<long long>(v.request_id), static_cast<long long>(v.hints->last_commit.step),
             kill_now ? "killing now" : "evicting", ForWhom(v).c_str());
}

std::string DeadlineReason(const Job& v, double deadline_s) {
  return Fmt("checkpoint request %lld not committed within %.0f s deadline; evicting now %s",
             static_cast<long long>(v.request_id), deadline_s, ForWhom(v).c_str());
}

std::string SearchVictimReason(const PassState& p, int vi, const Job& j, int node, int count, const VictimCost& vc) {
  const Job& v = p.jobs[vi];
  const PolicyOptions& cfg = p.cfg;
  const char* on = p.st.nodes[node].name.c_str();
  const char* cls = PriorityClassName(j.cls);
  const double uncommitted = EstimatedLostWork(v, p.now, cfg);
  if (cfg.kind == PolicyKind::kKubernetes) {
    std::string grace = vc.grace_s > 0 ? Fmt("; grace %.0f s sized from its hints", vc.grace_s) : "";
    return Fmt("k8s order: %s victim on %s for %s job %s (%d victim(s) on node, started %.0f s ago%s)",
               PriorityClassName(v.cls), on, cls, j.id.c_str(), count, p.now - v.start_time, grace.c_str());
  }
  switch (vc.mode) {
    case EvictionMode::kSaveInGrace:
      return Fmt("least lost work on %s for %s job %s: SIGTERM, saves within its %.0f s grace (needs %.1f s), "
                 "loses %.0f GPU-s incl. restore vs %.0f s uncommitted now",
                 on, cls, j.id.c_str(), vc.grace_s > 0 ? vc.grace_s : v.hints->grace.granted_s, vc.wait_s,
                 vc.lost_gpu_s, uncommitted);
    case EvictionMode::kKillSmall:
      return Fmt("least lost work on %s for high job %s: kill now, only %.0f s uncommitted (<= %.0f s, no "
                 "wait for a save), %.0f GPU-s incl. restore",
                 on, j.id.c_str(), uncommitted, cfg.kill_now_max_lost_s, vc.lost_gpu_s);
    case EvictionMode::kKillSlow:
      return Fmt("least lost work on %s for high job %s: kill now, its save (%.1f s) would outlast the %.0f s "
                 "tolerable wait%s; %.0f s uncommitted, %.0f GPU-s incl. restore",
                 on, j.id.c_str(), vc.save_s, TolerableWait(v, cfg),
                 cfg.high_tolerable_wait == TolerableWait::kVictimGrace ? " (its grace period)" : "", uncommitted, vc.lost_gpu_s);
    case EvictionMode::kKillCheap:
      return Fmt("least lost work on %s for %s job %s: kill now, %.0f s uncommitted is less than a save "
                 "would lose, %.0f GPU-s incl. restore",
                 on, cls, j.id.c_str(), uncommitted, vc.lost_gpu_s);
    case EvictionMode::kCheckpointFirst:
      return Fmt("least lost work on %s for %s job %s: checkpoint first (%.1f s) loses %.0f GPU-s incl. "
                 "restore vs %.0f s uncommitted now",
                 on, cls, j.id.c_str(), vc.wait_s, vc.lost_gpu_s, uncommitted);
    default:
      return Fmt("least lost work on %s for %s job %s: SIGTERM with its own grace, %.0f s uncommitted%s, %.0f GPU-s "
                 "incl. restore",
                 on, cls, j.id.c_str(), uncommitted, HintsFresh(v, p.now, cfg) ? "" : " (no fresh hints: assumed)",
                 vc.lost_gpu_s);
  }
}

std::string MoveReason(const PassState& p, const Job& j, int node, int to_node, int moves, const VictimCost& vc) {
  return Fmt("move to %s so high job %s fits on %s (%d move(s)): %s, loses %.0f GPU-s incl. restore",
             p.st.nodes[to_node].name.c_str(), j.id.c_str(), p.st.nodes[node].name.c_str(), moves, HowText(vc),
             vc.lost_gpu_s);
}

std::string ClearReason(const PassState& p, const Job& j, int node, int moves, const VictimCost& vc) {
  return Fmt("clear %s for high job %s (with %d move(s) of high jobs): %s, loses %.0f GPU-s incl. restore",
             p.st.nodes[node].name.c_str(), j.id.c_str(), moves, HowText(vc), vc.lost_gpu_s);
}

std::string MakeRoomReason(const PassState& p, const Job& j, const Job& moved, int node, int cleared,
                           const VictimCost& vc) {
  return Fmt("make room on %s for %s, moved off %s for high job %s: %s, loses %.0f GPU-s incl. restore",
             p.st.nodes[node].name.c_str(), moved.id.c_str(), p.st.nodes[cleared].name.c_str(), j.id.c_str(),
             HowText(vc), vc.lost_gpu_s);
}

std::string RefillReason(int free_gpus, int reserve, const VictimCost& vc) {
  return Fmt("refill reserved headroom for high priority (%d of %d GPUs free): %s, loses %.0f GPU-s incl. restore",
             free_gpus, reserve, HowText(vc), vc.lost_gpu_s);
}

}  // namespace preempt::sched
