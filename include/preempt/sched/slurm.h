// preempt/sched/slurm.h — the scheduler component's SLURM backend: Decide() on a live cluster.
//
// Reads the cluster through SLURM's own commands (`squeue --json` for jobs; `scontrol show
// partition -o`, `scontrol show node -o` and `scontrol show config` as text, since SLURM 22.05's
// scontrol has no JSON output), each job's hints file, and acts through SLURM:
//   * kRequestCheckpoint: writes the job's checkpoint-request file (<hints>.request); the runtime
//     checkpoints without stopping and acknowledges in its hints once the commit is durable;
//   * kEvict: `scontrol requeue <job>`: SLURM sends SIGTERM, SIGKILL after KillWait, and puts the
//     job back in the queue; the job resumes from its checkpoint when it starts again;
//   * kStart: nothing; SLURM starts jobs itself once their GPUs are free.
// Victims are chosen only by this backend: the partitions it manages have PreemptMode=OFF, so
// SLURM's own preemption (which picks victims by its tiers, without any notion of lost work)
// never races with it, and a high-tier job waits until the backend frees its GPUs (docs/slurm.md).
//
// Hints location of a job, first match: its comment `preempt-hints=PATH` (`%j` is replaced by the
// job id; `sbatch --comment=...`), else <hints_dir>/<job id>.hints.json (the batch script sets
// PREEMPT_HINTS_FILE=$DIR/$SLURM_JOB_ID.hints.json).
//
// Thread-safety: a SlurmBackend is used by one thread; the parsers are reentrant.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "preempt/sched/policy.h"
#include "preempt/status.h"

namespace preempt::sched {

struct SlurmPartition {
  std::string name;
  int priority_tier = 1;
  double grace_time_s = 0;       // GraceTime (SLURM's own preemption)
  std::string preempt_mode;      // OFF, REQUEUE, CANCEL, ...
};

struct SlurmJob {
  std::string id;
  std::string partition;
  std::string state;             // PENDING, RUNNING, COMPLETING, REQUEUED, ...
  int gpus = 0;                  // from tres_per_node "gres:gpu:N" (0: no GPUs requested)
  double submit_unix = 0, start_unix = 0;
  int restarts = 0;
  std::string nodes;
  std::string comment;
};

// `squeue --json` (OpenAPI v0.0.38 as printed by SLURM 22.05; later versions' field shapes for
// numbers {"set":..,"number":..} are accepted too). Errors name `origin` and the field.
Status ParseSqueueJson(const std::string& text, const std::string& origin, std::vector<SlurmJob>* out);
// `scontrol show partition -o` / `scontrol show node -o` (one "Key=Value ..." record a line).
Status ParsePartitions(const std::string& text, std::vector<SlurmPartition>* out);
Status ParseNodes(const std::string& text, std::vector<Node>* out);
// "KillWait = 30 sec" from `scontrol show config`; 30 when absent.
double ParseKillWait(const std::string& config_text);
// The job's hints file (see above).
std::string HintsPathForJob(const SlurmJob& job, const std::string& hints_dir);

struct SlurmBackendOptions {
  PolicyOptions policy;
  std::string hints_dir;                   // default hints location (see above)
  std::set<std::string> partitions;        // managed partitions (empty: all)
  // Partition → class; partitions not listed: the highest PriorityTier is high, the lowest low,
  // any between medium.
  std::map<std::string, PriorityClass> partition_class;
  std::string squeue = "squeue", scontrol = "scontrol";
  double command_timeout_s = 20;
};

// One event of the backend (printed by the CLI, kept by tests).
struct SlurmEvent {
  double unix = 0;
  std::string kind;    // decide request ack requeue requeued warn error
  std::string job;
  std::string detail;
};

class SlurmBackend {
 public:
  explicit SlurmBackend(SlurmBackendOptions options);
  // Reads the cluster and the hints into a ClusterState (jobs it asked to checkpoint or evicted
  // keep their phase); warnings for grace needs above the partition's GraceTime / KillWait.
  Status observe(ClusterState* out, std::vector<SlurmEvent>* events);
  // Observe + Decide; with `execute`, carries the decisions out. Events describe both.
  Status tick(bool execute, Decisions* decisions, ClusterState* state, std::vector<SlurmEvent>* events);

 private:
  struct Tracked {
    JobPhase phase = JobPhase::kRunning;
    int64_t request_id = 0;
    double request_time = 0;
    std::string preemptor;
    bool acked = false;
    double last_preempted = -1e300;
    int preemptions = 0;
    int restarts_at_evict = -1;
    bool grace_warned = false;
  };
  PriorityClass class_of(const std::string& partition) const;
  void warn_grace(const SlurmJob& sj, const Job& j, std::vector<SlurmEvent>* events);
  Status carry_out(const JobAction& a, const ClusterState& st, std::vector<SlurmEvent>* events);

  SlurmBackendOptions opt_;
  std::vector<SlurmPartition> partitions_;
  double kill_wait_s_ = 30;
  std::map<std::string, Tracked> tracked_;
  std::map<std::string, std::string> hints_path_;
  std::vector<PreemptionRecord> history_;
  int64_t next_request_ = 0;
};

}  // namespace preempt::sched
