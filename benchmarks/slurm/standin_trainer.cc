// A stand-in trainer for the SLURM benchmark (benchmarks/slurm/slurm_bench.py): no model, but the
// checkpoint traffic of one. Its state is --state-mib of bytes; it "trains" one step every
// --step-ms (changing the state), and commits it with preempt::Store every --every-s seconds of
// training, on every checkpoint request of the scheduler (acknowledged as request_ack in its hints
// once durable; a request arriving during a save is answered by that save) and on SIGTERM (then
// it exits 143, after `scontrol requeue` when SLURM is preempting it), as the runtime does. Each
// save first waits --persist-s, a slow shared file system's transfer time (the real write of this
// machine's disk comes on top); each restore waits
// --restore-s after the real read (loading a model onto its GPUs). Until the save's wait and
// write are over nothing is committed, so a SIGKILL inside a save loses the work since the last
// commit, as it would for a real job.
//
// The commit log (--log, appended; one line per event, times in unix seconds):
//   start T step 0          process start
//   train T step S          restore done (S: the committed step it resumes from, 0 = none), the
//                           first step begins (T - start = restore time)
//   commit T step S snap U why periodic|request|stop    durable at T; S was reached at U
//   beat T step S           once a second while training
//   sigterm T step S        SIGTERM seen: training stops
//   exit T step S committed C
// A run that has no `exit` line was SIGKILLed after its last line.
//
//   slurm_standin_trainer --dir DIR --log FILE --hints FILE [--state-mib 16] [--every-s 60]
//                         [--step-ms 100] [--persist-s 0] [--restore-s 0] [--gpus 1] [--grace-s 0]
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "preempt/buffer.h"
#include "preempt/hints.h"
#include "preempt/slurm_env.h"
#include "preempt/store.h"

namespace {

volatile sig_atomic_t g_term = 0;
void OnTerm(int) { g_term = 1; }

struct Args {
  std::string dir, log, hints;
  double state_mib = 16, every_s = 60, step_ms = 100, persist_s = 0, restore_s = 0, grace_s = 0;
  int gpus = 1;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  std::map<std::string, double*> nums = {{"--state-mib", &a->state_mib}, {"--every-s", &a->every_s},
                                         {"--step-ms", &a->step_ms},     {"--persist-s", &a->persist_s},
                                         {"--restore-s", &a->restore_s}, {"--grace-s", &a->grace_s}};
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (i + 1 >= argc) return fprintf(stderr, "standin: %s needs a value\n", k.c_str()), false;
    std::string v = argv[i + 1];
    if (k == "--dir") a->dir = v;
    else if (k == "--log") a->log = v;
    else if (k == "--hints") a->hints = v;
    else if (k == "--gpus") {
      char* end = nullptr;
      const long g = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || g < 1 || g > 65536) return fprintf(stderr, "standin: --gpus: bad value '%s'\n", v.c_str()), false;
      a->gpus = static_cast<int>(g);
    }
    else if (nums.count(k)) {
      char* end = nullptr;
      double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(d >= 0) || d > 1e6) return fprintf(stderr, "standin: %s: bad value '%s'\n", k.c_str(), v.c_str()), false;
      *nums[k] = d;
    } else {
      return fprintf(stderr, "standin: unknown flag %s\n", k.c_str()), false;
    }
  }
  if (a->dir.empty() || a->log.empty() || a->hints.empty() || a->gpus < 1 || a->state_mib < 1 || a->step_ms < 1)
    return fprintf(stderr, "standin: needs --dir, --log, --hints; --gpus, --state-mib, --step-ms >= 1\n"), false;
  return true;
}

class Trainer {
 public:
  explicit Trainer(const Args& a)
      : a_(a), state_(static_cast<size_t>(a.state_mib * 1048576)), staging_(state_.size()) {
    preempt::StoreOptions so;
    so.root = a.dir;
    so.keep_last = 2;
    store_ = std::make_unique<preempt::Store>(so);
    log_ = fopen(a.log.c_str(), "a");
  }
  ~Trainer() {
    if (saver_.joinable()) saver_.join();
    if (log_) fclose(log_);
  }

  bool ok() const { return log_ != nullptr; }
  int run();

 private:
  void log(const char* what, const std::string& extra = "") { log_step(what, step_, extra); }
  void log_step(const char* what, int64_t step, const std::string& extra) {
    fprintf(log_, "%s %.3f step %lld%s\n", what, preempt::NowUnix(), static_cast<long long>(step), extra.c_str());
    fflush(log_);
  }
  void restore();
  void start_save(const char* why, int64_t request_id);
  bool finish_save(bool wait);  // true when a save finished (committed or not)
  void publish_hints();

  const Args& a_;
  preempt::AlignedBuffer state_, staging_;
  std::unique_ptr<preempt::Store> store_;
  FILE* log_ = nullptr;
  int64_t step_ = 0, committed_step_ = -1, request_ack_ = 0;
  double committed_at_ = 0, last_save_start_ = 0, save_cost_s_ = 0;
  std::thread saver_;
  std::atomic<bool> save_done_{false};
  preempt::Status save_status_;
  int64_t save_step_ = 0, save_request_ = 0;
  int64_t answered_request_ = 0;  // a request that arrived during the save in flight: its commit answers it
  double resumed_commit_at_ = 0;  // COMMIT time of the checkpoint this run resumed from
  double save_snap_ = 0, save_started_ = 0;
  std::string save_why_;
};

void Trainer::restore() {
  std::vector<int64_t> steps;
  if (!store_->valid_steps(&steps).ok() || steps.empty()) return;
  preempt::RestoreTarget t;
  t.name = "state";
  t.data = state_.data();
  t.nbytes = state_.size();
  t.check_shape = false;
  preempt::RestoreResult r;
  preempt::Status s = store_->restore({t}, preempt::RestoreOptions{}, &r);
  if (!s.ok()) {
    fprintf(stderr, "standin: restore failed: %s\n", s.to_string().c_str());
    std::exit(1);
  }
  step_ = committed_step_ = r.step;
  request_ack_ = std::atoll(r.metadata["request_ack"].c_str());
  committed_at_ = preempt::NowUnix();
  struct stat st;
  if (::stat((r.path + "/COMMIT").c_str(), &st) == 0) resumed_commit_at_ = st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
}

// Snapshot (memcpy into staging: the stall), then the slow transfer and the real write in a thread.
void Trainer::start_save(const char* why, int64_t request_id) {
  std::memcpy(staging_.data(), state_.data(), state_.size());
  save_step_ = step_;
  save_snap_ = save_started_ = last_save_start_ = preempt::NowUnix();
  save_request_ = request_id;
  save_why_ = why;
  save_done_ = false;
  saver_ = std::thread([this] {
    std::this_thread::sleep_for(std::chrono::duration<double>(a_.persist_s));
    preempt::SaveRequest req;
    req.step = save_step_;
    req.items.push_back({"state", preempt::DType::kBytes, {}, staging_.data(), staging_.size()});
    req.metadata["request_ack"] = std::to_string(std::max(save_request_, request_ack_));
    save_status_ = store_->save(std::move(req));
    save_done_ = true;
  });
}

bool Trainer::finish_save(bool wait) {
  if (!saver_.joinable() || (!wait && !save_done_)) return false;
  saver_.join();
  if (!save_status_.ok()) {
    fprintf(stderr, "standin: save of step %lld failed: %s\n", static_cast<long long>(save_step_),
            save_status_.to_string().c_str());
    return true;
  }
  committed_step_ = save_step_;
  committed_at_ = preempt::NowUnix();
  save_cost_s_ = committed_at_ - save_started_;
  request_ack_ = std::max({request_ack_, save_request_, answered_request_});
  answered_request_ = 0;
  char extra[160];
  snprintf(extra, sizeof extra, " snap %.3f why %s", save_snap_, save_why_.c_str());
  log_step("commit", save_step_, extra);
  publish_hints();
  return true;
}

void Trainer::publish_hints() {
  preempt::Hints h;
  const char* id = std::getenv("SLURM_JOB_ID");
  h.job = id && *id ? id : "standin";
  h.updated_unix = preempt::NowUnix();
  h.step = step_;
  h.step_time_s = a_.step_ms / 1000.0;
  if (committed_step_ >= 0) h.last_commit = {committed_step_, committed_at_, a_.dir};
  h.cost.bytes = state_.size();
  h.cost.stall_s = 0.01;
  h.cost.persist_s = save_cost_s_ > 0 ? save_cost_s_ : a_.persist_s + 0.1;
  h.grace.needed_s = h.checkpoint_s();
  h.grace.granted_s = a_.grace_s;
  // Training since the snapshot of the last commit (or since this run's first step).
  h.lost_work_s = static_cast<double>(step_ - std::max<int64_t>(committed_step_, 0)) * a_.step_ms / 1000.0;
  h.gpus = a_.gpus;
  h.request_ack = request_ack_;
  preempt::Status s = preempt::WriteHintsAtomic(a_.hints, h);
  if (!s.ok()) fprintf(stderr, "standin: hints: %s\n", s.to_string().c_str());
}

int Trainer::run() {
  log("start");
  restore();
  std::this_thread::sleep_for(std::chrono::duration<double>(a_.restore_s));
  // As the runtime does: a request older than the commit this run resumed from was answered by it.
  preempt::RequestChannel requests(a_.hints + ".request", std::chrono::milliseconds(50), request_ack_,
                                   resumed_commit_at_);
  log("train");
  double train_start = preempt::NowUnix(), next_beat = train_start + 1;
  last_save_start_ = train_start;
  int64_t pending_request = 0;
  publish_hints();
  while (!g_term) {
    std::this_thread::sleep_for(std::chrono::duration<double>(a_.step_ms / 1000.0));
    if (g_term) break;
    ++step_;
    reinterpret_cast<int64_t*>(state_.data())[step_ % (state_.size() / 8)] = step_;
    finish_save(false);
    if (auto r = requests.poll()) pending_request = std::max(pending_request, r->id);
    if (requests.fulfilled_id() > request_ack_) request_ack_ = requests.fulfilled_id();
    // As the runtime does: a save in flight answers a request (no second save queued behind it).
    if (saver_.joinable() && pending_request > std::max(request_ack_, save_request_))
      answered_request_ = std::max(answered_request_, pending_request);
    double now = preempt::NowUnix();
    if (!saver_.joinable()) {
      if (pending_request > request_ack_) start_save("request", pending_request);
      else if (now - last_save_start_ >= a_.every_s) start_save("periodic", 0);
    }
    if (now >= next_beat) {
      log("beat");
      publish_hints();
      next_beat = now + 1;
    }
  }
  log("sigterm");
  finish_save(true);
  if (step_ > committed_step_) {
    start_save("stop", 0);
    finish_save(true);
  }
  bool committed = committed_step_ == step_;
  preempt::RequeueAfterStopFromEnv(SIGTERM, committed);
  log("exit", committed ? " committed 1" : " committed 0");
  return 143;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) return 2;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnTerm;
  sigaction(SIGTERM, &sa, nullptr);
  Trainer t(a);
  if (!t.ok()) {
    fprintf(stderr, "standin: cannot open --log %s: %s\n", a.log.c_str(), strerror(errno));
    return 2;
  }
  return t.run();
}
