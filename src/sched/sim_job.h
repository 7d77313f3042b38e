// sim_job.h — the simulator's model of one job's runs and its event queue (simulator.h).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "preempt/sched/simulator.h"

namespace preempt::sched {

inline constexpr double kSimInf = std::numeric_limits<double>::infinity();

// Progress, commits and lost work of one trace job over its runs.
struct SimJob {
  const TraceJob* t = nullptr;
  int active = -1;            // index in ClusterState::jobs, -1 before arrival / after finish
  int gen = 0;                // bumps on every start/stop, invalidates old events
  double p0 = 0;              // committed progress when the current run started
  double seg_start = 0, seg_restore = 0;
  double extra_progress = -1, extra_time = kSimInf;  // requested checkpoint, or the save on SIGTERM
  double stop_at = kSimInf;      // training stopped here (SIGTERM: the stop snapshot)
  double grace = 0;           // termination grace period
  double exit_at = -kSimInf;     // after SIGTERM: when the process is gone (saved, or killed)
  double first_start = -1, finish = -1;
  double allocated_gpu_s = 0, lost_gpu_s = 0;
  // lost_gpu_s split: restores paid, trained-but-uncommitted progress thrown away, and time
  // between the stop (SIGTERM) and the GPUs being free (the save inside the grace + teardown).
  double lost_restore_gpu_s = 0, lost_discarded_gpu_s = 0, lost_stopped_gpu_s = 0;
  double last_preempted = -kSimInf;
  double moved_at = -1;       // a move (defragmentation) ended its run here; -1 once restarted
  double last_moved = -kSimInf;
  int preemptions = 0, moves = 0;
  bool placed = false;
  int node = -1;

  // Each requested checkpoint of this run pauses training for its stall: [at, at + d), in time
  // order. extra_stall_at: the snapshot of the requested save in flight (kSimInf when a periodic
  // save answered the request).
  struct Stall {
    double at, d;
  };
  std::vector<Stall> stalls;
  double extra_stall_at = kSimInf;

  // Seconds of training in this run up to `now`: after the restore, minus the stalls, until the stop.
  double trained(double now) const {
    double x = std::min(now, stop_at);
    double stalled = 0;
    for (const Stall& st : stalls) stalled += std::min(std::max(0.0, x - st.at), st.d);
    return std::max(0.0, x - seg_start - seg_restore - stalled);
  }
  double progress(double now) const { return std::min(p0 + trained(now), t->duration_s); }
  // When this run reaches progress q (>= p0), training without a stop.
  double time_at(double q) const {
    double when = seg_start + seg_restore + (q - p0);
    for (const Stall& st : stalls)
      if (when > st.at) when += st.d;
    return when;
  }
  // The periodic commit reached at progress p (p0 when none in this run).
  double periodic_at_progress(double p) const {
    p -= t->ckpt_persist_s;
    if (p <= 0) return p0;
    double c = std::floor(p / t->ckpt_interval_s) * t->ckpt_interval_s;
    return std::max(p0, c);
  }
  double periodic(double now) const { return periodic_at_progress(progress(now)); }
  // Committed progress at `now`, given the progress then (progress(now)).
  double committed_at_progress(double now, double p) const {
    double c = periodic_at_progress(p);
    if (now >= extra_time) c = std::max(c, extra_progress);
    return c;
  }
  double committed(double now) const { return committed_at_progress(now, progress(now)); }
  // When the commit `c` (committed(now)) became durable.
  double commit_time_of(double now, double c) const {
    if (now >= extra_time && extra_progress >= c) return extra_time;
    if (c <= p0) return seg_start + seg_restore;
    return time_at(c + t->ckpt_persist_s);
  }
  double commit_time(double now) const { return commit_time_of(now, committed(now)); }
};

enum class EvType { kArrival = 0, kFinish = 1, kCkptDone = 2, kEvictDone = 3, kWake = 4, kRequeued = 5 };
struct Event {
  double time;
  uint64_t seq;
  EvType type;
  int job;
  int gen;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

// Fills res->metrics' per-job outcomes, waits and lost-work totals from the jobs' final state at
// `end`; wait_by: first-start wait per SimMetrics cause slot, per job; largest_node_gpus: the
// size of a whole node for SimMetrics::high_whole_node_jobs.
void FinishMetrics(const std::vector<SimJob>& jobs, const std::vector<std::array<double, SimMetrics::kCauses>>& wait_by,
                   double end, double first_submit, int total_gpus, int largest_node_gpus, double decide_total_us,
                   const SimOptions& opt, SimResult* res);

// res->metrics.bill from the jobs' GPU time up to `end` (sim_bill.cc).
void FinishBill(const std::vector<SimJob>& jobs, double end, const PolicyOptions& policy, SimMetrics* m);

}  // namespace preempt::sched
