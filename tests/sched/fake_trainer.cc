// A stand-in trainer that honours the hints contract, for the `preempt-sched run` end-to-end test
// (tests/sched/run_trainer_test.cc runs the same scenario with the real example trainer).
//
//   fake_trainer --dir DIR --steps N [--every K] [--step-ms MS] [--persist-s S]
//
// It "trains" one step every MS milliseconds, commits a checkpoint (DIR/ckpt: the next step and
// the last handled request id) every K steps, on every checkpoint request from the scheduler
// (acknowledged as request_ack in the hints) and on SIGTERM, after which it exits with 75
// (preempted). On start it resumes from DIR/ckpt. It appends one line per event to DIR/log:
// "start S", "commit S <why>", "exit S preempted", "done S".
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "preempt/hints.h"

namespace {

volatile sig_atomic_t g_term = 0;
void OnTerm(int) { g_term = 1; }

std::string g_dir;
void Log(const std::string& line) {
  std::ofstream(g_dir + "/log", std::ios::app) << line << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 100, every = 10, step_ms = 50;
  double persist_s = 0.01;  // published as its measured save cost (a zero cost would read as "not measured yet")
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") g_dir = v;
    else if (k == "--steps") steps = std::atoll(v.c_str());
    else if (k == "--every") every = std::atoll(v.c_str());
    else if (k == "--step-ms") step_ms = std::atoll(v.c_str());
    else if (k == "--persist-s") persist_s = std::atof(v.c_str());
    else {
      fprintf(stderr, "fake_trainer: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  std::string hints_path = preempt::HintsPathFromEnv();
  if (g_dir.empty() || hints_path.empty()) {
    fprintf(stderr, "fake_trainer: needs --dir and PREEMPT_HINTS_FILE\n");
    return 2;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnTerm;
  sigaction(SIGTERM, &sa, nullptr);

  int64_t next = 0, handled = 0;
  {
    std::ifstream in(g_dir + "/ckpt");
    if (in) in >> next >> handled;
  }
  Log("start " + std::to_string(next));

  preempt::Hints h;
  const char* job = std::getenv("PREEMPT_JOB_ID");
  h.job = job && *job ? job : "fake";
  h.step = next;
  h.step_time_s = step_ms / 1000.0;
  h.cost.persist_s = persist_s;
  h.grace.needed_s = persist_s;
  const char* grace = std::getenv("PREEMPT_GRACE_S");
  h.grace.granted_s = grace ? std::atof(grace) : 0;
  h.gpus = 1;
  h.request_ack = handled;
  double start = preempt::NowUnix();
  double last_commit_unix = start;
  if (next > 0) h.last_commit = {next, start, g_dir + "/ckpt"};

  auto publish = [&](preempt::JobState state) {
    h.state = state;
    h.step = next;
    h.updated_unix = preempt::NowUnix();
    h.lost_work_s = std::max(0.0, h.updated_unix - last_commit_unix);
    preempt::Status s = preempt::WriteHintsAtomic(hints_path, h);
    if (!s.ok()) fprintf(stderr, "fake_trainer: %s\n", s.to_string().c_str());
  };
  auto commit = [&](const std::string& why) {
    preempt::Status s = preempt::WriteFileAtomic(g_dir + "/ckpt", std::to_string(next) + " " + std::to_string(handled) + "\n");
    if (!s.ok()) {
      fprintf(stderr, "fake_trainer: %s\n", s.to_string().c_str());
      return;
    }
    last_commit_unix = preempt::NowUnix();
    h.last_commit = {next, last_commit_unix, g_dir + "/ckpt"};
    Log("commit " + std::to_string(next) + " " + why);
  };

  preempt::RequestChannel requests(preempt::RequestPathFor(hints_path), std::chrono::milliseconds(5), handled);
  publish(preempt::JobState::kTraining);
  while (next < steps) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    ++next;  // one step trained
    if (g_term) {
      publish(preempt::JobState::kStopping);
      commit("sigterm");
      publish(preempt::JobState::kStopped);
      Log("exit " + std::to_string(next) + " preempted");
      return 75;
    }
    if (auto req = requests.poll()) {
      publish(preempt::JobState::kCheckpointing);
      handled = req->id;
      commit("request=" + std::to_string(req->id));
      h.request_ack = req->id;
      publish(preempt::JobState::kTraining);
    } else if (every > 0 && next % every == 0) {
      commit("periodic");
      publish(preempt::JobState::kTraining);
    } else if (next % 2 == 0) {
      publish(preempt::JobState::kTraining);  // heartbeat
    }
  }
  commit("final");
  publish(preempt::JobState::kStopped);
  Log("done " + std::to_string(next));
  return 0;
}
