// End to end with the real C++ trainer (tests/runtime/trainer_worker.cc: LibTorch + preempt::Runtime)
// under `preempt-sched run` on 2 virtual GPU slots: two low-priority trainers and a high-priority
// arrival. The victim must be the trainer with less uncommitted work; it checkpoints on request, is
// evicted once the commit is durable, the high job starts on its slot, and the victim later resumes
// from its commit having lost at most one step. Its losses after the resume, and its final
// parameters, equal an uninterrupted run's bit for bit.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "preempt/sched/runner.h"
#include "sched/run_support.h"
#include "support/test_util.h"

namespace preempt::sched {
namespace {

using preempt::testing::BinaryDir;
using preempt::testing::TempDir;
using testing::EventsText;
using testing::IndexOf;
using testing::Joined;
using testing::Lines;

// "step <i> loss <hex> <decimal>" lines → the last hex logged for each step (a resumed run logs
// the steps it redoes again).
std::map<int64_t, std::string> LossByStep(const std::string& path) {
  std::map<int64_t, std::string> out;
  for (const auto& l : Lines(path)) {
    std::istringstream in(l);
    std::string w1, w2, hex;
    int64_t step = -1;
    if (in >> w1 >> step >> w2 >> hex && w1 == "step" && w2 == "loss") out[step] = hex;
  }
  return out;
}

// The value after "rank 0 final " in a trainer's output ("" when absent).
std::string FinalSum(const std::vector<std::string>& out) {
  const std::string key = "rank 0 final ";
  for (const auto& l : out)
    if (l.rfind(key, 0) == 0) return l.substr(key.size());
  return "";
}

constexpr int kSteps = 160;  // ~8 s at 50 ms a step: both low trainers still run when high-h arrives

TEST(SchedRunTrainer, RealTrainerVictimCheckpointsAndResumesBitForBit) {
  TempDir dir("preempt-sched-trainer");
  const std::string trainer = BinaryDir() + "/tests/runtime/preempt_trainer_worker";
  // stdout/stderr of each launch go to <dir>/<id>/out (exec: signals reach the trainer itself).
  auto job = [&](const std::string& id, PriorityClass cls, double at, int steps, int every) {
    RunJobSpec j = testing::Spec(dir.path(), id, cls, at, 10);
    const std::string d = dir / id;
    j.argv = {"/bin/sh", "-c", "exec \"$@\" >>'" + d + "/out' 2>&1", "sh", trainer, "--dir", d + "/ckpt",
              "--steps", std::to_string(steps), "--every", std::to_string(every), "--sleep-ms", "50",
              "--loss-log", d + "/loss"};
    return j;
  };
  // low-a commits every 4 steps (~0.2 s of uncommitted work); low-b never commits before its end.
  std::vector<RunJobSpec> jobs = {job("low-a", PriorityClass::kLow, 0, kSteps, 4),
                                  job("low-b", PriorityClass::kLow, 0, kSteps, 0),
                                  job("high-h", PriorityClass::kHigh, 5.0, 10, 0)};
  // high-h arrives 5 s in, and not before both trainers have published hints (a trainer loads
  // LibTorch first, which a loaded machine can stretch), so the victim is chosen from real hints,
  // not assumed costs.
  jobs[2].after_files = {"low-a.hints.json", "low-b.hints.json"};
  RunOptions opt = testing::Options(dir.path(), 2, 120);
  testing::CheckpointThenEvictPolicy(&opt.policy);
  opt.policy.checkpoint_deadline_s = 20;
  // Saves take ~0.1 s here (fsync), about half of low-a's commit period: right after a commit
  // killing would be cheaper than saving. The test exercises the save path every time.
  opt.policy.kill_when_cheaper = false;
  opt.policy.restore_s = 0.2;  // low-a: ~0.1 s save + 0.2 s restore; low-b: seconds of uncommitted work
  std::vector<RunEvent> ev;
  Status s = RunJobs(jobs, opt, &ev);
  std::string all = EventsText(ev);
  ASSERT_TRUE(s.ok()) << s.to_string() << "\n" << all;
  const auto out_a = Lines(dir / "low-a" + "/out");
  all += "--- low-a output:\n" + Joined(out_a);

  // The victim is low-a (less uncommitted work), not low-b (never committed).
  testing::ExpectCheckpointThenEvict(ev, "low-a", "low-b", "high-h", all);
  int gone = IndexOf(ev, "preempted", "low-a");
  ASSERT_GE(gone, 0) << all;
  EXPECT_NE(ev[gone].detail.find("exit=143"), std::string::npos) << "stop committed → exit 143\n" << all;

  // From the trainer's own output: stopped at step S (completed steps) with a commit, resumed at R.
  int64_t stopped = -1, resumed = -1;
  int starts = 0;
  for (const auto& l : out_a) {
    long long v = -1;
    int committed = 0;
    if (sscanf(l.c_str(), "rank 0 stopped at step %lld committed=%d", &v, &committed) == 2) {
      EXPECT_EQ(committed, 1) << all;
      stopped = v;
    }
    if (sscanf(l.c_str(), "rank 0 start step %lld", &v) == 1 && starts++ == 1) resumed = v;
  }
  ASSERT_GE(stopped, 0) << all;
  ASSERT_GE(resumed, 0) << all;
  EXPECT_GE(resumed + 1, stopped) << "lost more than one step\n" << all;  // S steps trained; redo ≤ 1
  EXPECT_LE(resumed, stopped) << all;

  // The same training, uninterrupted: every step's loss and the final parameters are identical.
  const std::string ref = dir / "ref";
  ASSERT_EQ(mkdir(ref.c_str(), 0755), 0);
  std::string cmd = "env -u PREEMPT_HINTS_FILE -u PREEMPT_REQUEST_FILE '" + trainer + "' --dir '" + ref +
                    "/ckpt' --steps " + std::to_string(kSteps) + " --every 4 --loss-log '" + ref + "/loss' >'" +
                    ref + "/out' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << Joined(Lines(ref + "/out"));
  auto got = LossByStep(dir / "low-a" + "/loss"), want = LossByStep(ref + "/loss");
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(got, want) << all;
  std::string final_ref = FinalSum(Lines(ref + "/out"));
  ASSERT_FALSE(final_ref.empty()) << Joined(Lines(ref + "/out"));
  EXPECT_EQ(FinalSum(out_a), final_ref) << all;
}

}  // namespace
}  // namespace preempt::sched
