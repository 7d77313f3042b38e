// preempt/coord.h — every rank agrees on one stop step; collectives in flight are drained.
//
// The agreement protocol (StopCoordinator::check): at every "check step" (step % check_every ==
// 0, a deterministic schedule every rank computes alike) each rank contributes
//     [stop_seen, checkpoint_requested, -remaining_deadline_ms]
// to one all-reduce(MAX) of three int64. Every rank gets the same answer at the same step, so
// when any rank saw SIGTERM all ranks stop after that same step — including ranks that got no
// signal — and all adopt the earliest deadline any rank reported. Between check steps nothing is
// exchanged (check() returns at once), so the per-step cost is one collective every
// `check_every` steps; the price is up to check_every − 1 extra steps before a stop is noticed.
//
// Buffers: a collective never keeps a pointer to the caller's memory. Values are copied into a
// buffer the transport owns (shared with its in-flight operation) and copied back only when the
// operation completed by the deadline, so a collective abandoned at its deadline can finish (or
// never finish) later without touching memory the caller has reused.
//
// Deadlines are explicit: every wait takes a Deadline, and an UntilStop argument says whether the
// process's stop deadline (StopDeadline(), which appears when a stop signal arrives during the
// wait) also ends it.
//
// Draining: before the snapshot, everything registered with a Drain is waited with the stop
// deadline. Past the deadline the drain aborts what it can (c10d Work::abort, ncclCommAbort) and
// returns kDeadlineExceeded; the process group is then unusable and must not be destroyed by the
// caller (gloo's destructor waits for its queue): Collective::abandon() keeps it alive until exit.
//
// This header is LibTorch-free; the c10d adapters are in preempt/coord_c10d.h and the raw NCCL
// backend in preempt/coord_nccl.h (built only with CUDA + NCCL).
//
// Thread-safety: a StopCoordinator and a Collective are used by the training thread only. A
// Drain's add/drain may be called from different threads (internally locked).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "preempt/deadline.h"
#include "preempt/status.h"

namespace preempt {

// Whether a wait also ends at the process's stop deadline (StopDeadline() in preempt/signal.h).
// It is re-read while waiting, so a stop signal that arrives during the wait shortens it.
enum class UntilStop { kNo, kYes };

// `deadline`, or the earlier of it and StopDeadline() for UntilStop::kYes (at this instant).
Deadline EffectiveDeadline(Deadline deadline, UntilStop until_stop);

// The one collective the coordinator needs, over whatever transport the job uses.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Element-wise MAX over all ranks of `values[0..n)`, n <= 16. The values are copied into a
  // transport-owned buffer; the result is copied back into `values` only on OK. Waits until
  // `deadline` (see UntilStop); kDeadlineExceeded past it (the transport is then considered
  // broken: see abandon()), and `values` is never written after the call returned.
  virtual Status allreduce_max(int64_t* values, int n, Deadline deadline, UntilStop until_stop) = 0;
  // After a deadline miss: keep the transport alive (leak it) so no destructor blocks on a peer
  // that will never answer; the process is expected to exit soon.
  virtual void abandon() {}
  virtual std::string name() const = 0;

  // Asynchronous variant for the pipelined schedule: starts the reduction of a copy of `values`
  // and returns at once. wait() blocks until done or the deadline and, on OK, writes the n
  // reduced values to `out`.
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual Status wait(Deadline deadline, UntilStop until_stop, int64_t* out) = 0;
  };
  // Default: runs the blocking allreduce_max now and returns a completed handle.
  virtual std::unique_ptr<Pending> allreduce_max_async(const int64_t* values, int n);
};

// A single-process job: allreduce is the identity.
class LocalCollective : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status allreduce_max(int64_t*, int, Deadline, UntilStop) override { return Status::OK(); }
  std::string name() const override { return "local"; }
};

// Something whose in-flight operations must finish before the snapshot.
class DrainSource {
 public:
  virtual ~DrainSource() = default;
  // Waits for everything in flight to complete until `deadline`. Past it: aborts (if the backend
  // can) and returns kDeadlineExceeded naming what was still pending.
  virtual Status drain(Deadline deadline) = 0;
  virtual std::string name() const = 0;
};

struct CoordOptions {
  // Exchange every `check_every` steps (>= 1). Every rank must use the same value.
  int64_t check_every = 1;
  // Bound on one agreement collective when no stop deadline is known yet.
  double collective_timeout_s = 300;
  // Pipelined: the exchange launched at check step s is consumed at the next check step, so its
  // latency hides behind a step of training; a check step then costs only the launch. The stop
  // is decided one check period later (at most 2·check_every − 1 steps after the signal).
  // Every rank must use the same value.
  bool pipelined = false;
};

struct StopDecision {
  bool checked = false;     // an exchange happened at this step
  bool stop = false;        // some rank saw a stop: every rank stops after this step
  bool checkpoint = false;  // some rank was asked for a checkpoint: every rank saves at this step
  int64_t step = -1;
  Deadline deadline = Deadline::Never();  // earliest deadline any rank reported
};

struct CoordStats {
  int64_t checks = 0;
  double last_check_s = 0;
  double total_check_s = 0;
  double max_check_s = 0;
  double mean_check_s() const { return checks ? total_check_s / checks : 0; }
};

class StopCoordinator {
 public:
  // `collective` must outlive the coordinator.
  StopCoordinator(Collective* collective, CoordOptions options = {});
  // Pipelined: waits (bounded) for the exchange still in flight.
  ~StopCoordinator();

  // Called by every rank at the end of every step with what this rank saw locally. Returns at
  // once off the schedule; on a check step it waits for the exchange, bounded by the earlier of
  // `local_deadline`, collective_timeout_s and (UntilStop::kYes) a stop deadline that appears
  // while waiting. A kDeadlineExceeded/transport error means the agreement failed: the caller
  // should stop without a new checkpoint.
  Status check(int64_t step, bool local_stop, bool local_checkpoint, Deadline local_deadline,
               UntilStop until_stop, StopDecision* out);
  bool is_check_step(int64_t step) const { return step % options_.check_every == 0; }

  const CoordStats& stats() const { return stats_; }
  Collective* collective() const { return collective_; }

 private:
  Collective* collective_;
  CoordOptions options_;
  CoordStats stats_;
  std::unique_ptr<Collective::Pending> inflight_;
  std::chrono::steady_clock::time_point inflight_launched_{};
};

// Runs every source's drain with one deadline; the first error is returned (all are attempted).
Status DrainAll(const std::vector<DrainSource*>& sources, Deadline deadline);

}  // namespace preempt
