// The runtime under a real (private, single-node, 4-GPU) SLURM cluster: the example trainer in
// the low partition is preempted by a high-partition job (PreemptMode=REQUEUE, GraceTime), gets its
// stop signal when the grace starts (`--signal=B:TERM@20`, preempt_send_user_signal), commits
// inside the grace, is requeued and resumes; the same for the Python trainer
// (examples/python/train.py through examples/slurm/train-python.sbatch); a job stopped by
// `--signal=B:USR1@N` before its time limit requeues itself; an `srun -n 2` job takes rank and
// world size from SLURM and handles a SIGTERM to one task and to all tasks. Every run's per-step
// losses and final weights must equal an uninterrupted run's, bit for bit.
//
// The wall-time job runs in the `advised` partition (SLURM never preempts it) without GPUs from the
// start of the program, alongside the other tests, and is checked by the last test: its minutes of
// waiting for SLURM's signal overlap them. The C++ and Python preemption cases share one high job.
//
// Started by run_with_cluster.sh, which brings the cluster up and always takes it down.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "slurm/slurm_util.h"
#include "support/test_util.h"

namespace preempt::testing::slurm {
namespace {

// The low partition's GraceTime (cluster.sh's default GRACE_S).
constexpr int kGraceS = 20;

std::string Trainer() { return BinaryDir() + "/tests/runtime/preempt_trainer_worker"; }
std::string SourceDir() { return std::string(PREEMPT_SOURCE_DIR); }

std::string ReadIfExists(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool Finished(const std::string& state) {
  return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" || state == "TIMEOUT" ||
         state == "NODE_FAIL";
}
// Waits until the job has finished (COMPLETED / FAILED / ...); false on timeout.
bool wait_done(const std::string& id, double timeout_s) {
  return WaitFor(timeout_s, [&] { return Finished(JobState(id)); });
}
// Waits until a requeued job is pending. SLURM holds it back for the credential lifetime
// (cred_expire=10 on the test cluster); starting it earlier (StartTime=now) makes slurmd refuse
// it ("Job credential revoked") and the job fails.
void release_when_pending(const std::string& id) {
  WaitFor(60, [&] { return JobState(id) == "PENDING"; });
}

double NowUnix() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// scontrol's PreemptTime (local time, whole seconds: when the preemption's GraceTime started) as
// Unix seconds; -1 when the job has none.
double PreemptTimeUnix(const std::string& info) {
  std::string v = JobField(info, "PreemptTime");
  std::tm tm{};
  if (v.empty() || !strptime(v.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return -1;
  tm.tm_isdst = -1;
  return static_cast<double>(std::mktime(&tm));
}

// When a preempted job's grace started and when the test saw it requeued, Unix seconds.
struct Preemption {
  double grace_at = -1;
  double requeued_at = -1;
};
// Polls the jobs until each was requeued. PreemptTime shows only until the requeue; a job requeued
// before a poll saw it gets the last poll that saw it unrequeued (the grace started no earlier).
std::map<std::string, Preemption> WatchPreemption(const std::vector<std::string>& ids, double timeout_s) {
  std::map<std::string, Preemption> seen;
  std::map<std::string, double> unrequeued_at;
  WaitFor(timeout_s, [&] {
    bool all = true;
    for (const std::string& id : ids) {
      Preemption& p = seen[id];
      if (p.requeued_at >= 0) continue;
      const double now = NowUnix();
      const std::string info = JobInfo(id);
      if (std::atoi(JobField(info, "Restarts").c_str()) >= 1) {
        p.requeued_at = now;
        if (p.grace_at < 0) p.grace_at = unrequeued_at.count(id) ? unrequeued_at[id] : now;
        continue;
      }
      unrequeued_at[id] = now;
      if (p.grace_at < 0) p.grace_at = PreemptTimeUnix(info);
      all = false;
    }
    return all;
  });
  return seen;
}

// An uninterrupted run of `world` ranks of the example trainer in dir/ref; returns rank 0's stdout.
std::string reference(const TempDir& dir, const std::string& args, int world, const std::string& loss_log) {
  std::string rdzv = dir / "ref.rdzv", cmd;
  for (int r = 0; r < world; ++r)
    cmd += Trainer() + " --dir " + (dir / "ref") + " " + args + " --rank " + std::to_string(r) + " --world " +
           std::to_string(world) + " --rendezvous " + rdzv + " --loss-log " + loss_log + " > " +
           (dir / ("ref.out" + std::to_string(r))) + " 2>&1 & ";
  int rc = 0;
  Sh(cmd + "wait", &rc);
  return ReadFileOrDie(dir / "ref.out0");
}

void ExpectSameAsReference(const std::string& out, const std::string& ref_out, const std::string& loss,
                           const std::string& ref_loss) {
  auto finals = LinesStartingWith(out, "rank 0 final ");
  auto ref_finals = LinesStartingWith(ref_out, "rank 0 final ");
  ASSERT_EQ(finals.size(), 1u) << out;
  ASSERT_EQ(ref_finals.size(), 1u) << ref_out;
  EXPECT_EQ(finals[0], ref_finals[0]);
  // Every step's loss once, in order, bit-identical (a repeated step would show up twice).
  EXPECT_EQ(ReadFileOrDie(loss), ReadFileOrDie(ref_loss));
}

// The wall-time job: --time=2 --signal=B:USR1@90 in `advised`, no GPU, submitted before the first test.
const char kWallTimeArgs[] = "--steps 900 --every 300";
struct WallTimeJob {
  std::unique_ptr<TempDir> dir;
  std::string id;
};
WallTimeJob& WallTime() {
  static WallTimeJob job;
  return job;
}

class WallTimeEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!ClusterUp()) return;
    WallTimeJob& w = WallTime();
    w.dir = std::make_unique<TempDir>("preempt-slurm-walltime");
    const TempDir& d = *w.dir;
    WriteScript(d / "walltime.sh",
                "#!/bin/bash\nexport PREEMPT_STOP_SIGNALS=TERM,USR1 PREEMPT_GRACE_S=40\n"
                // SLURM may deliver --signal right as a requeued run starts; ignored until the
                // runtime installs its handler (it replaces SIG_IGN).
                "trap '' USR1\nexec " + Trainer() + " --dir " + (d / "ckpt") + " " + kWallTimeArgs +
                    " --sleep-ms 50 --loss-log " + (d / "loss") + "\n");
    w.id = Sbatch("-p advised --time=2 --signal=B:USR1@90 --open-mode=append -o " + (d / "walltime.out"),
                  d / "walltime.sh");
  }
  void TearDown() override { WallTime().dir.reset(); }
};
const auto* const kWallTimeEnvironment = ::testing::AddGlobalTestEnvironment(new WallTimeEnvironment);

class SlurmE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ClusterUp()) GTEST_SKIP() << "no SLURM cluster (run through tests/slurm/run_with_cluster.sh)";
  }
  // Only this test's jobs: the wall-time job runs on across tests.
  void TearDown() override {
    for (const auto& id : jobs_) Sh("scancel " + id + " >/dev/null 2>&1");
  }
  std::string submit(const std::string& args, const std::string& script) {
    std::string id = Sbatch(args, script);
    if (!id.empty()) jobs_.push_back(id);
    return id;
  }

  TempDir dir_{"preempt-slurm-e2e"};
  std::vector<std::string> jobs_;
};

// Preemption: PreemptMode=REQUEUE with GraceTime=20 on the low partition. The C++ example trainer
// and the Python trainer (examples/python/train.py through examples/slurm/train-python.sbatch,
// whose shell passes SIGTERM on and requeues the job) run side by side in `low`, two GPUs each,
// submitted with --signal=B:TERM@20; one high job needs all four GPUs, so SLURM preempts both.
// With preempt_send_user_signal each gets SIGTERM when the grace starts, commits and is requeued
// well before the grace ends (without it SLURM would signal and requeue them only at its end), and
// resumes; every step's loss and the final weights equal an uninterrupted run's (computed
// meanwhile). The runs are long enough for SLURM, which sometimes takes ~20 s to act on a
// preemption, on a machine busy with other tests (the Python job once finished its 600 steps, and
// the C++ job was 32 s into its 45 s, when SLURM acted: both now run about twice as long).
TEST_F(SlurmE2E, PreemptedLowJobsStopWhenGraceTimeStartsAndResumeBitwise) {
  // The Python job first: it takes longest to start (importing torch); the C++ job starts once it
  // trains, so that both still have ~60 s or more to go when the high job arrives.
  int rc = 0;
  std::string why = Sh("cd / && /usr/bin/python3 -c 'import torch, preempt' 2>&1", &rc);
  const bool python = rc == 0;
  const std::string train = SourceDir() + "/examples/python/train.py", py_args = " --steps 1200 --every 300";
  std::future<std::string> py_ref;
  std::string py;
  if (python) {
    py_ref = std::async(std::launch::async, [&] {
      return Sh("/usr/bin/python3 " + train + " --dir " + (dir_ / "py-ref") + py_args + " --sleep-ms 0 2>&1");
    });
    // sbatch exports its environment to the batch script (and keeps it for the requeued runs).
    setenv("CKPT_DIR", (dir_ / "py-ckpt").c_str(), 1);
    setenv("TRAIN_PY", train.c_str(), 1);
    setenv("PREEMPT_HINTS_FILE", (dir_ / "py-hints.json").c_str(), 1);
    py = submit("-p low --gres=gpu:2 --signal=B:TERM@" + std::to_string(kGraceS) + " -o " + (dir_ / "py.out") + " " +
                    SourceDir() + "/examples/slurm/train-python.sbatch" + py_args + " --sleep-ms 50",
                "");
    for (const char* v : {"CKPT_DIR", "TRAIN_PY", "PREEMPT_HINTS_FILE"}) unsetenv(v);
    ASSERT_FALSE(py.empty());
    ASSERT_TRUE(WaitFor(90, [&] { return ReadIfExists(dir_ / "py.out").find("\nstep 30 ") != std::string::npos; }))
        << "the Python job did not train: " << JobState(py) << "\n" << ReadIfExists(dir_ / "py.out");
  }

  const std::string args = "--steps 3000 --every 600";
  auto cpp_ref = std::async(std::launch::async, [&] { return reference(dir_, args, 1, dir_ / "ref.loss"); });
  WriteScript(dir_ / "low.sh", "#!/bin/bash\nexport PREEMPT_GRACE_S=" + std::to_string(kGraceS) + "\nexec " +
                                   Trainer() + " --dir " + (dir_ / "ckpt") + " " + args + " --sleep-ms 30 --loss-log " +
                                   (dir_ / "loss") + " --hints " + (dir_ / "hints.json") + "\n");
  std::string low = submit(
      "-p low --gres=gpu:2 --signal=B:TERM@" + std::to_string(kGraceS) + " --open-mode=append -o " + (dir_ / "low.out"),
      dir_ / "low.sh");
  ASSERT_FALSE(low.empty());
  ASSERT_TRUE(WaitFor(60, [&] { return ReadInt(dir_ / "ckpt/.rank0.progress") >= 120; }))
      << "low job did not train: " << JobState(low);
  const double high_submitted_at = NowUnix();
  std::string high = submit("-p high --gres=gpu:4 -o /dev/null --wrap 'sleep 1'", "");
  ASSERT_FALSE(high.empty());
  std::vector<std::string> low_jobs{low};
  if (!py.empty()) low_jobs.push_back(py);
  // SLURM sometimes takes ~20 s to start the grace; then signal, commit and requeue take a few
  // seconds. Requeued at its end (no early signal), a job would show >= kGraceS here.
  auto preempted = WatchPreemption(low_jobs, 60 + kGraceS);
  for (const std::string& id : low_jobs) {
    const Preemption& p = preempted[id];
    ASSERT_GE(p.requeued_at, 0) << "not requeued: " << id << " " << JobState(id);
    std::printf("job %s: grace started %.1f s after the high job was submitted, requeued %.1f s into it\n", id.c_str(),
                p.grace_at - high_submitted_at, p.requeued_at - p.grace_at);
    EXPECT_LT(p.requeued_at - p.grace_at, kGraceS - 5)
        << "job " << id << " must get SIGTERM when GraceTime starts and requeue itself long before it ends";
  }
  for (const std::string& id : {low, py}) {
    if (id.empty()) continue;
    release_when_pending(id);
    ASSERT_TRUE(wait_done(id, 150)) << JobState(id);
    EXPECT_EQ(JobState(id), "COMPLETED") << id;
  }
  EXPECT_EQ(JobState(high), "COMPLETED");

  std::string out = ReadFileOrDie(dir_ / "low.out");
  auto stops = LinesStartingWith(out, "rank 0 stopped at step ");
  ASSERT_EQ(stops.size(), 1u) << out;
  EXPECT_NE(stops[0].find("committed=1"), std::string::npos) << stops[0];
  double to_commit_s = std::atof(stops[0].substr(stops[0].find("signal_to_commit_s=") + 19).c_str());
  EXPECT_LT(to_commit_s, kGraceS) << "the stop checkpoint must commit inside GraceTime";
  EXPECT_NE(out.find("rank 0 exit 143"), std::string::npos) << out;
  auto starts = LinesStartingWith(out, "rank 0 start step ");
  ASSERT_EQ(starts.size(), 2u) << out;
  EXPECT_EQ(starts[0], "rank 0 start step 0");
  EXPECT_NE(starts[1], "rank 0 start step 0") << "the second run must resume from the stop commit";
  ExpectSameAsReference(out, cpp_ref.get(), dir_ / "loss", dir_ / "ref.loss");

  if (!python) GTEST_SKIP() << "the Python package is not installed (scripts/install-python.sh): " << why;
  std::string py_out = ReadFileOrDie(dir_ / "py.out"), ref = py_ref.get();
  auto py_stops = LinesStartingWith(py_out, "preempted after step ");
  ASSERT_EQ(py_stops.size(), 1u) << py_out;
  EXPECT_NE(py_stops[0].find("committed: True"), std::string::npos) << py_stops[0];
  auto py_starts = LinesStartingWith(py_out, "start at step ");
  ASSERT_EQ(py_starts.size(), 2u) << py_out;
  EXPECT_EQ(py_starts[0], "start at step 0");
  EXPECT_NE(py_starts[1], "start at step 0") << "the second run must resume from the stop commit";
  auto finals = LinesStartingWith(py_out, "final "), ref_finals = LinesStartingWith(ref, "final ");
  ASSERT_EQ(ref_finals.size(), 1u) << ref;
  ASSERT_EQ(finals.size(), 1u) << py_out;
  EXPECT_EQ(finals[0], ref_finals[0]) << "final weights differ from the uninterrupted run";
  EXPECT_EQ(LinesStartingWith(py_out, "step "), LinesStartingWith(ref, "step "));
}

// `srun -n 2`: ranks from SLURM_PROCID/SLURM_NTASKS, gloo over loopback. First a SIGTERM to task 1
// only (both ranks stop at the same step and commit; the operator requeues), then a preemption
// that signals both tasks; the third run finishes. On the preemption rank 0 requeues the job once
// the stop checkpoint committed; SLURM then sends SIGTERM to the batch step too. The batch shell
// traps it (as examples/slurm/train-srun.sbatch does): without the trap it dies, slurmstepd kills
// srun with it, and what the tasks print after that (rank 0's own stop line) never reaches the log.
TEST_F(SlurmE2E, SrunTasksTakeRankFromSlurmAndStopTogetherOnOneOrAllSignals) {
  const std::string args = "--steps 300 --every 100";
  std::string ref_out = reference(dir_, args, 2, dir_ / "ref.loss");
  WriteScript(dir_ / "srun.sh",
              "#!/bin/bash\nexport PREEMPT_GRACE_S=20\ntrap 'true' TERM\nsrun --kill-on-bad-exit=0 bash -c 'exec " +
                  Trainer() + " --dir " + (dir_ / "ckpt") + " " + args + " --sleep-ms 40 --loss-log " +
                  (dir_ / "loss") + " --rank $SLURM_PROCID --world $SLURM_NTASKS --rendezvous " + (dir_ / "rdzv") +
                  ".$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}'\n");
  std::string id = submit("-p low -n 2 --gres=gpu:2 --open-mode=append -o " + (dir_ / "srun.out"), dir_ / "srun.sh");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor(60, [&] { return ReadInt(dir_ / "ckpt/.rank1.progress") >= 60; })) << JobState(id);
  // One task only: the rank-1 trainer of this job.
  int rc = 0;
  Sh("kill -TERM $(pgrep -f -- '--rank [1] --world 2 --rendezvous " + (dir_ / "rdzv") + "')", &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(WaitFor(60, [&] { return LinesStartingWith(ReadFileOrDie(dir_ / "srun.out"), "rank 1 exit ").size() == 1; }));
  std::string out = ReadFileOrDie(dir_ / "srun.out");
  auto stop0 = LinesStartingWith(out, "rank 0 stopped at step "), stop1 = LinesStartingWith(out, "rank 1 stopped at step ");
  ASSERT_EQ(stop0.size(), 1u) << out;
  ASSERT_EQ(stop1.size(), 1u) << out;
  EXPECT_EQ(stop0[0].substr(0, stop0[0].find(" committed")).substr(7), stop1[0].substr(0, stop1[0].find(" committed")).substr(7));
  EXPECT_NE(stop0[0].find("committed=1"), std::string::npos) << stop0[0];
  // The operator requeues; the next run is preempted by a high job (SIGTERM to both tasks).
  WaitFor(30, [&] { std::string s = JobState(id); return s != "RUNNING" && s != "COMPLETING"; });
  Sh("scontrol requeue " + id + " 2>&1");
  release_when_pending(id);
  ASSERT_TRUE(WaitFor(60, [&] { return LinesStartingWith(ReadFileOrDie(dir_ / "srun.out"), "rank 1 start step ").size() == 2; }));
  SleepS(2);
  std::string high = submit("-p high --gres=gpu:4 -o /dev/null --wrap 'sleep 1'", "");
  ASSERT_TRUE(WaitFor(60, [&] { return JobRestarts(id) >= 2; })) << JobState(id);
  release_when_pending(id);
  ASSERT_TRUE(wait_done(id, 120)) << JobState(id);
  EXPECT_EQ(JobState(id), "COMPLETED");
  out = ReadFileOrDie(dir_ / "srun.out");
  // Both ranks' lines of the preempted run reach the log: each stopped, committed and exited 143.
  for (const char* rank : {"rank 0 ", "rank 1 "}) {
    auto stops = LinesStartingWith(out, std::string(rank) + "stopped at step ");
    ASSERT_EQ(stops.size(), 2u) << out;
    EXPECT_NE(stops[1].find("committed=1"), std::string::npos) << stops[1];
    EXPECT_EQ(LinesStartingWith(out, std::string(rank) + "exit 143").size(), 2u) << out;
  }
  EXPECT_EQ(LinesStartingWith(out, "rank 1 start step ").size(), 3u) << out;
  ExpectSameAsReference(out, ref_out, dir_ / "loss", dir_ / "ref.loss");
}

// Wall-time limit: --signal=B:USR1@90 with a two-minute limit; the runtime stops on SIGUSR1,
// commits and runs `scontrol requeue` itself; the next run resumes. The signal comes about 30 s
// into a run (SLURM checks signal times periodically), after the trainer installed its handlers
// even on a loaded machine; a run may be stopped more than once. The job was submitted before the
// first test (WallTimeEnvironment).
TEST_F(SlurmE2E, WallTimeSignalCheckpointsAndRequeuesTheJobItself) {
  const WallTimeJob& w = WallTime();
  ASSERT_TRUE(w.dir && !w.id.empty());
  const TempDir& d = *w.dir;
  const std::string id = w.id;
  jobs_.push_back(id);
  std::string ref_out = reference(dir_, kWallTimeArgs, 1, dir_ / "ref.loss");
  ASSERT_TRUE(WaitFor(150, [&] { return JobRestarts(id) >= 1 || JobState(id) == "COMPLETED"; }))
      << "no self-requeue: " << JobState(id);
  for (int i = 0; i < 3 && JobState(id) != "COMPLETED"; ++i) {
    release_when_pending(id);
    WaitFor(30, [&] { return JobState(id) != "PENDING"; });
    WaitFor(75, [&] { return JobState(id) == "COMPLETED" || JobState(id) == "PENDING"; });
  }
  ASSERT_TRUE(wait_done(id, 30)) << JobState(id);
  EXPECT_EQ(JobState(id), "COMPLETED");
  EXPECT_GE(JobRestarts(id), 1) << "the job must have requeued itself at least once";
  std::string out = ReadFileOrDie(d / "walltime.out");
  auto stops = LinesStartingWith(out, "rank 0 stopped at step ");
  ASSERT_GE(stops.size(), 1u) << out;
  for (const auto& s : stops) EXPECT_NE(s.find("committed=1"), std::string::npos) << s;
  EXPECT_EQ(out.find("TIME LIMIT"), std::string::npos) << "the job must leave before its limit:\n" << out;
  EXPECT_EQ(LinesStartingWith(out, "rank 0 start step ").size(), stops.size() + 1) << out;
  ExpectSameAsReference(out, ref_out, d / "loss", dir_ / "ref.loss");
}

}  // namespace
}  // namespace preempt::testing::slurm
