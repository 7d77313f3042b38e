// End to end: `preempt-sched run` on 2 virtual GPU slots with two low-priority stand-in trainers
// and a high-priority arrival. The victim must be the low job with less uncommitted work; it is
// asked to checkpoint first, evicted after the commit, the high job starts on its slot, and the
// victim later resumes from its commit having lost at most one step.
#include <gtest/gtest.h>

#include <fstream>
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
using testing::Lines;

TEST(SchedRun, CheckpointThenEvictTheCheaperVictimAndResume) {
  TempDir dir("preempt-sched-run");
  const std::string trainer = BinaryDir() + "/tests/sched/fake_trainer";
  auto job = [&](const std::string& id, PriorityClass cls, double at, int steps, int every) {
    RunJobSpec j = testing::Spec(dir.path(), id, cls, at, 5);
    j.argv = {trainer, "--dir", dir / id, "--steps", std::to_string(steps), "--every", std::to_string(every),
              "--step-ms", "50"};
    return j;
  };
  // low-a commits every 4 steps (≤ 0.2 s uncommitted); low-b only at its end.
  std::vector<RunJobSpec> jobs = {job("low-a", PriorityClass::kLow, 0, 50, 4),
                                  job("low-b", PriorityClass::kLow, 0, 50, 1000),
                                  job("high-h", PriorityClass::kHigh, 1.0, 10, 1000)};
  RunOptions opt = testing::Options(dir.path(), 2, 60);
  testing::CheckpointThenEvictPolicy(&opt.policy);
  opt.policy.checkpoint_deadline_s = 10;
  opt.policy.hints_stale_s = 10;
  opt.policy.restore_s = 1;
  std::vector<RunEvent> ev;
  Status s = RunJobs(jobs, opt, &ev);
  const std::string all = EventsText(ev);
  ASSERT_TRUE(s.ok()) << s.to_string() << "\n" << all;
  // The victim is low-a (less uncommitted work); low-b is never touched.
  testing::ExpectCheckpointThenEvict(ev, "low-a", "low-b", "high-h", all);

  // From the victim's own log: a commit for request 1, then exit at step S, then resume at R ≥ S-1.
  auto log = Lines(dir / "low-a" + "/log");
  std::string joined;
  for (const auto& l : log) joined += l + "\n";
  int64_t exit_step = -1, resume_step = -1;
  bool saw_request_commit = false;
  for (const auto& l : log) {
    std::istringstream in(l);
    std::string what;
    int64_t step = -1;
    in >> what >> step;
    std::string why;
    in >> why;
    if (what == "commit" && why.rfind("request=", 0) == 0 && exit_step < 0) saw_request_commit = true;
    if (what == "exit" && exit_step < 0) exit_step = step;
    if (what == "start" && exit_step >= 0 && resume_step < 0) resume_step = step;
  }
  EXPECT_TRUE(saw_request_commit) << joined;
  ASSERT_GE(exit_step, 0) << joined;
  ASSERT_GE(resume_step, 0) << joined;
  EXPECT_GE(resume_step, exit_step - 1) << "lost more than one step\n" << joined;
  EXPECT_EQ(log.back(), "done 50") << joined;
}

// A victim without hints is evicted at once (unknown cost, no request); one that ignores SIGTERM
// is killed after its grace period, requeued, and relaunched after the high job.
TEST(SchedRun, NoHintsEvictNowAndSigkillAfterGrace) {
  TempDir dir;
  std::vector<RunJobSpec> jobs(2);
  jobs[0].id = "stubborn";
  jobs[0].cls = PriorityClass::kLow;
  jobs[0].grace_s = 0.5;
  jobs[0].argv = {"/bin/sh", "-c", "trap '' TERM; exec sleep 1"};
  jobs[1].id = "urgent";
  jobs[1].cls = PriorityClass::kHigh;
  jobs[1].submit_after_s = 0.3;
  jobs[1].argv = {"/bin/true"};
  RunOptions opt;
  opt.work_dir = dir.path();
  opt.slots = 1;
  opt.timeout_s = 30;
  opt.policy.min_runtime_s = 0;
  opt.policy.cooldown_s = 0;
  std::vector<RunEvent> ev;
  ASSERT_TRUE(RunJobs(jobs, opt, &ev).ok());
  const std::string all = EventsText(ev);
  EXPECT_EQ(IndexOf(ev, "request", "stubborn"), -1) << all;
  int evict = IndexOf(ev, "evict", "stubborn");
  int kill = IndexOf(ev, "kill", "stubborn");
  int gone = IndexOf(ev, "preempted", "stubborn");
  int start = IndexOf(ev, "start", "urgent");
  ASSERT_GE(evict, 0) << all;
  EXPECT_NE(ev[evict].detail.find("no fresh hints"), std::string::npos) << all;
  ASSERT_GE(kill, 0) << all;
  EXPECT_GE(ev[kill].t - ev[evict].t, 0.45) << all;
  EXPECT_LT(evict, kill);
  EXPECT_LT(kill, gone);
  EXPECT_LT(gone, start);
  EXPECT_GE(IndexOf(ev, "start", "stubborn", 1), start) << all;
  EXPECT_GE(IndexOf(ev, "done", "stubborn"), 0) << all;
  EXPECT_GE(IndexOf(ev, "done", "urgent"), 0) << all;
}

// A job with after_files arrives only once every file exists: "waiter" waits for "maker" to write
// <work_dir>/ready (relative) and for an absolute path that appears with it; "never" waits for a
// file nobody writes and the run ends at its timeout.
TEST(SchedRun, ArrivalWaitsForFiles) {
  TempDir dir;
  const std::string work = dir / "run";
  std::vector<RunJobSpec> jobs(2);
  jobs[0].id = "maker";
  jobs[0].argv = {"/bin/sh", "-c", "sleep 0.5; touch '" + work + "/ready' '" + dir.path() + "/abs'; sleep 0.5"};
  jobs[1].id = "waiter";
  jobs[1].after_files = {"ready", dir.path() + "/abs"};
  jobs[1].argv = {"/bin/true"};
  RunOptions opt;
  opt.work_dir = work;
  opt.slots = 2;
  opt.timeout_s = 30;
  std::vector<RunEvent> ev;
  ASSERT_TRUE(RunJobs(jobs, opt, &ev).ok()) << EventsText(ev);
  const std::string all = EventsText(ev);
  const int arrive = IndexOf(ev, "arrive", "waiter");
  ASSERT_GE(arrive, 0) << all;
  EXPECT_GE(ev[arrive].t, 0.45) << all;  // not before the files exist
  EXPECT_GE(IndexOf(ev, "done", "waiter"), 0) << all;
  EXPECT_GE(IndexOf(ev, "done", "maker"), 0) << all;

  std::vector<RunJobSpec> never(1);
  never[0].id = "never";
  never[0].after_files = {"nobody-writes-this"};
  never[0].argv = {"/bin/true"};
  opt.timeout_s = 0.5;
  ev.clear();
  EXPECT_EQ(RunJobs(never, opt, &ev).code(), StatusCode::kDeadlineExceeded) << EventsText(ev);
  EXPECT_EQ(IndexOf(ev, "arrive", "never"), -1) << EventsText(ev);
}

TEST(SchedRun, SpecErrors) {
  TempDir dir;
  std::vector<RunJobSpec> jobs(1);
  jobs[0].id = "x";
  RunOptions opt;
  opt.work_dir = dir.path();
  EXPECT_EQ(RunJobs(jobs, opt, nullptr).code(), StatusCode::kInvalidArgument);  // no command
  jobs[0].argv = {"/bin/true"};
  jobs[0].gpus = 4;
  opt.slots = 2;
  EXPECT_EQ(RunJobs(jobs, opt, nullptr).code(), StatusCode::kInvalidArgument);  // cannot fit
}

TEST(SchedRun, JobThatFailsIsNotRestarted) {
  TempDir dir;
  std::vector<RunJobSpec> jobs(2);
  jobs[0].id = "ok";
  jobs[0].argv = {"/bin/true"};
  jobs[1].id = "bad";
  jobs[1].argv = {"/bin/false"};
  RunOptions opt;
  opt.work_dir = dir.path();
  opt.slots = 1;
  opt.timeout_s = 20;
  std::vector<RunEvent> ev;
  ASSERT_TRUE(RunJobs(jobs, opt, &ev).ok());
  EXPECT_GE(IndexOf(ev, "done", "ok"), 0);
  EXPECT_GE(IndexOf(ev, "failed", "bad"), 0);
  EXPECT_EQ(IndexOf(ev, "start", "bad", 1), -1);
}

}  // namespace
}  // namespace preempt::sched
