// The scheduler backend on a private SLURM cluster: two low jobs in the `advised` partition (only
// the backend preempts it), one committing often (little uncommitted work), one never after its
// start (much); a high job needs the GPUs of one of them. `preempt-slurm-sched watch` must ask the
// cheaper one to checkpoint, requeue it (killed at once: its commit is durable; held until the
// high job runs) only after its commit is acknowledged, and leave the other alone; the high job
// then runs and the victim resumes from the requested commit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "slurm/slurm_util.h"
#include "support/test_util.h"

namespace preempt::testing::slurm {
namespace {

TEST(SlurmBackend, HighJobTakesTheVictimThatLosesLessAfterItsCheckpointCommits) {
  if (!ClusterUp()) GTEST_SKIP() << "no SLURM cluster (run through tests/slurm/run_with_cluster.sh)";
  TempDir dir("preempt-slurm-backend");
  std::string trainer = BinaryDir() + "/tests/runtime/preempt_trainer_worker";
  auto script = [&](const std::string& name, const std::string& every) {
    WriteScript(dir / (name + ".sh"), "#!/bin/bash\nexec " + trainer + " --dir " + (dir / name) +
                                          " --steps 100000 --sleep-ms 50 --every " + every + " --hints " + dir.path() +
                                          "/$SLURM_JOB_ID.hints.json\n");
  };
  Sh("mkdir -p " + (dir / "often") + " " + (dir / "never"));  // progress files before any checkpoint
  script("often", "20");
  script("never", "0");
  std::string often = Sbatch("-p advised --gres=gpu:2 --open-mode=append -o " + (dir / "often.out"), dir / "often.sh");
  std::string never = Sbatch("-p advised --gres=gpu:2 -o " + (dir / "never.out"), dir / "never.sh");
  ASSERT_FALSE(often.empty());
  ASSERT_FALSE(never.empty());
  ASSERT_TRUE(WaitFor(90, [&] {
    // ~15 s of training: `never` has all of it uncommitted, `often` at most 20 steps.
    return ReadInt(dir / "often/.rank0.progress") >= 300 && ReadInt(dir / "never/.rank0.progress") >= 300;
  })) << JobState(often) << " " << JobState(never);
  std::string high = Sbatch("-p high --gres=gpu:2 -o /dev/null --wrap 'sleep 1'", "");
  ASSERT_FALSE(high.empty());
  const std::string policy =
      "{\"min_runtime_s\":0,\"cooldown_s\":0,\"sigterm_save\":false,\"kill_now_max_lost_s\":0,"
      "\"kill_when_cheaper\":false,\"reserved_headroom\":0,\"restore_s\":1}";
  std::string plan = Sh(BinaryDir() + "/src/slurm/preempt-slurm-sched plan --partitions advised,high --hints-dir " +
                        dir.path() + " --policy-json '" + policy + "' 2>&1");
  EXPECT_NE(plan.find(often), std::string::npos) << plan;
  std::string watch = Sh(BinaryDir() + "/src/slurm/preempt-slurm-sched watch --partitions advised,high --interval 1 "
                         "--timeout 40 --hints-dir " + dir.path() + " --policy-json '" + policy + "' 2>&1");
  size_t request = watch.find("request  " + often), ack = watch.find("ack      " + often),
         requeue = watch.find("requeue  " + often);
  ASSERT_NE(request, std::string::npos) << watch;
  ASSERT_NE(ack, std::string::npos) << watch;
  ASSERT_NE(requeue, std::string::npos) << watch;
  EXPECT_LT(request, ack);
  EXPECT_LT(ack, requeue);
  EXPECT_EQ(watch.find("request  " + never), std::string::npos) << watch;
  EXPECT_EQ(watch.find("requeue  " + never), std::string::npos) << watch;
  EXPECT_TRUE(WaitFor(30, [&] { return JobState(high) == "COMPLETED"; })) << JobState(high) << "\n" << watch;
  EXPECT_GE(JobRestarts(often), 1);
  EXPECT_EQ(JobRestarts(never), 0);
  // Its commit was durable: it was killed at once (no second save), held until the high job ran,
  // released when watch exited, and its next run resumes from the requested commit.
  EXPECT_NE(watch.find("SIGKILL, scontrol requeuehold for " + high, requeue), std::string::npos) << watch;
  EXPECT_NE(watch.find("release  " + often), std::string::npos) << watch;
  std::string committed = watch.substr(ack);
  committed = committed.substr(committed.find("committed at step ") + 18);
  committed = committed.substr(0, committed.find('\n'));
  EXPECT_TRUE(WaitFor(60, [&] {
    return LinesStartingWith(ReadFileOrDie(dir / "often.out"), "rank 0 start step ").size() >= 2;
  })) << JobState(often);
  auto starts = LinesStartingWith(ReadFileOrDie(dir / "often.out"), "rank 0 start step ");
  ASSERT_GE(starts.size(), 2u);
  // (a periodic commit may have followed the requested one before the kill)
  EXPECT_GE(std::atoll(starts[1].c_str() + 18), std::atoll(committed.c_str())) << starts[1] << " vs " << committed;
  Sh("scancel --user=root >/dev/null 2>&1");
}

}  // namespace
}  // namespace preempt::testing::slurm
