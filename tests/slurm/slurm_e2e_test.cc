// The runtime under a real (private, single-node) SLURM cluster: the example trainer in the low
// partition is preempted by a high-partition job (PreemptMode=REQUEUE, GraceTime), commits inside
// the grace, is requeued by SLURM and resumes; a job stopped by `--signal=B:USR1@N` before its
// time limit requeues itself; an `srun -n 2` job takes rank and world size from SLURM and handles
// a SIGTERM to one task and to all tasks. Every run's per-step losses (hex) and final parameter
// sum must equal an uninterrupted run's, bit for bit.
//
// Started by run_with_cluster.sh, which brings the cluster up and always takes it down.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "slurm/slurm_util.h"
#include "support/test_util.h"

namespace preempt::testing::slurm {
namespace {

std::string Trainer() { return BinaryDir() + "/tests/runtime/preempt_trainer_worker"; }

class SlurmE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ClusterUp()) GTEST_SKIP() << "no SLURM cluster (run through tests/slurm/run_with_cluster.sh)";
  }
  void TearDown() override { Sh("scancel --user=root >/dev/null 2>&1"); }

  // An uninterrupted run of `world` ranks; returns rank 0's stdout. Losses go to `loss_log`.
  std::string reference(const std::string& args, int world, const std::string& loss_log) {
    std::string rdzv = dir_ / "ref.rdzv", cmd;
    for (int r = 0; r < world; ++r)
      cmd += Trainer() + " --dir " + (dir_ / "ref") + " " + args + " --rank " + std::to_string(r) + " --world " +
             std::to_string(world) + " --rendezvous " + rdzv + " --loss-log " + loss_log + " > " +
             (dir_ / ("ref.out" + std::to_string(r))) + " 2>&1 & ";
    int rc = 0;
    Sh(cmd + "wait", &rc);
    return ReadFileOrDie(dir_ / "ref.out0");
  }

  // Waits until the job has finished (COMPLETED / FAILED / ...); false on timeout.
  bool wait_done(const std::string& id, double timeout_s) {
    return WaitFor(timeout_s, [&] {
      std::string s = JobState(id);
      return s == "COMPLETED" || s == "FAILED" || s == "CANCELLED" || s == "TIMEOUT" || s == "NODE_FAIL";
    });
  }

  // Waits until a requeued job is pending. SLURM holds it back for the credential lifetime
  // (cred_expire=10 on the test cluster); starting it earlier (StartTime=now) makes slurmd refuse
  // it ("Job credential revoked") and the job fails.
  void release_when_pending(const std::string& id) {
    WaitFor(60, [&] { return JobState(id) == "PENDING"; });
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

  TempDir dir_{"preempt-slurm-e2e"};
};

// Preemption: PreemptMode=REQUEUE with GraceTime=20 on the low partition.
TEST_F(SlurmE2E, PreemptedLowJobCommitsInsideGraceTimeIsRequeuedAndResumesBitwise) {
  const std::string args = "--steps 1500 --every 300";
  std::string ref_out = reference(args, 1, dir_ / "ref.loss");
  WriteScript(dir_ / "low.sh", "#!/bin/bash\nexport PREEMPT_GRACE_S=20\nexec " + Trainer() + " --dir " +
                                   (dir_ / "ckpt") + " " + args + " --sleep-ms 30 --loss-log " + (dir_ / "loss") +
                                   " --hints " + (dir_ / "hints.json") + "\n");
  std::string low = Sbatch("-p low --gres=gpu:4 --open-mode=append -o " + (dir_ / "low.out"), dir_ / "low.sh");
  ASSERT_FALSE(low.empty());
  ASSERT_TRUE(WaitFor(60, [&] { return ReadInt(dir_ / "ckpt/.rank0.progress") >= 120; }))
      << "low job did not train: " << JobState(low);
  std::string high = Sbatch("-p high --gres=gpu:1 -o /dev/null --wrap 'sleep 1'", "");
  ASSERT_FALSE(high.empty());
  ASSERT_TRUE(WaitFor(60, [&] { return JobRestarts(low) >= 1; })) << "not requeued: " << JobState(low);
  release_when_pending(low);
  ASSERT_TRUE(wait_done(low, 120)) << JobState(low);
  EXPECT_EQ(JobState(low), "COMPLETED");
  EXPECT_EQ(JobState(high), "COMPLETED");

  std::string out = ReadFileOrDie(dir_ / "low.out");
  auto stops = LinesStartingWith(out, "rank 0 stopped at step ");
  ASSERT_EQ(stops.size(), 1u) << out;
  EXPECT_NE(stops[0].find("committed=1"), std::string::npos) << stops[0];
  double to_commit_s = std::atof(stops[0].substr(stops[0].find("signal_to_commit_s=") + 19).c_str());
  EXPECT_LT(to_commit_s, 20.0) << "the stop checkpoint must commit inside GraceTime";
  EXPECT_NE(out.find("rank 0 exit 143"), std::string::npos) << out;
  auto starts = LinesStartingWith(out, "rank 0 start step ");
  ASSERT_EQ(starts.size(), 2u) << out;
  EXPECT_EQ(starts[0], "rank 0 start step 0");
  EXPECT_NE(starts[1], "rank 0 start step 0") << "the second run must resume from the stop commit";
  ExpectSameAsReference(out, ref_out, dir_ / "loss", dir_ / "ref.loss");
}

// Wall-time limit: --signal=B:USR1@90 with a two-minute limit; the runtime stops on SIGUSR1,
// commits and runs `scontrol requeue` itself; the next run resumes. The signal comes about 30 s
// into a run (SLURM checks signal times periodically), after the trainer installed its handlers
// even on a loaded machine; a run may be stopped more than once.
TEST_F(SlurmE2E, WallTimeSignalCheckpointsAndRequeuesTheJobItself) {
  const std::string args = "--steps 900 --every 300";
  std::string ref_out = reference(args, 1, dir_ / "ref.loss");
  WriteScript(dir_ / "walltime.sh",
              "#!/bin/bash\nexport PREEMPT_STOP_SIGNALS=TERM,USR1 PREEMPT_GRACE_S=40\n"
                  // SLURM may deliver --signal right as a requeued run starts; ignored until the
                  // runtime installs its handler (it replaces SIG_IGN).
                  "trap '' USR1\nexec " + Trainer() +
                  " --dir " + (dir_ / "ckpt") + " " + args + " --sleep-ms 50 --loss-log " + (dir_ / "loss") + "\n");
  std::string id = Sbatch("-p low --gres=gpu:1 --time=2 --signal=B:USR1@90 --open-mode=append -o " +
                              (dir_ / "walltime.out"),
                          dir_ / "walltime.sh");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor(150, [&] { return JobRestarts(id) >= 1; })) << "no self-requeue: " << JobState(id);
  for (int i = 0; i < 3 && JobState(id) != "COMPLETED"; ++i) {
    release_when_pending(id);
    WaitFor(30, [&] { return JobState(id) != "PENDING"; });
    WaitFor(75, [&] { return JobState(id) == "COMPLETED" || JobState(id) == "PENDING"; });
  }
  ASSERT_TRUE(wait_done(id, 30)) << JobState(id);
  EXPECT_EQ(JobState(id), "COMPLETED");
  std::string out = ReadFileOrDie(dir_ / "walltime.out");
  auto stops = LinesStartingWith(out, "rank 0 stopped at step ");
  ASSERT_GE(stops.size(), 1u) << out;
  for (const auto& s : stops) EXPECT_NE(s.find("committed=1"), std::string::npos) << s;
  EXPECT_EQ(out.find("TIME LIMIT"), std::string::npos) << "the job must leave before its limit:\n" << out;
  EXPECT_EQ(LinesStartingWith(out, "rank 0 start step ").size(), stops.size() + 1) << out;
  ExpectSameAsReference(out, ref_out, dir_ / "loss", dir_ / "ref.loss");
}

// `srun -n 2`: ranks from SLURM_PROCID/SLURM_NTASKS, gloo over loopback. First a SIGTERM to task 1
// only (both ranks stop at the same step and commit; the operator requeues), then a preemption
// that signals both tasks; the third run finishes.
TEST_F(SlurmE2E, SrunTasksTakeRankFromSlurmAndStopTogetherOnOneOrAllSignals) {
  const std::string args = "--steps 300 --every 100";
  std::string ref_out = reference(args, 2, dir_ / "ref.loss");
  WriteScript(dir_ / "srun.sh",
              "#!/bin/bash\nexport PREEMPT_GRACE_S=20\nsrun --kill-on-bad-exit=0 bash -c 'exec " + Trainer() +
                  " --dir " + (dir_ / "ckpt") + " " + args + " --sleep-ms 40 --loss-log " + (dir_ / "loss") +
                  " --rank $SLURM_PROCID --world $SLURM_NTASKS --rendezvous " + (dir_ / "rdzv") +
                  ".$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}'\n");
  std::string id = Sbatch("-p low -n 2 --gres=gpu:2 --open-mode=append -o " + (dir_ / "srun.out"), dir_ / "srun.sh");
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
  std::string high = Sbatch("-p high --gres=gpu:4 -o /dev/null --wrap 'sleep 1'", "");
  ASSERT_TRUE(WaitFor(60, [&] { return JobRestarts(id) >= 2; })) << JobState(id);
  release_when_pending(id);
  ASSERT_TRUE(wait_done(id, 120)) << JobState(id);
  EXPECT_EQ(JobState(id), "COMPLETED");
  out = ReadFileOrDie(dir_ / "srun.out");
  EXPECT_EQ(LinesStartingWith(out, "rank 0 stopped at step ").size(), 2u) << out;
  EXPECT_EQ(LinesStartingWith(out, "rank 1 start step ").size(), 3u) << out;
  ExpectSameAsReference(out, ref_out, dir_ / "loss", dir_ / "ref.loss");
}

}  // namespace
}  // namespace preempt::testing::slurm
