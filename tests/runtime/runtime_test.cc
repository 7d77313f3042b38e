// End-to-end preemption tests: real gloo jobs of 2 and 4 ddp_trainer processes (examples/),
// real signals, real checkpoints on disk, exact resume.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>

#include "coord/proc_util.h"
#include "preempt/hints.h"
#include "support/test_util.h"

namespace preempt::testing {
namespace {

namespace fs = std::filesystem;

std::string Trainer() { return BinaryDir() + "/examples/ddp_trainer"; }

struct JobSpec {
  int world = 2;
  int64_t steps = 40;
  int64_t every = 0;
  int sleep_ms = 15;
  int sleep_before_ms = 0;
  int extra_mib = 0;
  int stuck_rank = -1;
  int64_t stuck_step = -1;
  std::string hints;
  bool pipelined = false;
  std::vector<std::string> env = {"PREEMPT_GRACE_S=20"};
};

struct Job {
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  std::string dir;
};

Job Launch(const TempDir& tmp, const std::string& name, const std::string& ckpt, const JobSpec& s) {
  static int launches = 0;
  Job job;
  job.dir = tmp / ckpt;
  fs::create_directories(job.dir);
  std::string store = tmp / ("rdzv-" + name + "-" + std::to_string(launches++));
  for (int r = 0; r < s.world; ++r) {
    std::string log = tmp / (name + ".rank" + std::to_string(r) + ".log");
    std::vector<std::string> argv = {Trainer(), "--rank", std::to_string(r), "--world", std::to_string(s.world),
                                     "--rendezvous", store, "--dir", job.dir, "--steps", std::to_string(s.steps),
                                     "--every", std::to_string(s.every), "--sleep-ms", std::to_string(s.sleep_ms),
                                     "--loss-log", tmp / (ckpt + ".loss")};
    if (s.sleep_before_ms) argv.insert(argv.end(), {"--sleep-before-ms", std::to_string(s.sleep_before_ms)});
    if (s.extra_mib) argv.insert(argv.end(), {"--extra-mib", std::to_string(s.extra_mib)});
    if (s.stuck_rank >= 0) {
      argv.insert(argv.end(), {"--stuck-rank", std::to_string(s.stuck_rank), "--stuck-step", std::to_string(s.stuck_step)});
    }
    if (!s.hints.empty()) argv.insert(argv.end(), {"--hints", s.hints});
    if (s.pipelined) argv.insert(argv.end(), {"--pipelined", "1"});
    job.logs.push_back(log);
    job.pids.push_back(SpawnProcess(argv, log, s.env));
  }
  return job;
}

int64_t Progress(const Job& job, int rank) {
  std::ifstream in(job.dir + "/.rank" + std::to_string(rank) + ".progress");
  int64_t s = -1;
  in >> s;
  return s;
}

bool WaitUntil(const std::function<bool()>& cond, double timeout_s) {
  for (int i = 0; i < timeout_s * 200; ++i) {
    if (cond()) return true;
    usleep(5000);
  }
  return false;
}

bool LogHas(const std::string& log, const std::string& needle) {
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str().find(needle) != std::string::npos;
}

// Waits for every rank; returns exit codes. Fails the test on a hang.
std::vector<int> WaitAll(const Job& job, double timeout_s, std::vector<double>* waited = nullptr) {
  std::vector<int> codes;
  for (size_t r = 0; r < job.pids.size(); ++r) {
    double w = 0;
    int st = WaitProcess(job.pids[r], timeout_s, &w);
    if (waited) waited->push_back(w);
    EXPECT_GE(st, 0) << "rank " << r << " hung; log:\n" << ReadFileOrDie(job.logs[r]);
    codes.push_back(ExitCode(st));
  }
  return codes;
}

// "rank R stopped after step S committed=C"
int64_t StopStep(const std::string& log, int* committed) {
  std::ifstream in(log);
  std::string line;
  std::regex re("rank \\d+ stopped after step (\\d+) committed=(\\d)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, re)) {
      *committed = std::stoi(m[2]);
      return std::stoll(m[1]);
    }
  }
  return -1;
}

std::string Final(const std::string& log) {
  std::ifstream in(log);
  std::string line;
  std::regex re("final (\\S+)");
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, re)) return m[1];
  return "";
}

std::vector<std::string> CommittedDirs(const std::string& dir, bool* any_tmp) {
  std::vector<std::string> out;
  *any_tmp = false;
  for (auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename();
    if (n.rfind("step-", 0) != 0) continue;
    if (n.find(".tmp") != std::string::npos) {
      *any_tmp = true;
      continue;
    }
    if (fs::exists(e.path() / "COMMIT")) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Reference: an uninterrupted run of the same job.
std::string ReferenceRun(const TempDir& tmp, JobSpec s) {
  Job ref = Launch(tmp, "ref", "ref", s);
  auto codes = WaitAll(ref, 240);
  for (int c : codes) EXPECT_EQ(c, 0);
  return Final(ref.logs[0]);
}

void PreemptAndResume(int world, unsigned seed, bool pipelined = false) {
  TempDir tmp("rt");
  JobSpec s;
  s.world = world;
  s.pipelined = pipelined;
  s.every = 10;
  std::string ref_final = ReferenceRun(tmp, s);
  ASSERT_FALSE(ref_final.empty());

  std::mt19937 rng(seed);
  int victim = static_cast<int>(rng() % world);
  int64_t at = 3 + rng() % 25;
  Job job = Launch(tmp, "int", "int", s);
  ASSERT_TRUE(WaitUntil([&] { return Progress(job, victim) >= at; }, 120));
  ASSERT_EQ(kill(job.pids[victim], SIGTERM), 0);
  std::vector<double> waited;
  auto codes = WaitAll(job, 60, &waited);
  int64_t stop = -2;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(codes[r], 143) << ReadFileOrDie(job.logs[r]);
    EXPECT_LT(waited[r], 20 - 2) << "must exit before receipt + grace - reserve";
    int committed = 0;
    int64_t st = StopStep(job.logs[r], &committed);
    EXPECT_EQ(committed, 1);
    if (stop == -2) stop = st;
    EXPECT_EQ(st, stop) << "rank " << r << " stopped at another step";
  }
  EXPECT_GE(stop, at);
  bool any_tmp = false;
  auto dirs = CommittedDirs(job.dir, &any_tmp);
  EXPECT_FALSE(any_tmp);
  ASSERT_FALSE(dirs.empty());
  char want[32];
  std::snprintf(want, sizeof(want), "step-%08lld", static_cast<long long>(stop + 1));
  EXPECT_EQ(dirs.back(), want);

  Job resumed = Launch(tmp, "res", "int", s);
  codes = WaitAll(resumed, 240);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(codes[r], 0);
    EXPECT_TRUE(LogHas(resumed.logs[r], "start step " + std::to_string(stop + 1))) << ReadFileOrDie(resumed.logs[r]);
    EXPECT_EQ(Final(resumed.logs[r]), ref_final) << "resume must equal the uninterrupted run bit for bit";
  }
  EXPECT_EQ(ReadFileOrDie(tmp / "int.loss"), ReadFileOrDie(tmp / "ref.loss")) << "loss curves differ";
}

TEST(Runtime, TwoRanksSigtermToOneRankStopsTogetherAndResumesBitwise) { PreemptAndResume(2, 11); }
TEST(Runtime, FourRanksSigtermToOneRankStopsTogetherAndResumesBitwise) { PreemptAndResume(4, 12); }
TEST(Runtime, PipelinedAgreementTwoRanksResumesBitwise) { PreemptAndResume(2, 13, /*pipelined=*/true); }

TEST(Runtime, SigtermTwiceStillCommitsOnce) {
  TempDir tmp("rt2");
  JobSpec s;
  Job job = Launch(tmp, "j", "ck", s);
  ASSERT_TRUE(WaitUntil([&] { return Progress(job, 0) >= 5; }, 120));
  kill(job.pids[0], SIGTERM);
  kill(job.pids[0], SIGTERM);
  kill(job.pids[1], SIGTERM);
  auto codes = WaitAll(job, 60);
  for (int c : codes) EXPECT_EQ(c, 143);
  bool any_tmp;
  EXPECT_EQ(CommittedDirs(job.dir, &any_tmp).size(), 1u);
  EXPECT_FALSE(any_tmp);
}

TEST(Runtime, SigtermBeforeTheFirstStep) {
  TempDir tmp("rt3");
  JobSpec s;
  s.sleep_before_ms = 1500;
  Job job = Launch(tmp, "j", "ck", s);
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(job.dir + "/.rank0.ready") && fs::exists(job.dir + "/.rank1.ready"); }, 120));
  kill(job.pids[0], SIGTERM);
  auto codes = WaitAll(job, 60);
  for (int c : codes) EXPECT_EQ(c, 143);
  int committed = 0;
  EXPECT_EQ(StopStep(job.logs[1], &committed), 0);  // one step, then the stop checkpoint
  EXPECT_EQ(committed, 1);
}

TEST(Runtime, SigtermDuringPeriodicSaveNeverLeavesAPartialCheckpoint) {
  TempDir tmp("rt4");
  JobSpec s;
  s.every = 4;
  s.extra_mib = 96;
  s.steps = 30;
  Job job = Launch(tmp, "j", "ck", s);
  ASSERT_TRUE(WaitUntil([&] { return LogHas(job.logs[0], "checkpoint at step 8"); }, 120));
  kill(job.pids[1], SIGTERM);  // the step-8 save is persisting now
  auto codes = WaitAll(job, 60);
  for (int c : codes) EXPECT_EQ(c, 143);
  int committed = 0;
  int64_t stop = StopStep(job.logs[0], &committed);
  EXPECT_EQ(committed, 1);
  bool any_tmp;
  auto dirs = CommittedDirs(job.dir, &any_tmp);
  EXPECT_FALSE(any_tmp);
  char want[32];
  std::snprintf(want, sizeof(want), "step-%08lld", static_cast<long long>(stop + 1));
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs.back(), want);
  Job resumed = Launch(tmp, "r", "ck", s);
  codes = WaitAll(resumed, 240);
  for (size_t r = 0; r < codes.size(); ++r) {
    EXPECT_EQ(codes[r], 0);
    EXPECT_TRUE(LogHas(resumed.logs[r], "start step " + std::to_string(stop + 1)));
  }
}

TEST(Runtime, GraceTooShortKeepsThePreviousCheckpoint) {
  TempDir tmp("rt5");
  JobSpec s;
  s.every = 10;
  s.sleep_ms = 150;  // a periodic save finishes well before the next one
  s.extra_mib = 512;
  s.steps = 400;
  s.env = {"PREEMPT_GRACE_S=0.5", "PREEMPT_GRACE_RESERVE_S=0.1"};
  Job job = Launch(tmp, "j", "ck", s);
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(job.dir + "/step-00000010/COMMIT"); }, 180));
  usleep(300000);
  kill(job.pids[0], SIGTERM);
  std::vector<double> waited;
  auto codes = WaitAll(job, 60, &waited);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(codes[r], 75) << ReadFileOrDie(job.logs[r]);
    EXPECT_LT(waited[r], 5);
  }
  EXPECT_TRUE(LogHas(job.logs[0], "NOT committed")) << ReadFileOrDie(job.logs[0]);
  // Said ahead of time too: once the first periodic checkpoint measured the cost.
  EXPECT_TRUE(LogHas(job.logs[0], "is shorter than the")) << ReadFileOrDie(job.logs[0]);
  int committed = 1;
  int64_t stop = StopStep(job.logs[0], &committed);
  EXPECT_EQ(committed, 0);
  // The next start restores an older, complete checkpoint.
  s.steps = 0;
  s.env = {"PREEMPT_GRACE_S=20"};
  Job resumed = Launch(tmp, "r", "ck", s);
  codes = WaitAll(resumed, 120);
  EXPECT_EQ(codes[0], 0);
  std::regex re("start step (\\d+)");
  std::smatch m;
  std::string text = ReadFileOrDie(resumed.logs[0]);
  ASSERT_TRUE(std::regex_search(text, m, re)) << text;
  int64_t start = std::stoll(m[1]);
  EXPECT_GE(start, 10);
  EXPECT_LE(start, stop);
}

TEST(Runtime, StuckRankHitsTheDeadlineWithoutHanging) {
  TempDir tmp("rt6");
  JobSpec s;
  s.stuck_rank = 1;
  s.stuck_step = 8;
  s.env = {"PREEMPT_GRACE_S=3", "PREEMPT_GRACE_RESERVE_S=1"};
  Job job = Launch(tmp, "j", "ck", s);
  ASSERT_TRUE(WaitUntil([&] { return LogHas(job.logs[1], "stuck before"); }, 120));
  usleep(100000);
  kill(job.pids[0], SIGTERM);
  double waited = 0;
  int st = WaitProcess(job.pids[0], 30, &waited);
  EXPECT_EQ(ExitCode(st), 75) << ReadFileOrDie(job.logs[0]);
  EXPECT_LT(waited, 3.0);
  EXPECT_TRUE(LogHas(job.logs[0], "DeadlineExceeded")) << ReadFileOrDie(job.logs[0]);
  kill(job.pids[1], SIGKILL);
  WaitProcess(job.pids[1], 10);
}

TEST(Runtime, CheckpointRequestThenSigterm) {
  TempDir tmp("rt7");
  JobSpec s;
  s.steps = 400;
  s.hints = tmp / "hints.json";
  Job job = Launch(tmp, "j", "ck", s);
  ASSERT_TRUE(WaitUntil([&] { return Progress(job, 0) >= 3; }, 120));
  ASSERT_TRUE(WriteCheckpointRequest(RequestPathFor(s.hints), CheckpointRequest{1, "checkpoint"}).ok());
  Hints h;
  ASSERT_TRUE(WaitUntil([&] { return ReadHints(s.hints, &h).ok() && h.request_ack == 1; }, 60));
  EXPECT_GT(h.last_commit.step, 3);
  EXPECT_EQ(h.state == JobState::kTraining || h.state == JobState::kCheckpointing, true);
  int64_t requested_commit = h.last_commit.step;
  // A checkpoint signal works the same way, without stopping.
  kill(job.pids[1], SIGUSR2);
  ASSERT_TRUE(WaitUntil([&] { return ReadHints(s.hints, &h).ok() && h.last_commit.step > requested_commit; }, 60));
  kill(job.pids[1], SIGTERM);
  auto codes = WaitAll(job, 60);
  for (int c : codes) EXPECT_EQ(c, 143);
  ASSERT_TRUE(ReadHints(s.hints, &h).ok());
  EXPECT_EQ(h.state, JobState::kStopped);
  int committed = 0;
  EXPECT_EQ(h.last_commit.step, StopStep(job.logs[0], &committed) + 1);
  EXPECT_EQ(h.request_ack, 1);
  EXPECT_GT(h.cost.persist_s, 0);
  EXPECT_GT(h.grace.needed_s, 0);
  EXPECT_DOUBLE_EQ(h.grace.granted_s, 20);
}

}  // namespace
}  // namespace preempt::testing
