// Cross-rank stop agreement and drain over gloo, with real worker processes (coord_worker).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "coord/proc_util.h"
#include "support/test_util.h"

namespace preempt::testing {
namespace {

std::string Worker() { return BinaryDir() + "/tests/coord/coord_worker"; }

bool WaitForFile(const std::string& path, double timeout_s) {
  for (int i = 0; i < timeout_s * 100; ++i) {
    if (access(path.c_str(), F_OK) == 0) return true;
    usleep(10000);
  }
  return false;
}

int64_t Progress(const std::string& out) {
  std::ifstream in(out + ".progress");
  int64_t s = -1;
  in >> s;
  return s;
}

struct Job {
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
};

Job Launch(const TempDir& dir, const std::string& mode, int world, const std::vector<std::string>& env,
           const std::string& every = "1", const std::string& steps = "100000", const std::string& pipe = "sync") {
  Job job;
  std::string store = dir / "store";
  for (int r = 0; r < world; ++r) {
    std::string out = dir / ("rank" + std::to_string(r) + ".out");
    job.outs.push_back(out);
    job.pids.push_back(SpawnProcess({Worker(), mode, std::to_string(r), std::to_string(world), store, out, every, steps, pipe},
                                    out + ".log", env));
  }
  for (auto& o : job.outs) EXPECT_TRUE(WaitForFile(o + ".ready", 60)) << o;
  return job;
}

void AgreeOnce(int world, int every, unsigned seed, bool pipelined = false) {
  TempDir dir("coord");
  Job job = Launch(dir, "agree", world, {"PREEMPT_GRACE_S=20"}, std::to_string(every), "100000",
                   pipelined ? "pipelined" : "sync");
  std::mt19937 rng(seed);
  int victim = static_cast<int>(rng() % world);
  int64_t at = 3 + rng() % 20;
  while (Progress(job.outs[victim]) < at) usleep(1000);
  ASSERT_EQ(kill(job.pids[victim], SIGTERM), 0);
  int64_t stop_step = -2;
  for (int r = 0; r < world; ++r) {
    int st = WaitProcess(job.pids[r], 60);
    ASSERT_EQ(ExitCode(st), 0) << "rank " << r << ": " << ReadFileOrDie(job.outs[r] + ".log");
    std::string text = ReadFileOrDie(job.outs[r]);
    std::istringstream is(text);
    std::string word;
    int64_t step;
    std::string drained_word;
    int drained = 0;
    is >> word >> step >> drained_word >> drained;
    ASSERT_EQ(word, "stop") << text;
    EXPECT_EQ(drained, 1) << text;
    EXPECT_EQ(step % every, 0);
    if (stop_step == -2) stop_step = step;
    EXPECT_EQ(step, stop_step) << "rank " << r << " stopped at a different step";
  }
  EXPECT_GE(stop_step, at);
  EXPECT_LE(stop_step, at + (pipelined ? 2 * every : every) + 2);
}

TEST(CoordGloo, TwoRanksAgreeWhenOneRankIsSignalled) { AgreeOnce(2, 1, 1); }
TEST(CoordGloo, FourRanksAgreeWhenOneRankIsSignalled) {
  AgreeOnce(4, 1, 2);
  AgreeOnce(4, 1, 3);
}
TEST(CoordGloo, CheckEveryKStepsAgreesOnAScheduledStep) { AgreeOnce(2, 4, 4); }
TEST(CoordGloo, PipelinedAgreementStopsTogether) {
  AgreeOnce(2, 1, 5, true);
  AgreeOnce(4, 3, 6, true);
}

TEST(CoordGloo, StuckRankHitsTheDeadlineWithoutHanging) {
  TempDir dir("coord-stuck");
  Job job = Launch(dir, "stuck", 2, {"PREEMPT_GRACE_S=3", "PREEMPT_GRACE_RESERVE_S=1"});
  while (Progress(job.outs[0]) < 4) usleep(1000);
  usleep(100000);  // rank 1 is now asleep before the collective
  ASSERT_EQ(kill(job.pids[0], SIGTERM), 0);
  double waited = 0;
  int st = WaitProcess(job.pids[0], 30, &waited);
  EXPECT_EQ(ExitCode(st), 3) << ReadFileOrDie(job.outs[0] + ".log");
  EXPECT_LT(waited, 3.0) << "rank 0 must give up at receipt + grace - reserve (2 s)";
  EXPECT_NE(ReadFileOrDie(job.outs[0]).find("DeadlineExceeded"), std::string::npos) << ReadFileOrDie(job.outs[0]);
  kill(job.pids[1], SIGKILL);
  WaitProcess(job.pids[1], 10);
}

// A collective given up at its deadline completes later, when the slow peer joins: it must never
// write into the caller's buffer then (that memory may be a stack frame that is gone), and the
// peer must receive the values the caller passed, not whatever that memory holds by then.
TEST(CoordGloo, AbandonedAllreduceNeverWritesTheCallersBuffer) {
  TempDir dir("coord-abandon");
  Job job = Launch(dir, "abandon", 2, {});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ExitCode(WaitProcess(job.pids[r], 60)), 0) << ReadFileOrDie(job.outs[r] + ".log");
  }
  std::istringstream r0(ReadFileOrDie(job.outs[0])), r1(ReadFileOrDie(job.outs[1]));
  std::string w0, w1;
  int64_t b[3], v[3];
  std::string code0, code1;
  r0 >> w0 >> b[0] >> b[1] >> b[2] >> code0;
  r1 >> w1 >> v[0] >> v[1] >> v[2] >> code1;
  ASSERT_EQ(w0, "buffer");
  EXPECT_EQ(code0, "DeadlineExceeded:");
  EXPECT_EQ(b[0], 7);
  EXPECT_EQ(b[1], 11);
  EXPECT_EQ(b[2], 13) << "the abandoned all-reduce wrote its late result into the caller's buffer";
  ASSERT_EQ(w1, "result");
  EXPECT_EQ(code1, "OK");
  EXPECT_EQ(v[0], 100);
  EXPECT_EQ(v[1], 200);
  EXPECT_EQ(v[2], 300);
}

TEST(CoordGloo, PerStepCheckCost) {
  for (auto [every, pipe] : std::vector<std::pair<std::string, std::string>>{
           {"1", "sync"}, {"10", "sync"}, {"1", "pipelined"}, {"10", "pipelined"}}) {
    TempDir dir("coord-bench");
    Job job = Launch(dir, "bench", 2, {}, every, "1000", pipe);
    for (int r = 0; r < 2; ++r) ASSERT_EQ(ExitCode(WaitProcess(job.pids[r], 120)), 0);
    std::string text = ReadFileOrDie(job.outs[0]);
    std::istringstream is(text);
    std::string w;
    double mean_us = 0;
    is >> w >> mean_us;
    std::printf("gloo 2 ranks, check_every=%s %s (per step, 1 ms compute between): %s", every.c_str(), pipe.c_str(),
                text.c_str());
    EXPECT_GT(mean_us, 0);
    EXPECT_LT(mean_us, 20000) << "a per-step check must stay cheap";
  }
}

}  // namespace
}  // namespace preempt::testing
