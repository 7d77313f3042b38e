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
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "preempt/hints.h"

namespace preempt::sched {

enum class PriorityClass : int { kLow = 0, kMedium = 1, kHigh = 2 };
inline constexpr int kNumClasses = 3;
const char* PriorityClassName(PriorityClass c);  // "low" | "medium" | "high"
bool ParsePriorityClass(const std::string& s, PriorityClass* out);

enum class PolicyKind { kFcfs, kKubernetes, kHintAware };
const char* PolicyKindName(PolicyKind k);  // "fcfs" | "k8s" | "hint"

struct PolicyConfig {
  PolicyKind kind = PolicyKind::kHintAware;
  // Priority values (wide gaps, as the Kubernetes PriorityClasses in examples/k8s) and whether a
  // class may preempt lower classes (false = "Never" preemption policy). Decide() compares
  // classes; the values record the mapping to cluster priorities (`plan --k8s` maps a pod's
  // spec.priority to a class with the default values).
  int64_t priority_value[kNumClasses] = {1, 100, 1000000};
  bool preempts_lower[kNumClasses] = {false, true, true};

  // Hint-aware rules; each is off when set to 0 / false.
  bool checkpoint_then_evict = true;   // ask the victim to checkpoint, evict after the commit
  // Trust the runtime's SIGTERM path: a victim with fresh hints whose grace need (drain + stall +
  // persist) fits the grace it is granted (hints grace.granted_s) is sent SIGTERM directly and
  // saves inside its termination grace period; no separate checkpoint request round trip.
  // Checkpoint-then-evict stays for victims whose grace need exceeds their grant (or is unknown).
  bool sigterm_save = true;
  // A victim whose uncommitted work is at most this many seconds is killed at once (no grace
  // period) when a high-priority job needs its GPUs: it loses that little work, and the
  // preemptor does not wait for a save. 0 = off.
  double kill_now_max_lost_s = 120;
  // A victim whose uncommitted work is less than what its save would lose (the work done while
  // the snapshot persists) is killed at once instead of saving. false: every victim that can
  // save does (for operators who want each eviction graceful).
  bool kill_when_cheaper = true;
  // The longest a high-priority job should wait for one victim's save: a victim whose save
  // (drain + stall + persist) takes longer is killed at once instead (see the limit below), and
  // the victim search prefers nodes whose victims save in time (the cost counts the lost work).
  // < 0 (default): the victim's own grace period (hints grace.granted_s), i.e. never longer than
  // Kubernetes would make the preemptor wait for that victim; 0 = off: a slow saver checkpoints
  // first (up to checkpoint_deadline_s) and the node choice charges the preemptor's wait at its
  // GPU count.
  double high_tolerable_wait_s = -1;
  // ... but a too-slow saver with more than this many seconds of uncommitted work saves anyway
  // (checkpoint first) and the preemptor waits: killing it would throw that work away. 0 = no
  // limit. (Both defaults were chosen on the benchmark over 50 synthetic seeds and the Alibaba
  // trace: docs/sched.md §4.)
  double tolerable_kill_max_lost_s = 600;
  // ... and only for high preemptors of at least this many GPUs (1 = all). A preemptor of several
  // GPUs clears a whole set of victims and waits for the slowest save while the GPUs already
  // freed sit idle for it; a 1-GPU preemptor waits for one victim, and killing that one only
  // shortened waits that were not in the tail on any benchmark trace while it threw work away.
  int tolerable_wait_min_gpus = 2;
  double checkpoint_deadline_s = 300;  // evict anyway when the commit has not shown up by then
  bool kill_after_commit = true;       // once the requested commit is durable, kill at once (no second save on SIGTERM)
  double min_runtime_s = 300;          // not a victim before running this long since it resumed from its last commit
  double cooldown_s = 300;             // a preempted job is not restarted before this
  double budget_window_s = 3600;       // per-queue preemption budget window
  int budget_max_preemptions = 0;      // victims per queue per window (0 = unlimited)
  double budget_max_lost_gpu_hours = 0;  // estimated lost GPU-hours per queue per window (0 = unlimited)
  double reserved_headroom = 0.15;     // fraction of all GPUs that only high priority may take
  bool refill_headroom = false;        // keep that fraction free: checkpoint-then-evict lower jobs in the background
  double low_guaranteed_share = 0;     // low may always hold this fraction; it is never preempted below it
  double hints_stale_s = 300;          // hints older than this are "unknown"
  double unknown_lost_work_s = 3600;   // lost work assumed for a job with no valid hints (never free)
  // Save time (and work lost while saving) assumed for a job whose hints carry no measured
  // checkpoint cost (all zero: it has not checkpointed in this run yet) — unknown, so not free.
  double unknown_save_s = 60;
  double restore_s = 60;               // default restore time when a job does not know its own
  double wait_alert_s = 600;           // suggest action when a high job's estimated wait passes this
  // A high-priority job that has waited this long may take victims still inside their minimum
  // run time (never jobs in their cooldown). 0 = off.
  double high_min_runtime_override_s = 0;
  // A pending job below high priority preempts lower jobs only after waiting this long (since it
  // was submitted or requeued): in a busy cluster GPUs freed by finishing jobs usually come
  // first, and every preemption costs its victim a save and a restore. High-priority jobs always
  // preempt at once. 0 = off.
  double nonhigh_preempt_delay_s = 1800;
  // Defragmentation for high priority: when no node can free enough GPUs from lower-priority jobs
  // because smaller high-priority jobs are spread over the nodes, move up to defrag_max_moves of
  // them off one node (save, then restart at once on another node, where free GPUs or
  // lower-priority victims make room now). A moved job keeps its priority, skips the cooldown and
  // loses only its save and restore; it is movable when its hints are fresh, its save fits
  // checkpoint_deadline_s, it has run min_runtime_s since it started, and it was not moved or
  // preempted within cooldown_s + min_runtime_s. Tried for a high job that has waited
  // defrag_min_wait_s. 0 moves = off.
  int defrag_max_moves = 4;
  double defrag_min_wait_s = 0;
  int max_preemptors_per_pass = 256;   // bound on victim searches per Decide() call
};

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
  // Hints as last read; nullopt = none/unreadable. hints_time is the time they describe
  // (updated_unix); lost work is extrapolated from it.
  std::optional<Hints> hints;
  double restore_s = -1;           // < 0: use PolicyConfig::restore_s
  // While kCheckpointing: the request and the job whose GPUs these are.
  int64_t request_id = 0;
  double request_time = 0;
  std::string preemptor;
  int64_t user = -1;               // opaque tag for the caller (the simulator's job index)

  // Back to the queue after an eviction: unplaced, the preemption counted (cooldown starts now),
  // and what described the finished run (hints, the job it made room for, any move) forgotten.
  void RequeueAfterPreemption(double now) {
    Unplace();
    last_preempted = now;
    preemptions++;
    move_to = -1;
  }
  // Back to the queue after a move off its node (defragmentation): unplaced and waiting to restart
  // on move_to, which is kept; no cooldown (it is not a preemption), the move counted.
  void RequeueAfterMove(double now) {
    Unplace();
    last_moved = now;
    moves++;
  }

 private:
  void Unplace() {
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

struct ClusterState {
  double now = 0;                      // same clock as hints' unix times (the simulator's clock in simulation)
  std::vector<Node> nodes;
  std::vector<Job> jobs;
  std::vector<PreemptionRecord> history;  // may include records older than the window
};

enum class ActionKind {
  kStart,                // place `job` on `node`
  kRequestCheckpoint,    // victim: write a checkpoint request; evict once it is committed
  kEvict,                // victim: SIGTERM now (its checkpoint is durable, or evict-now policy)
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
Decisions Decide(const ClusterState& state, const PolicyConfig& config);

// Presets: the baselines with every hint-aware rule off.
PolicyConfig FcfsPolicy();
PolicyConfig KubernetesPolicy();
// Hint-aware victim choice and checkpoint-then-evict, but no anti-thrashing/starvation rules.
PolicyConfig HintAwareNoRulesPolicy();

// Lost work, in seconds, of a running job at `now` if it were killed without a checkpoint;
// unknown_lost_work_s when its hints are missing or stale.
double EstimatedLostWork(const Job& job, double now, const PolicyConfig& config);
// True when the job's hints are present and not older than hints_stale_s.
bool HintsFresh(const Job& job, double now, const PolicyConfig& config);

}  // namespace preempt::sched
