// preempt/sched/runner.h — `preempt-sched run`: the embedded single-machine scheduler.
//
// Launches jobs as child processes on N virtual GPU slots (CUDA_VISIBLE_DEVICES is set to the
// slots a job holds), reads each job's hints file, calls Decide() every tick, and executes the
// decisions for real: checkpoint requests through the request file, SIGTERM, SIGKILL after the
// job's grace period, and requeue + relaunch of preempted jobs (the job resumes from its own
// checkpoint; the launcher only restarts the same command).
//
// Environment given to each job: PREEMPT_JOB_ID, PREEMPT_HINTS_FILE, PREEMPT_REQUEST_FILE,
// PREEMPT_GRACE_S, CUDA_VISIBLE_DEVICES. Exit status: 0 = finished; anything else after a SIGTERM
// from the launcher = preempted (requeued); anything else otherwise = failed (not restarted).
//
// Thread-safety: RunJobs() blocks the calling thread; it installs no signal handlers, and reaps
// only the children it started (waitpid on their pids).
#pragma once

#include <string>
#include <vector>

#include "preempt/sched/policy.h"
#include "preempt/status.h"

namespace preempt::sched {

struct RunJobSpec {
  std::string id;
  PriorityClass cls = PriorityClass::kLow;
  std::string queue = "default";
  int gpus = 1;
  double submit_after_s = 0;       // arrival, seconds after the launcher starts
  // ... and not before every one of these files exists (a dependency on another job's output;
  // relative paths are under RunOptions::work_dir, where "<id>.hints.json" is job <id>'s hints,
  // removed at launch, so "after b.hints.json" = once b has published its first hints)
  std::vector<std::string> after_files;
  std::vector<std::string> argv;   // the command
  double grace_s = 30;             // SIGTERM → SIGKILL
};

struct RunOptions {
  int slots = 1;                   // virtual GPU slots on this machine (one node)
  PolicyOptions policy;
  double tick_s = 0.02;
  std::string work_dir;            // hints and request files go here (<id>.hints.json)
  double timeout_s = 3600;         // everything is killed past this; returns kDeadlineExceeded
  std::string event_log;           // optional: one line per event appended here
};

struct RunEvent {
  double t = 0;                    // seconds since the launcher started
  std::string kind;                // arrive start request ack evict kill exit preempted done failed
  std::string job;
  std::string detail;              // the decision's reason, the exit status, ...
};

// Runs until every job has finished or failed (or the timeout). Events in time order.
Status RunJobs(const std::vector<RunJobSpec>& jobs, const RunOptions& opt, std::vector<RunEvent>* events);

// A run spec file (JSON):
//   {"slots": 2, "work_dir": "/tmp/x", "policy": {"min_runtime_s": 0, ...},
//    "jobs": [{"id":"a","class":"low","queue":"q","gpus":1,"submit_after_s":0,"grace_s":10,
//              "command":["./trainer","--steps","100"]},
//             {"id":"h","class":"high","after_files":["a.hints.json"],"command":["./trainer"]}]}
// Policy keys: the PolicyOptions field names (numbers/booleans) and "kind" (fcfs|k8s|hint).
Status LoadRunSpec(const std::string& path, std::vector<RunJobSpec>* jobs, RunOptions* opt);
// The same from text; `origin` names it in errors.
Status ParseRunSpec(const std::string& text, const std::string& origin, std::vector<RunJobSpec>* jobs,
                    RunOptions* opt);

}  // namespace preempt::sched
