// Process-wide signal handling for preemption. See include/preempt/signal.h.
//
// Everything the handler touches is a lock-free std::atomic or a plain array written only while
// the handler is not installed for that slot (g_prev), so the handler is async-signal-safe.
#include "preempt/signal.h"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "preempt/log.h"

namespace preempt {
namespace {

constexpr int kMaxSignal = 65;

enum SlotKind : int { kNone = 0, kStop = 1, kCheckpoint = 2 };

std::atomic<int> g_kind[kMaxSignal];
struct sigaction g_prev[kMaxSignal];
std::atomic<bool> g_chain{true};
std::atomic<int> g_exit_after{0};
std::atomic<bool> g_installed{false};

std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signo{0};
std::atomic<int> g_stop_count{0};
std::atomic<int> g_stop_pid{0};
std::atomic<int64_t> g_stop_mono_ns{0};
std::atomic<int64_t> g_stop_real_ns{0};
std::atomic<uint64_t> g_ckpt_count{0};
std::atomic<int> g_eventfd{-1};
// Grace and reserve in ns, so the handler-free readers need no lock.
std::atomic<int64_t> g_grace_ns{30'000'000'000};
std::atomic<int64_t> g_reserve_ns{3'000'000'000};

static_assert(std::atomic<int64_t>::is_always_lock_free, "handler needs lock-free int64 atomics");
static_assert(std::atomic<int>::is_always_lock_free, "handler needs lock-free int atomics");

int64_t NowNs(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);  // async-signal-safe (POSIX)
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void PokeEventFd() {
  int fd = g_eventfd.load(std::memory_order_acquire);
  if (fd >= 0) {
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof(one));  // EAGAIN at counter overflow is fine
    (void)r;
  }
}

void RecordStop(int signo, int pid) {
  int count = g_stop_count.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (count == 1) {
    // Times first, flag last: a reader that sees the flag sees the receipt time.
    g_stop_mono_ns.store(NowNs(CLOCK_MONOTONIC), std::memory_order_relaxed);
    g_stop_real_ns.store(NowNs(CLOCK_REALTIME), std::memory_order_relaxed);
    g_stop_pid.store(pid, std::memory_order_relaxed);
    g_stop_signo.store(signo, std::memory_order_relaxed);
    g_stop.store(true, std::memory_order_release);
  }
  PokeEventFd();
}

void Handler(int signo, siginfo_t* info, void* uctx) {
  int saved_errno = errno;
  if (signo > 0 && signo < kMaxSignal) {
    int kind = g_kind[signo].load(std::memory_order_acquire);
    if (kind == kStop) {
      RecordStop(signo, info ? info->si_pid : 0);
      int limit = g_exit_after.load(std::memory_order_relaxed);
      if (limit > 0 && g_stop_count.load(std::memory_order_relaxed) >= limit) _exit(128 + signo);
    } else if (kind == kCheckpoint) {
      g_ckpt_count.fetch_add(1, std::memory_order_acq_rel);
      PokeEventFd();
    }
    if (g_chain.load(std::memory_order_relaxed)) {
      const struct sigaction& prev = g_prev[signo];
      if (prev.sa_flags & SA_SIGINFO) {
        if (prev.sa_sigaction != nullptr) prev.sa_sigaction(signo, info, uctx);
      } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
        prev.sa_handler(signo);
      }
    }
  }
  errno = saved_errno;
}

struct NamedSignal {
  const char* name;
  int signo;
};
const NamedSignal kNames[] = {
    {"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},   {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1},
    {"SIGUSR2", SIGUSR2}, {"SIGTERM", SIGTERM}, {"SIGALRM", SIGALRM}, {"SIGCONT", SIGCONT},
    {"SIGXCPU", SIGXCPU}, {"SIGPWR", SIGPWR},   {"SIGKILL", SIGKILL}, {"SIGSTOP", SIGSTOP},
};

bool ParseDoubleEnv(const char* name, double* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= 0 && d <= 1e9)) {
    PREEMPT_LOG_WARN("ignoring %s=\"%s\": not a number of seconds in [0, 1e9]", name, v);
    return false;
  }
  *out = d;
  return true;
}

}  // namespace

const char* SignalName(int signo) {
  for (const auto& n : kNames)
    if (n.signo == signo) return n.name;
  return "signal";
}

Status ParseSignalList(const std::string& text, std::vector<int>* out) {
  out->clear();
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string tok = text.substr(pos, comma - pos);
    tok.erase(0, tok.find_first_not_of(" \t"));
    if (!tok.empty()) tok.erase(tok.find_last_not_of(" \t") + 1);
    pos = comma + 1;
    if (tok.empty()) continue;
    std::string upper = tok;
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (upper == "NONE" || upper == "0") continue;
    if (upper.rfind("SIG", 0) != 0 && !std::isdigit(static_cast<unsigned char>(upper[0]))) upper = "SIG" + upper;
    int signo = 0;
    if (std::isdigit(static_cast<unsigned char>(upper[0]))) {
      char* end = nullptr;
      long v = std::strtol(upper.c_str(), &end, 10);
      if (*end != '\0' || v <= 0 || v >= kMaxSignal)
        return Status(StatusCode::kInvalidArgument, "bad signal number \"" + tok + "\"");
      signo = static_cast<int>(v);
    } else {
      for (const auto& n : kNames)
        if (upper == n.name) signo = n.signo;
      if (signo == 0) return Status(StatusCode::kInvalidArgument, "unknown signal name \"" + tok + "\"");
    }
    out->push_back(signo);
  }
  return Status::OK();
}

GraceConfig ResolveGrace(const SignalOptions& opts) {
  GraceConfig g;
  double v = 0;
  if (opts.grace_s >= 0) {
    g.grace_s = opts.grace_s;
    g.grace_source = "options";
  } else if (ParseDoubleEnv("PREEMPT_GRACE_S", &v)) {
    g.grace_s = v;
    g.grace_source = "env PREEMPT_GRACE_S";
  } else {
    g.grace_s = 30;
    g.grace_source = "default (Kubernetes terminationGracePeriodSeconds default)";
  }
  if (opts.reserve_s >= 0) {
    g.reserve_s = opts.reserve_s;
  } else if (ParseDoubleEnv("PREEMPT_GRACE_RESERVE_S", &v)) {
    g.reserve_s = v;
  } else {
    g.reserve_s = std::min(std::max(1.0, 0.1 * g.grace_s), 0.5 * g.grace_s);
  }
  g.reserve_s = std::min(g.reserve_s, g.grace_s);
  return g;
}

Status InstallSignalHandlers(const SignalOptions& opts) {
  if (g_installed.load()) return Status(StatusCode::kInvalidArgument, "preempt signal handlers already installed");
  std::vector<int> stop = opts.stop_signals, ckpt = opts.checkpoint_signals;
  if (stop.empty()) {
    const char* env = std::getenv("PREEMPT_STOP_SIGNALS");
    if (env && *env) PREEMPT_RETURN_IF_ERROR(ParseSignalList(env, &stop).with_context("PREEMPT_STOP_SIGNALS"));
    if (stop.empty()) stop = {SIGTERM};
  }
  if (ckpt.empty()) {
    const char* env = std::getenv("PREEMPT_CHECKPOINT_SIGNALS");
    if (env && *env) {
      PREEMPT_RETURN_IF_ERROR(ParseSignalList(env, &ckpt).with_context("PREEMPT_CHECKPOINT_SIGNALS"));
    } else {
      ckpt = {SIGUSR2};
    }
  }
  ckpt.erase(std::remove(ckpt.begin(), ckpt.end(), 0), ckpt.end());
  for (int s : stop) {
    if (s <= 0 || s >= kMaxSignal || s == SIGKILL || s == SIGSTOP)
      return Status(StatusCode::kInvalidArgument, std::string("cannot handle ") + SignalName(s) + " (" + std::to_string(s) + ")");
    if (std::find(ckpt.begin(), ckpt.end(), s) != ckpt.end())
      return Status(StatusCode::kInvalidArgument, std::string(SignalName(s)) + " is both a stop and a checkpoint signal");
  }
  for (int s : ckpt)
    if (s <= 0 || s >= kMaxSignal || s == SIGKILL || s == SIGSTOP)
      return Status(StatusCode::kInvalidArgument, "cannot handle signal " + std::to_string(s));

  if (g_eventfd.load() < 0) {
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "eventfd", "for preempt signals");
    g_eventfd.store(fd, std::memory_order_release);
  }
  GraceConfig grace = ResolveGrace(opts);
  g_grace_ns.store(static_cast<int64_t>(grace.grace_s * 1e9));
  g_reserve_ns.store(static_cast<int64_t>(grace.reserve_s * 1e9));
  g_chain.store(opts.chain);
  g_exit_after.store(opts.exit_after_signals);
  ClearSignalState();

  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = &Handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  // Block the other preempt signals while one handler runs, so records never interleave.
  for (int s : stop) sigaddset(&sa.sa_mask, s);
  for (int s : ckpt) sigaddset(&sa.sa_mask, s);

  std::vector<int> done;
  auto install = [&](int s, int kind) -> Status {
    if (std::find(done.begin(), done.end(), s) != done.end()) return Status::OK();
    // Read the previous disposition first; the slot kind is published before our handler can run.
    if (sigaction(s, nullptr, &g_prev[s]) != 0) return Status::FromErrno(errno, "sigaction", SignalName(s));
    g_kind[s].store(kind, std::memory_order_release);
    if (sigaction(s, &sa, nullptr) != 0) {
      g_kind[s].store(kNone);
      return Status::FromErrno(errno, "sigaction", SignalName(s));
    }
    done.push_back(s);
    return Status::OK();
  };
  Status st;
  for (int s : stop)
    if (st.ok()) st = install(s, kStop);
  for (int s : ckpt)
    if (st.ok()) st = install(s, kCheckpoint);
  if (!st.ok()) {
    for (int s : done) {
      sigaction(s, &g_prev[s], nullptr);
      g_kind[s].store(kNone);
    }
    return st;
  }
  g_installed.store(true);
  std::string names;
  for (int s : stop) names += std::string(names.empty() ? "" : ",") + SignalName(s);
  std::string cnames;
  for (int s : ckpt) cnames += std::string(cnames.empty() ? "" : ",") + SignalName(s);
  PREEMPT_LOG_DEBUG("signal handlers installed: stop=%s checkpoint=%s grace=%.1fs (%s) reserve=%.1fs",
                    names.c_str(), cnames.empty() ? "none" : cnames.c_str(), grace.grace_s,
                    grace.grace_source.c_str(), grace.reserve_s);
  return Status::OK();
}

void UninstallSignalHandlers() {
  if (!g_installed.load()) return;
  for (int s = 1; s < kMaxSignal; ++s) {
    if (g_kind[s].load() == kNone) continue;
    sigaction(s, &g_prev[s], nullptr);
    g_kind[s].store(kNone, std::memory_order_release);
  }
  g_installed.store(false);
}

bool SignalHandlersInstalled() { return g_installed.load(); }

bool StopRequested() { return g_stop.load(std::memory_order_relaxed); }
int StopSignal() { return g_stop_signo.load(std::memory_order_acquire); }
int StopSignalCount() { return g_stop_count.load(std::memory_order_acquire); }
int StopSenderPid() { return g_stop_pid.load(std::memory_order_acquire); }
uint64_t CheckpointRequestCount() { return g_ckpt_count.load(std::memory_order_acquire); }

int64_t StopReceiptMonotonicNs() {
  if (!g_stop.load(std::memory_order_acquire)) return 0;
  return g_stop_mono_ns.load(std::memory_order_relaxed);
}
int64_t StopReceiptRealtimeNs() {
  if (!g_stop.load(std::memory_order_acquire)) return 0;
  return g_stop_real_ns.load(std::memory_order_relaxed);
}

Deadline StopDeadline() {
  int64_t t = StopReceiptMonotonicNs();
  if (t == 0) return Deadline::Never();
  int64_t at = t + g_grace_ns.load() - g_reserve_ns.load();
  // steady_clock is CLOCK_MONOTONIC in libstdc++ and libc++ on Linux.
  return Deadline::At(Deadline::Clock::time_point(std::chrono::nanoseconds(at)));
}

double GraceSeconds() { return static_cast<double>(g_grace_ns.load()) / 1e9; }
double ReserveSeconds() { return static_cast<double>(g_reserve_ns.load()) / 1e9; }

int SignalEventFd() { return g_eventfd.load(std::memory_order_acquire); }

void RequestStop() { RecordStop(-1, 0); }

void ClearSignalState() {
  g_stop.store(false, std::memory_order_release);
  g_stop_count.store(0);
  g_stop_signo.store(0);
  g_stop_pid.store(0);
  g_stop_mono_ns.store(0);
  g_stop_real_ns.store(0);
  g_ckpt_count.store(0);
  int fd = g_eventfd.load();
  if (fd >= 0) {
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof(v));
    (void)r;
  }
}

}  // namespace preempt
