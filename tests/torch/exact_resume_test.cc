// Exact resume: a trainer that is SIGKILLed at random steps (by itself right after a step, and by
// this test at a random moment, possibly mid-persist) and relaunched each time ends with the same
// parameters, Adam state, lr and RNG state, bit for bit, as a run that was never interrupted, and
// every step it executed (including the replayed ones) produced the same loss bits.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/test_util.h"

using preempt::testing::TempDir;

namespace {

std::string Trainer() { return preempt::testing::BinaryDir() + "/tests/torch/preempt_torch_trainer"; }

pid_t Launch(const std::vector<std::string>& args) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    std::string exe = Trainer();
    argv.push_back(exe.data());
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

std::vector<std::string> Args(const TempDir& d, const std::string& ckpt, int64_t steps) {
  return {"--dir", d / ckpt, "--steps", std::to_string(steps), "--every", "10",
          "--losses", d / (ckpt + ".losses"), "--final", d / (ckpt + ".final")};
}

// step -> every loss recorded for it
std::map<int64_t, std::vector<std::string>> Losses(const std::string& path) {
  std::map<int64_t, std::vector<std::string>> out;
  std::ifstream in(path);
  int64_t step;
  std::string bits;
  while (in >> step >> bits) out[step].push_back(bits);
  return out;
}

size_t LineCount(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return n;
}

TEST(ExactResume, KilledAndResumedTrainingIsBitwiseEqual) {
  TempDir d("preempt-exact-resume");
  const int64_t total = 240;

  // Reference: never interrupted.
  ASSERT_EQ(Wait(Launch(Args(d, "ref", total))), 0) << "reference trainer failed";

  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> pick(31, total - 1);
  std::vector<int64_t> kills = {pick(rng), pick(rng), pick(rng)};
  std::sort(kills.begin(), kills.end());
  std::ostringstream plan;
  for (auto k : kills) plan << k << " ";
  SCOPED_TRACE("self-kill steps: " + plan.str());

  int launches = 0;
  // 1) killed by itself right after steps kills[0]..kills[2] (a periodic save may be in flight).
  for (int64_t k : kills) {
    auto args = Args(d, "run", total);
    args.push_back("--die-at");
    args.push_back(std::to_string(k));
    int st = Wait(Launch(args));
    ++launches;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;  // already past k after restore
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "launch " << launches << " status " << st;
  }
  // 2) killed from outside at a random moment while training (slowed down a little).
  {
    auto args = Args(d, "run", total);
    args.push_back("--step-delay-ms");
    args.push_back("3");
    size_t before = LineCount(d / "run.losses");
    pid_t pid = Launch(args);
    std::uniform_int_distribution<int> wait_lines(5, 40);
    size_t target = before + static_cast<size_t>(wait_lines(rng));
    auto t0 = std::chrono::steady_clock::now();
    while (LineCount(d / "run.losses") < target &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    kill(pid, SIGKILL);
    int st = Wait(pid);
    ++launches;
    EXPECT_TRUE(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) << st;
  }
  // 3) runs to the end.
  ASSERT_EQ(Wait(Launch(Args(d, "run", total))), 0) << "final resumed trainer failed";

  const std::string ref_final = preempt::testing::ReadFileOrDie(d / "ref.final");
  const std::string run_final = preempt::testing::ReadFileOrDie(d / "run.final");
  ASSERT_GT(ref_final.size(), 1000u);
  EXPECT_TRUE(ref_final == run_final) << "final parameters / optimizer state / RNG differ";

  auto ref = Losses(d / "ref.losses");
  auto run = Losses(d / "run.losses");
  ASSERT_EQ(ref.size(), static_cast<size_t>(total));
  ASSERT_EQ(run.size(), static_cast<size_t>(total)) << "some step was never executed";
  size_t replayed = 0;
  for (const auto& [step, bits] : run) {
    ASSERT_EQ(ref[step].size(), 1u);
    for (const auto& b : bits) EXPECT_EQ(b, ref[step][0]) << "loss of step " << step;
    replayed += bits.size() - 1;
  }
  EXPECT_GT(replayed, 0u) << "no step was replayed: the kills did not interrupt anything";

  // Each relaunch resumed from a checkpoint, not from scratch: checkpoints every 10 steps, the
  // trainer waits for the older of two in-flight saves, so after a kill at step k >= 31 the
  // newest commit is at most 3 intervals behind.
  std::vector<int64_t> starts;
  {
    std::ifstream in(d / "run.losses.starts");
    int64_t s;
    while (in >> s) starts.push_back(s);
  }
  ASSERT_EQ(starts.size(), static_cast<size_t>(launches + 1));
  EXPECT_EQ(starts[0], 0);
  size_t from_checkpoint = 0;
  for (size_t i = 1; i < starts.size(); ++i) from_checkpoint += starts[i] > 0 ? 1 : 0;
  EXPECT_GE(from_checkpoint, 3u) << "relaunches did not resume from checkpoints";
  for (size_t i = 1; i <= kills.size() && i < starts.size(); ++i)
    EXPECT_GE(starts[i], kills[i - 1] - 30) << "launch " << i << " resumed too far back";
  std::string resumed;
  for (auto s : starts) resumed += std::to_string(s) + " ";
  printf("exact resume: %d interrupted launches (self-kill after steps %s+ one external SIGKILL), resumed at "
         "steps %s, %zu steps replayed, final state %zu bytes bitwise equal\n",
         launches, plan.str().c_str(), resumed.c_str(), replayed, ref_final.size());
}

}  // namespace
