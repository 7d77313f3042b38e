// SLURM's task environment and the job's own requeue after a wall-time stop.
// See include/preempt/slurm_env.h.
#include "preempt/slurm_env.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "preempt/log.h"
#include "preempt/signal.h"

namespace preempt {
namespace {

// A non-negative int from `name`; `*present` says whether it was set.
Status ReadCount(const EnvLookup& env, const char* name, int* out, bool* present = nullptr) {
  const char* v = env(name);
  if (present) *present = v && *v;
  if (!v || !*v) return Status::OK();
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v, &end, 10);
  if (errno || *end || n < 0 || n > 1 << 24)
    return Status(StatusCode::kInvalidArgument,
                  std::string("environment ") + name + ": '" + v + "' is not a non-negative integer");
  *out = static_cast<int>(n);
  return Status::OK();
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

Status ReadSlurmTask(const EnvLookup& env, SlurmTask* out) {
  SlurmTask t;
  const char* id = env("SLURM_JOB_ID");
  if (!id || !*id) {
    *out = t;
    return Status::OK();
  }
  t.in_slurm = true;
  t.job_id = id;
  if (const char* p = env("SLURM_JOB_PARTITION")) t.partition = p;
  bool have_ntasks = false;
  Status st = ReadCount(env, "SLURM_NTASKS", &t.world_size, &have_ntasks);
  if (st.ok() && !have_ntasks) st = ReadCount(env, "SLURM_NPROCS", &t.world_size);
  if (st.ok()) st = ReadCount(env, "SLURM_PROCID", &t.rank);
  if (st.ok()) st = ReadCount(env, "SLURM_LOCALID", &t.local_rank);
  if (st.ok()) st = ReadCount(env, "SLURM_NODEID", &t.node_rank);
  if (st.ok()) st = ReadCount(env, "SLURM_RESTART_COUNT", &t.restart_count);
  if (!st.ok()) return st;
  if (t.world_size < 1)
    return Status(StatusCode::kInvalidArgument, "environment SLURM_NTASKS: must be at least 1");
  if (t.rank >= t.world_size)
    return Status(StatusCode::kInvalidArgument, "environment SLURM_PROCID: " + std::to_string(t.rank) +
                                                    " is not below SLURM_NTASKS " + std::to_string(t.world_size));
  *out = t;
  return Status::OK();
}

Status ReadSlurmRequeueOptions(const EnvLookup& env, SlurmRequeueOptions* out) {
  SlurmRequeueOptions o;
  const char* on = env("PREEMPT_SLURM_REQUEUE_ON");
  std::string text = on && *on ? on : "USR1";
  if (text != "none") {
    Status st = ParseSignalList(text, &o.signals);
    if (!st.ok()) return st.with_context("environment PREEMPT_SLURM_REQUEUE_ON");
  }
  if (const char* s = env("PREEMPT_SCONTROL"); s && *s) o.scontrol = s;
  if (const char* s = env("PREEMPT_SLURM_REQUEUE_PREEMPTED"); s && *s) {
    std::string v = s;
    if (v != "0" && v != "1")
      return Status(StatusCode::kInvalidArgument, "environment PREEMPT_SLURM_REQUEUE_PREEMPTED: '" + v + "' is not 0 or 1");
    o.requeue_preempted = v == "1";
  }
  *out = o;
  return Status::OK();
}

const char* SelfRequeueName(SelfRequeue r) {
  switch (r) {
    case SelfRequeue::kNotSlurm: return "not-slurm";
    case SelfRequeue::kNotRankZero: return "not-rank-zero";
    case SelfRequeue::kOtherSignal: return "other-signal";
    case SelfRequeue::kNotCommitted: return "not-committed";
    case SelfRequeue::kRequeued: return "requeued";
    case SelfRequeue::kFailed: return "failed";
  }
  return "?";
}

SelfRequeue RequeueAfterStop(const SlurmTask& task, const SlurmRequeueOptions& opt, int stop_signal,
                             bool committed, Status* error) {
  if (!task.in_slurm) return SelfRequeue::kNotSlurm;
  if (task.rank != 0) return SelfRequeue::kNotRankZero;
  std::string out;
  bool requeue_signal = std::find(opt.signals.begin(), opt.signals.end(), stop_signal) != opt.signals.end();
  if (!requeue_signal && stop_signal == SIGTERM && opt.requeue_preempted) {
    // SLURM (22.05) requeues a preempted job only when it is still running at the end of
    // GraceTime; one that saved and exited inside the grace would end as COMPLETED. A job being
    // preempted shows a PreemptTime; a plain `scancel` does not, and is never requeued here.
    if (RunCommand({opt.scontrol, "show", "job", task.job_id}, opt.timeout_s, &out).ok() &&
        out.find("PreemptTime=") != std::string::npos && out.find("PreemptTime=None") == std::string::npos)
      requeue_signal = true;
  }
  if (!requeue_signal) return SelfRequeue::kOtherSignal;
  if (!committed) return SelfRequeue::kNotCommitted;
  Status st = RunCommand({opt.scontrol, "requeue", task.job_id}, opt.timeout_s, &out);
  if (!st.ok()) {
    if (error) *error = st;
    return SelfRequeue::kFailed;
  }
  return SelfRequeue::kRequeued;
}

void RequeueAfterStopFromEnv(int stop_signal, bool committed) {
  // exit_code() may be called more than once; a job is requeued once per process.
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  EnvLookup env = ProcessEnv();
  SlurmTask task;
  SlurmRequeueOptions opt;
  Status st = ReadSlurmTask(env, &task);
  if (st.ok()) st = ReadSlurmRequeueOptions(env, &opt);
  if (!st.ok()) {
    PREEMPT_LOG_WARN("slurm: not requeueing: %s", st.to_string().c_str());
    return;
  }
  SelfRequeue r = RequeueAfterStop(task, opt, stop_signal, committed, &st);
  if (r == SelfRequeue::kRequeued) {
    PREEMPT_LOG_INFO("slurm: job %s requeued itself after %s (stop checkpoint committed)", task.job_id.c_str(),
                     SignalName(stop_signal));
  } else if (r == SelfRequeue::kFailed) {
    PREEMPT_LOG_WARN("slurm: requeue of job %s failed: %s", task.job_id.c_str(), st.to_string().c_str());
  } else if (r == SelfRequeue::kNotCommitted) {
    PREEMPT_LOG_WARN("slurm: job %s not requeued after %s: the stop checkpoint did not commit",
                     task.job_id.c_str(), SignalName(stop_signal));
  }
}

Status RunCommand(const std::vector<std::string>& argv, double timeout_s, std::string* out, std::string* err) {
  if (argv.empty()) return Status(StatusCode::kInvalidArgument, "RunCommand: empty argv");
  std::string what = argv[0] + (argv.size() > 1 ? " " + argv[1] : "");
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe for", what);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::FromErrno(e, "pipe for", what);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    execvp(args[0], args.data());
    _exit(127);
  }
  int fork_errno = errno;
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Status::FromErrno(fork_errno, "fork for", what);
  }
  std::string o, e;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left_ms <= 0) {
      timed_out = true;
      break;
    }
    int n = poll(fds, 2, static_cast<int>(std::min<long long>(left_ms, 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        (i == 0 ? o : e).append(buf, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  if (timed_out) kill(pid, SIGKILL);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (out) *out = o;
  if (err) *err = e;
  if (timed_out)
    return Status(StatusCode::kDeadlineExceeded, what + ": no exit within " + std::to_string(timeout_s) + " s");
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
    std::string how = WIFEXITED(wstatus) ? "exit " + std::to_string(WEXITSTATUS(wstatus))
                                         : "signal " + std::to_string(WTERMSIG(wstatus));
    return Status(StatusCode::kIoError, what + ": " + how + (e.empty() ? "" : ": " + e));
  }
  return Status::OK();
}

}  // namespace preempt
