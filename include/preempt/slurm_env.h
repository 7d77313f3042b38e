// preempt/slurm_env.h — what a training task learns from SLURM, and the job's own requeue.
//
// A task started by SLURM (sbatch's batch script, or one task of `srun -n N`) finds its place in
// the job in the environment: SLURM_JOB_ID, SLURM_PROCID (rank), SLURM_NTASKS (world size),
// SLURM_LOCALID, SLURM_NODEID, SLURM_RESTART_COUNT (how often the job was requeued) and
// SLURM_JOB_PARTITION. ReadSlurmTask() parses them strictly (an unparsable or out-of-range value
// is an error naming the variable, never a silent default).
//
// Wall-time limit: SLURM kills a job at its time limit; `sbatch --signal=B:USR1@N` sends SIGUSR1
// to the batch shell N seconds before (`--signal=USR1@N`: to the srun steps). With
// PREEMPT_STOP_SIGNALS=TERM,USR1 the runtime stops and commits on it; then, when the stop signal
// is one of the "requeue signals" (PREEMPT_SLURM_REQUEUE_ON, default USR1; "none" turns it off),
// the stop checkpoint committed, and this is rank 0 of a SLURM job, Runtime::exit_code() runs
// `scontrol requeue <job>` (PREEMPT_SCONTROL, default "scontrol"), so the job goes back to the
// queue and its next run resumes from the commit. SIGTERM is not a requeue signal by
// default (`scancel` sends it too). SLURM requeues preempted jobs itself, but with PreemptMode=REQUEUE and GraceTime SLURM (22.05) requeues a preempted job only
// when it is still running at the end of the grace; a job that saved and exited inside it would
// end as COMPLETED. So after SIGTERM, when `scontrol show job` shows a PreemptTime (the job is
// being preempted, not cancelled), rank 0 requeues the job too (PREEMPT_SLURM_REQUEUE_PREEMPTED=0
// turns this off). The requeue sends SIGTERM to every process of the job, the batch shell included:
// a batch script that runs `srun` traps it (`trap 'true' TERM`), or the shell dies and takes `srun`
// and the tasks' remaining output with it (docs/slurm.md).
//
// Thread-safety: the functions share no state; RunCommand forks (call it from one thread, not
// from a signal handler).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "preempt/status.h"

namespace preempt {

// Reads one environment variable; nullptr when unset. Tests pass a map instead of getenv.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup ProcessEnv();

struct SlurmTask {
  bool in_slurm = false;       // SLURM_JOB_ID is set
  std::string job_id;          // SLURM_JOB_ID
  int rank = 0;                // SLURM_PROCID (0 in a batch script)
  int world_size = 1;          // SLURM_NTASKS, else SLURM_NPROCS, else 1
  int local_rank = 0;          // SLURM_LOCALID
  int node_rank = 0;           // SLURM_NODEID
  int restart_count = 0;       // SLURM_RESTART_COUNT (unset before the first requeue)
  std::string partition;       // SLURM_JOB_PARTITION
};

// kInvalidArgument naming the variable when a value is not a non-negative integer or
// SLURM_PROCID >= SLURM_NTASKS. Outside SLURM (no SLURM_JOB_ID): in_slurm = false, OK.
Status ReadSlurmTask(const EnvLookup& env, SlurmTask* out);

struct SlurmRequeueOptions {
  std::vector<int> signals;          // stop signals after which the job requeues itself
  std::string scontrol = "scontrol"; // the command (a path, or a name looked up in PATH)
  // After SIGTERM, requeue when SLURM is preempting the job (its PreemptTime is set): SLURM
  // requeues a preempted job only if it is still running when GraceTime ends.
  bool requeue_preempted = true;     // env PREEMPT_SLURM_REQUEUE_PREEMPTED (0/1)
  double timeout_s = 20;             // `scontrol requeue` is killed past this
};
// From PREEMPT_SLURM_REQUEUE_ON ("USR1" default, "TERM,USR1", "none") and PREEMPT_SCONTROL.
Status ReadSlurmRequeueOptions(const EnvLookup& env, SlurmRequeueOptions* out);

enum class SelfRequeue {
  kNotSlurm,        // no SLURM_JOB_ID
  kNotRankZero,     // another rank does it
  kOtherSignal,     // the stop signal is not a requeue signal (e.g. SIGTERM on preemption)
  kNotCommitted,    // no durable stop checkpoint: requeueing would repeat the lost work silently
  kRequeued,        // `scontrol requeue` succeeded
  kFailed,          // it failed; see the returned status
};
const char* SelfRequeueName(SelfRequeue r);

// What to do after a stop; runs `scontrol requeue <job_id>` when all conditions hold.
SelfRequeue RequeueAfterStop(const SlurmTask& task, const SlurmRequeueOptions& opt, int stop_signal,
                             bool committed, Status* error);
// The same with the process environment, at most once per process; logs the outcome. Called by
// Runtime::exit_code() on rank 0.
void RequeueAfterStopFromEnv(int stop_signal, bool committed);

// Runs argv (execvp, stdin /dev/null), collects stdout (and stderr into `err` when non-null),
// kills it past `timeout_s`. kIoError on a non-zero exit naming the command and its stderr,
// kDeadlineExceeded on the timeout.
Status RunCommand(const std::vector<std::string>& argv, double timeout_s, std::string* out,
                  std::string* err = nullptr);

}  // namespace preempt
