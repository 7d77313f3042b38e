// preempt/sched/policy.h — the cluster model and the preemption decision function.
//
// Decide() takes one snapshot of a cluster (nodes with GPU slots, pending and running jobs with
// their hints) and returns what to do now: which jobs to start, which to preempt and how
// (checkpoint-then-evict, or evict now), each with a one-line reason, plus an estimated wait for
// each high-priority job left pending and a suggestion when that wait is too long. It is a pure function of its inputs: the
// simulator, the `plan` CLI and the `run` launcher all call it and execute its decisions.
//
// Policies: kHintAware (this project), and two baselines for comparison: kFcfs (first come first
// served, no preemption) and kKubernetes (default kube-scheduler victim order: lowest priority,
// then fewest victims, then most recently started; evict immediately).
//
// Thread-safety: Decide() is reentrant; it only reads its arguments.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "preempt/hints.h"
#include "preempt/sched/policy_options.h"

namespace preempt::sched {

enum class JobPhase {
  kPending,        // waiting to start (or to restart after preemption)
  kRunning,
  kCheckpointing,  // asked to checkpoint; its GPUs are promised to `preemptor` ("" = headroom refill)
  kEvicting,       // told to stop; its GPUs are promised to `preemptor` ("" = headroom refill)
};
const char* JobPhaseName(JobPhase p);

struct Node {
  std::string name;
  int gpus = 0;
};

struct Job {
  std::string id;
  PriorityClass cls = PriorityClass::kLow;
  std::string queue = "default";
  int gpus = 1;
  double submit_time = 0;          // first submission
  JobPhase phase = JobPhase::kPending;
  int node = -1;                   // index into ClusterState::nodes while placed
  double start_time = 0;           // start of the current run (valid while placed)
  double last_preempted = -std::numeric_limits<double>::infinity();
  int preemptions = 0;
  // Moves (defragmentation): while being moved and until restarted, the node it restarts on
  // (-1 otherwise); the last move ends its run at last_moved.
  int move_to = -1;
  double last_moved = -std::numeric_limits<double>::infinity();
  int moves = 0;
  // A pending job for which victims were evicted: the node they leave (-1 none). The whole nodes
  // kept free for high priority (PolicyOptions::reserved_nodes) do not keep it off that node once
  // they are gone: it made that room itself, and the reserve is no smaller than before. Set by
  // ApplyDecision (executor.h), cleared when the job starts.
  int claimed_node = -1;
  // Hints as last read; nullopt = none/unreadable. hints_time is the time they describe
  // (updated_unix); lost work is extrapolated from it.
  std::optional<Hints> hints;
  double restore_s = -1;           // < 0: use PolicyOptions::restore_s
  // While kCheckpointing: the request and the job whose GPUs these are. A running job keeps the
  // id and time of its last request of this run (ahead of need, or a withdrawn eviction's).
  int64_t request_id = 0;
  double request_time = 0;
  std::string preemptor;
  int64_t user = -1;               // opaque tag for the caller (the simulator's job index)

  // Pending since: submitted, or requeued by the last preemption (what the cooldown, the
  // preemption delay and the whole-node reserve's bound on a wait count from).
  double pending_since() const { return submit_time > last_preempted ? submit_time : last_preempted; }

  // Back to the queue after an eviction: unplaced, the preemption counted (cooldown starts now),
  // and what described the finished run (hints, the job it made room for, any move) forgotten.
  void requeue_after_preemption(double now) {
    unplace();
    last_preempted = now;
    preemptions++;
    move_to = -1;
  }
  // Back to the queue after a move off its node (defragmentation): unplaced and waiting to restart
  // on move_to, which is kept; no cooldown (it is not a preemption), the move counted.
  void requeue_after_move(double now) {
    unplace();
    last_moved = now;
    moves++;
  }

 private:
  void unplace() {
    phase = JobPhase::kPending;
    node = -1;
    hints.reset();
    preemptor.clear();
  }
};

struct PreemptionRecord {  // history for the per-queue budget
  double time = 0;
  std::string queue;
  double lost_gpu_hours = 0;
};

// A high-priority job's first start: when, and how long it had waited since it was submitted.
struct HighStartRecord {
  double time = 0;
  double wait_s = 0;
};
// The longest PolicyOptions::high_wait_guard_window_s; ApplyDecision forgets older first starts.
inline constexpr double kHighStartLogSpanS = 7 * 86400.0;

struct ClusterState {
  double now = 0;                      // same clock as hints' unix times (the simulator's clock in simulation)
  std::vector<Node> nodes;
  std::vector<Job> jobs;
  std::vector<PreemptionRecord> history;  // may include records older than the window
  // First starts of high-priority jobs (a job never preempted or moved before), oldest first, for
  // the high-wait guard (PolicyOptions::high_wait_guard_s). Appended by ApplyDecision, which drops
  // those older than kHighStartLogSpanS; a state built from scratch (`plan`) has none.
  std::deque<HighStartRecord> high_starts;
};

enum class ActionKind {
  kStart,                // place `job` on `node`
  kRequestCheckpoint,    // victim: write a checkpoint request; evict once it is committed
  kEvict,                // victim: SIGTERM now (its checkpoint is durable, or evict-now policy)
  // A victim asked to checkpoint is not evicted after all: the job it was checkpointing for
  // (`for_job`) starts elsewhere now. It keeps running; its requested checkpoint is an ordinary
  // commit (nothing is sent to it).
  kWithdraw,
  // A running job that is not a victim: write a checkpoint request now (ahead of need,
  // PolicyOptions::ahead_checkpoints). It keeps running, promised to nobody; a later eviction
  // finds its save in flight or done.
  kCheckpointAhead,
};
const char* ActionKindName(ActionKind k);

// How a victim leaves (the decision; the reason text explains it). kNone for starts.
enum class EvictionMode {
  kNone,
  kSigterm,          // SIGTERM with its own grace period (baselines, or no fresh hints): saves there if it can
  kSaveInGrace,      // SIGTERM: its hints say its save fits the grace it is granted
  kCheckpointFirst,  // checkpoint request first (kRequestCheckpoint), evicted after the commit
  kKillCheap,        // kill at once: less uncommitted work than a save would lose
  kKillSmall,        // kill at once for a high preemptor: uncommitted work <= kill_now_max_lost_s
  kKillSlow,         // kill at once for a high preemptor: its save would outlast the tolerable wait
  kAfterCommit,      // its requested checkpoint is durable: evicted (at once with kill_after_commit)
  kAfterDeadline,    // its requested checkpoint missed checkpoint_deadline_s: evicted anyway
};
const char* EvictionModeName(EvictionMode m);  // "none" | "sigterm" | "save-in-grace" | ...

// One decision about one job. (Named JobAction: preempt::Action is the runtime's per-step answer.)
struct JobAction {
  ActionKind kind = ActionKind::kStart;
  EvictionMode mode = EvictionMode::kNone;
  std::string job;
  int job_index = -1;           // index into ClusterState::jobs
  int node = -1;
  std::string for_job;
  int for_index = -1;          // the preemptor, for victims
  double est_lost_gpu_s = 0;    // estimated work lost by a victim (GPU-seconds, incl. restore)
  // kEvict only: seconds between SIGTERM and SIGKILL. < 0: the job's own termination grace period
  // (a preempt-aware job saves inside it); 0: kill at once (the victim's last commit is what it
  // resumes from).
  double grace_s = -1;
  // Victims only: >= 0 when the victim is moved, not preempted (defragmentation for `for_job`):
  // it saves, then restarts at once on this node; the executor sets Job::move_to to it and,
  // when the victim has exited, requeues it with Job::RequeueAfterMove.
  int to_node = -1;
  std::string reason;           // one line
};

// Why a high-priority job is still pending after a pass (for the estimate and for wait breakdowns).
enum class WaitCause {
  kVictimsLeaving,  // victims chosen for it are checkpointing / saving / exiting
  kMinRuntime,      // the lower jobs that would free enough GPUs are inside their minimum run time
  kBudget,          // a queue's preemption budget is exhausted
  kLowShare,        // the only victims would take low below its guaranteed share
  kNoVictim,        // no node can free enough GPUs from lower-priority jobs
  kOther,           // larger than any node, policy does not preempt, search limit
};
inline constexpr int kNumWaitCauses = 6;
const char* WaitCauseName(WaitCause c);  // "victims-leaving" | "min-runtime" | ...

struct WaitEstimate {  // for each high-priority job still pending after this pass
  std::string job;
  int job_index = -1;           // index into ClusterState::jobs
  WaitCause cause = WaitCause::kOther;
  double waited_s = 0;
  double est_wait_s = 0;        // total expected wait (inf when nothing will free GPUs)
  std::string suggestion;       // empty unless est_wait_s > wait_alert_s
};

struct Decisions {
  std::vector<JobAction> actions;
  std::vector<WaitEstimate> waits;
  // Earliest future time at which a rule that blocked something now stops blocking it
  // (cooldown end, min-runtime end, budget window, checkpoint deadline); +inf if none.
  double recheck_at = std::numeric_limits<double>::infinity();
};

// Preconditions (what the snapshot and pod-list parsers and the simulator guarantee): job ids are
// unique; a placed job's node and a moved job's move_to index `nodes`; no node holds more GPUs
// than it has (placed jobs plus the holds of moved jobs); times are finite. tests/fuzz/fuzz_sched.cc
// checks the decisions on arbitrary states within them.
Decisions Decide(const ClusterState& state, const PolicyOptions& config);

// Lost work, in seconds, of a running job at `now` if it were killed without a checkpoint;
// unknown_lost_work_s when its hints are missing or stale.
double EstimatedLostWork(const Job& job, double now, const PolicyOptions& config);
// True when the job's hints are present and not older than hints_stale_s.
bool HintsFresh(const Job& job, double now, const PolicyOptions& config);

}  // namespace preempt::sched
