// End to end with the real C++ example trainer (examples/ddp_trainer: LibTorch + preempt::Runtime)
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
#include "support/test_util.h"

namespace preempt::sched {
namespace {

using preempt::testing::BinaryDir;
using preempt::testing::TempDir;

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

int IndexOf(const std::vector<RunEvent>& ev, const std::string& kind, const std::string& job, int nth = 0) {
  for (size_t i = 0; i < ev.size(); ++i)
    if (ev[i].kind == kind && ev[i].job == job && nth-- == 0) return static_cast<int>(i);
  return -1;
}

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

constexpr int kSteps = 100;

TEST(SchedRunTrainer, RealTrainerVictimCheckpointsAndResumesBitForBit) {
  TempDir dir("preempt-sched-trainer");
  const std::string trainer = BinaryDir() + "/examples/ddp_trainer";
  // stdout/stderr of each launch go to <dir>/<id>/out (exec: signals reach the trainer itself).
  auto job = [&](const std::string& id, PriorityClass cls, double at, int steps, int every) {
    RunJobSpec j;
    j.id = id;
    j.cls = cls;
    j.submit_after_s = at;
    j.grace_s = 10;
    std::string d = dir / id;
    EXPECT_EQ(mkdir(d.c_str(), 0755), 0);
    j.argv = {"/bin/sh", "-c", "exec \"$@\" >>'" + d + "/out' 2>&1", "sh", trainer, "--dir", d + "/ckpt",
              "--steps", std::to_string(steps), "--every", std::to_string(every), "--sleep-ms", "50",
              "--loss-log", d + "/loss"};
    return j;
  };
  // low-a commits every 4 steps (~0.2 s of uncommitted work); low-b never commits before its end.
  std::vector<RunJobSpec> jobs = {job("low-a", PriorityClass::kLow, 0, kSteps, 4),
                                  job("low-b", PriorityClass::kLow, 0, kSteps, 0),
                                  job("high-h", PriorityClass::kHigh, 3.0, 10, 0)};
  RunOptions opt;
  opt.slots = 2;
  opt.work_dir = dir / "run";
  opt.event_log = dir / "events.log";
  opt.timeout_s = 120;
  opt.policy.min_runtime_s = 0;
  opt.policy.cooldown_s = 0.2;
  opt.policy.reserved_headroom = 0;
  opt.policy.low_guaranteed_share = 0;
  opt.policy.checkpoint_deadline_s = 20;
  // Checkpoint-then-evict end to end: request, commit, SIGTERM (the runtime's stop save), exit.
  opt.policy.sigterm_save = false;
  opt.policy.kill_now_max_lost_s = 0;
  opt.policy.kill_after_commit = false;
  // Saves take ~0.1 s here (fsync), about half of low-a's commit period: right after a commit
  // killing would be cheaper than saving. The test exercises the save path every time.
  opt.policy.kill_when_cheaper = false;
  opt.policy.restore_s = 0.2;  // low-a: ~0.1 s save + 0.2 s restore; low-b: seconds of uncommitted work
  std::vector<RunEvent> ev;
  Status s = RunJobs(jobs, opt, &ev);
  std::string all;
  for (const auto& e : ev) all += std::to_string(e.t) + " " + e.kind + " " + e.job + " " + e.detail + "\n";
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << all;
  const auto out_a = Lines(dir / "low-a" + "/out");
  all += "--- low-a output:\n" + Joined(out_a);

  // The victim is low-a (less uncommitted work), asked to checkpoint for high-h; low-b untouched.
  int req = IndexOf(ev, "request", "low-a");
  ASSERT_GE(req, 0) << all;
  EXPECT_NE(ev[req].detail.find("for high-h"), std::string::npos) << all;
  EXPECT_EQ(IndexOf(ev, "request", "low-b"), -1) << all;
  EXPECT_EQ(IndexOf(ev, "evict", "low-b"), -1) << all;
  // request → ack (the runtime's commit for that request is durable) → evict → exit → high-h starts.
  int ack = IndexOf(ev, "ack", "low-a");
  int evict = IndexOf(ev, "evict", "low-a");
  int gone = IndexOf(ev, "preempted", "low-a");
  int high = IndexOf(ev, "start", "high-h");
  ASSERT_GE(ack, 0) << all;
  EXPECT_LT(req, ack) << all;
  EXPECT_LT(ack, evict) << all;
  EXPECT_LT(evict, gone) << all;
  EXPECT_LT(gone, high) << all;
  EXPECT_NE(ev[gone].detail.find("exit=143"), std::string::npos) << "stop committed → exit 143\n" << all;
  EXPECT_EQ(IndexOf(ev, "kill", "low-a"), -1) << "victim needed SIGKILL\n" << all;
  EXPECT_GE(IndexOf(ev, "start", "low-a", 1), high) << all;
  for (const char* id : {"low-a", "low-b", "high-h"}) EXPECT_GE(IndexOf(ev, "done", id), 0) << id << "\n" << all;

  // From the trainer's own output: stopped after step S with a commit, resumed at step R.
  int64_t stopped = -1, resumed = -1;
  int starts = 0;
  for (const auto& l : out_a) {
    long long v = -1;
    int committed = 0;
    if (sscanf(l.c_str(), "rank 0 stopped after step %lld committed=%d", &v, &committed) == 2) {
      EXPECT_EQ(committed, 1) << all;
      stopped = v;
    }
    if (sscanf(l.c_str(), "rank 0 start step %lld", &v) == 1 && starts++ == 1) resumed = v;
  }
  ASSERT_GE(stopped, 0) << all;
  ASSERT_GE(resumed, 0) << all;
  EXPECT_GE(resumed, stopped) << "lost more than one step\n" << all;  // steps 0..S trained; redo ≤ 1
  EXPECT_LE(resumed, stopped + 1) << all;

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
