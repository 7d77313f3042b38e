// Helpers for tests that drive the private SLURM cluster started by run_with_cluster.sh.
#pragma once

#include <string>
#include <vector>

namespace preempt::testing::slurm {

// Runs `cmd` with /bin/sh; returns stdout; `rc` (optional) gets the exit status.
std::string Sh(const std::string& cmd, int* rc = nullptr);
// True when SLURM_CONF names a running cluster (the wrapper started one).
bool ClusterUp();
// sbatch --parsable <args> <script>; the job id ("" on failure, with the error in the test log).
std::string Sbatch(const std::string& args, const std::string& script);
// Job state as squeue prints it (PENDING, RUNNING, COMPLETED, ...; "" when unknown).
std::string JobState(const std::string& id);
// `scontrol show job` of the job ("" when unknown).
std::string JobInfo(const std::string& id);
// The value of `key` (e.g. "Restarts") in `scontrol show job` text; "" when absent.
std::string JobField(const std::string& info, const std::string& key);
// How often the job was requeued (scontrol's Restarts=); -1 when unknown.
int JobRestarts(const std::string& id);
// Polls `pred` every 200 ms until it is true or `timeout_s` passed; returns the last value.
template <class Pred>
bool WaitFor(double timeout_s, Pred pred);
// Writes an executable batch script.
void WriteScript(const std::string& path, const std::string& body);
// Lines of `text` that start with `prefix`.
std::vector<std::string> LinesStartingWith(const std::string& text, const std::string& prefix);
// Last integer of the file (e.g. a progress file holding a step); -1 when missing.
long long ReadInt(const std::string& path);

void SleepS(double s);
template <class Pred>
bool WaitFor(double timeout_s, Pred pred) {
  for (double t = 0; t < timeout_s; t += 0.2) {
    if (pred()) return true;
    SleepS(0.2);
  }
  return pred();
}

}  // namespace preempt::testing::slurm
