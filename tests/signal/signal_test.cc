// Signal handling with real signals: in-process (raise/kill to self), across threads, and from a
// parent to real child processes (fork), including chaining, uninstall and the second signal.
#include "preempt/signal.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <poll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <thread>

namespace preempt {
namespace {

int64_t NowNs(clockid_t clk) {
  timespec ts;
  clock_gettime(clk, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool WaitReadable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int rc;
  // The very signal being waited for may interrupt poll (EINTR): poll again.
  do {
    rc = poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  return rc == 1 && (p.revents & POLLIN);
}

class SignalTest : public ::testing::Test {
 protected:
  void TearDown() override {
    UninstallSignalHandlers();
    ClearSignalState();
    unsetenv("PREEMPT_GRACE_S");
    unsetenv("PREEMPT_GRACE_RESERVE_S");
    unsetenv("PREEMPT_STOP_SIGNALS");
    unsetenv("PREEMPT_CHECKPOINT_SIGNALS");
  }
};

TEST_F(SignalTest, ParseSignalList) {
  std::vector<int> v;
  ASSERT_TRUE(ParseSignalList("TERM, usr1,SIGUSR2,10", &v).ok());
  EXPECT_EQ(v, (std::vector<int>{SIGTERM, SIGUSR1, SIGUSR2, 10}));
  ASSERT_TRUE(ParseSignalList("none", &v).ok());
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(ParseSignalList("TERMX", &v).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSignalList("99", &v).code(), StatusCode::kInvalidArgument);
}

TEST_F(SignalTest, GraceFromOptionsEnvAndDefault) {
  SignalOptions o;
  GraceConfig g = ResolveGrace(o);
  EXPECT_DOUBLE_EQ(g.grace_s, 30);
  EXPECT_DOUBLE_EQ(g.reserve_s, 3);
  setenv("PREEMPT_GRACE_S", "120", 1);
  g = ResolveGrace(o);
  EXPECT_DOUBLE_EQ(g.grace_s, 120);
  EXPECT_DOUBLE_EQ(g.reserve_s, 12);
  EXPECT_EQ(g.grace_source, "env PREEMPT_GRACE_S");
  setenv("PREEMPT_GRACE_RESERVE_S", "5", 1);
  EXPECT_DOUBLE_EQ(ResolveGrace(o).reserve_s, 5);
  setenv("PREEMPT_GRACE_S", "1", 1);  // reserve never exceeds the grace
  EXPECT_DOUBLE_EQ(ResolveGrace(o).reserve_s, 1);
  unsetenv("PREEMPT_GRACE_RESERVE_S");
  EXPECT_DOUBLE_EQ(ResolveGrace(o).reserve_s, 0.5);  // max(1, 10%) capped at half
  setenv("PREEMPT_GRACE_S", "bogus", 1);
  EXPECT_DOUBLE_EQ(ResolveGrace(o).grace_s, 30);
  o.grace_s = 7;
  o.reserve_s = 2;
  g = ResolveGrace(o);
  EXPECT_DOUBLE_EQ(g.grace_s, 7);
  EXPECT_DOUBLE_EQ(g.reserve_s, 2);
}

TEST_F(SignalTest, RejectsBadConfigurations) {
  SignalOptions o;
  o.stop_signals = {SIGKILL};
  EXPECT_EQ(InstallSignalHandlers(o).code(), StatusCode::kInvalidArgument);
  o.stop_signals = {SIGUSR1};
  o.checkpoint_signals = {SIGUSR1};
  EXPECT_EQ(InstallSignalHandlers(o).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(SignalHandlersInstalled());
  ASSERT_TRUE(InstallSignalHandlers().ok());
  EXPECT_EQ(InstallSignalHandlers().code(), StatusCode::kInvalidArgument);
}

TEST_F(SignalTest, StopSignalRecordsTimeFlagAndEventFd) {
  SignalOptions o;
  o.grace_s = 10;
  o.reserve_s = 2;
  ASSERT_TRUE(InstallSignalHandlers(o).ok());
  EXPECT_FALSE(StopRequested());
  EXPECT_TRUE(StopDeadline().is_never());
  int64_t before_mono = NowNs(CLOCK_MONOTONIC), before_real = NowNs(CLOCK_REALTIME);
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // delivered before kill() returns (single thread)
  int64_t after_mono = NowNs(CLOCK_MONOTONIC), after_real = NowNs(CLOCK_REALTIME);
  ASSERT_TRUE(StopRequested());
  EXPECT_EQ(StopSignal(), SIGTERM);
  EXPECT_EQ(StopSignalCount(), 1);
  EXPECT_EQ(StopSenderPid(), getpid());
  EXPECT_GE(StopReceiptMonotonicNs(), before_mono);
  EXPECT_LE(StopReceiptMonotonicNs(), after_mono);
  EXPECT_GE(StopReceiptRealtimeNs(), before_real);
  EXPECT_LE(StopReceiptRealtimeNs(), after_real);
  EXPECT_TRUE(WaitReadable(SignalEventFd(), 1000));
  // deadline = receipt + 10 s − 2 s
  double left = StopDeadline().remaining_seconds();
  EXPECT_GT(left, 7.0);
  EXPECT_LE(left, 8.0);
  int64_t dl = std::chrono::duration_cast<std::chrono::nanoseconds>(StopDeadline().time().time_since_epoch()).count();
  EXPECT_EQ(dl, StopReceiptMonotonicNs() + 8'000'000'000LL);
}

TEST_F(SignalTest, SecondStopSignalKeepsFirstReceiptTime) {
  ASSERT_TRUE(InstallSignalHandlers().ok());
  raise(SIGTERM);
  int64_t first = StopReceiptMonotonicNs();
  usleep(2000);
  raise(SIGTERM);
  EXPECT_EQ(StopSignalCount(), 2);
  EXPECT_EQ(StopReceiptMonotonicNs(), first);
  EXPECT_TRUE(StopRequested());
}

TEST_F(SignalTest, CheckpointSignalDoesNotStop) {
  ASSERT_TRUE(InstallSignalHandlers().ok());
  uint64_t c0 = CheckpointRequestCount();
  raise(SIGUSR2);
  raise(SIGUSR2);
  EXPECT_EQ(CheckpointRequestCount(), c0 + 2);
  EXPECT_FALSE(StopRequested());
  EXPECT_TRUE(WaitReadable(SignalEventFd(), 1000));
}

TEST_F(SignalTest, ExtraStopSignalFromEnvironment) {
  setenv("PREEMPT_STOP_SIGNALS", "TERM,USR1", 1);
  setenv("PREEMPT_CHECKPOINT_SIGNALS", "none", 1);
  ASSERT_TRUE(InstallSignalHandlers().ok());
  raise(SIGUSR1);
  EXPECT_TRUE(StopRequested());
  EXPECT_EQ(StopSignal(), SIGUSR1);
}

std::atomic<int> g_user_calls{0};
void UserHandler(int) { g_user_calls.fetch_add(1); }

TEST_F(SignalTest, ChainsToPreviousHandlerAndUninstallRestoresIt) {
  struct sigaction user {}, saved{};
  user.sa_handler = &UserHandler;
  sigemptyset(&user.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &user, &saved), 0);
  g_user_calls = 0;
  SignalOptions o;
  o.stop_signals = {SIGUSR1};
  ASSERT_TRUE(InstallSignalHandlers(o).ok());
  raise(SIGUSR1);
  EXPECT_TRUE(StopRequested());
  EXPECT_EQ(g_user_calls.load(), 1);
  UninstallSignalHandlers();
  struct sigaction now {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &UserHandler);
  ClearSignalState();
  raise(SIGUSR1);
  EXPECT_EQ(g_user_calls.load(), 2);
  EXPECT_FALSE(StopRequested());  // preempt no longer sees it
  sigaction(SIGUSR1, &saved, nullptr);

  // chain = false: the previous handler is not called.
  ASSERT_EQ(sigaction(SIGUSR1, &user, nullptr), 0);
  o.chain = false;
  ASSERT_TRUE(InstallSignalHandlers(o).ok());
  raise(SIGUSR1);
  EXPECT_EQ(g_user_calls.load(), 2);
  UninstallSignalHandlers();
  sigaction(SIGUSR1, &saved, nullptr);
}

TEST_F(SignalTest, WatcherThreadWakesOnEventFd) {
  ASSERT_TRUE(InstallSignalHandlers().ok());
  std::atomic<bool> woke{false};
  std::thread watcher([&] {
    if (WaitReadable(SignalEventFd(), 10000)) woke = StopRequested();
  });
  usleep(10000);
  kill(getpid(), SIGTERM);  // any thread may take it
  watcher.join();
  EXPECT_TRUE(woke.load());
}

TEST_F(SignalTest, RequestStopFromCode) {
  ASSERT_TRUE(InstallSignalHandlers().ok());
  RequestStop();
  EXPECT_TRUE(StopRequested());
  EXPECT_EQ(StopSignal(), -1);
  EXPECT_FALSE(StopDeadline().is_never());
  ClearSignalState();
  EXPECT_FALSE(StopRequested());
}

// ---- real child processes ----------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int ready_fd = -1;
};

// Forks a child that installs handlers with `opts`, says "ready" on a pipe and runs `body`, whose
// return value is the exit code.
template <typename Body>
Child Spawn(SignalOptions opts, Body body) {
  int p[2];
  if (pipe(p) != 0) abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    if (!InstallSignalHandlers(opts).ok()) _exit(90);
    char c = 'r';
    if (write(p[1], &c, 1) != 1) _exit(91);
    _exit(body());
  }
  close(p[1]);
  char c;
  EXPECT_EQ(read(p[0], &c, 1), 1);
  close(p[0]);
  return Child{pid, -1};
}

int WaitStatus(pid_t pid) {
  int status = 0;
  for (int i = 0; i < 2000; ++i) {  // 20 s bound
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "child " << pid << " did not exit";
  return status;
}

TEST_F(SignalTest, ChildProcessStopsOnSigtermFromParent) {
  SignalOptions o;
  o.grace_s = 5;
  o.reserve_s = 1;
  pid_t parent = getpid();
  Child c = Spawn(o, [&] {
    if (!WaitReadable(SignalEventFd(), 10000)) return 2;
    if (!StopRequested() || StopSignal() != SIGTERM) return 3;
    if (StopSenderPid() != parent) return 4;
    double left = StopDeadline().remaining_seconds();
    if (!(left > 3 && left <= 4)) return 5;
    return 0;
  });
  ASSERT_EQ(kill(c.pid, SIGTERM), 0);
  int st = WaitStatus(c.pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST_F(SignalTest, ChildSecondSignalForcesExitWhenConfigured) {
  SignalOptions o;
  o.exit_after_signals = 2;
  Child c = Spawn(o, [] {
    for (int i = 0; i < 1000; ++i) usleep(10000);  // a "stuck" checkpoint
    return 7;
  });
  kill(c.pid, SIGTERM);
  usleep(50000);
  kill(c.pid, SIGTERM);
  int st = WaitStatus(c.pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 128 + SIGTERM);
}

TEST_F(SignalTest, ChildSecondSignalIgnoredByDefault) {
  Child c = Spawn(SignalOptions{}, [] {
    while (StopSignalCount() < 2) usleep(1000);
    return StopRequested() ? 0 : 1;
  });
  kill(c.pid, SIGTERM);
  usleep(20000);
  kill(c.pid, SIGTERM);
  int st = WaitStatus(c.pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST_F(SignalTest, ChildAfterUninstallDiesOfDefaultAction) {
  Child c = Spawn(SignalOptions{}, [] {
    UninstallSignalHandlers();
    for (int i = 0; i < 1000; ++i) usleep(10000);
    return 7;
  });
  usleep(50000);
  kill(c.pid, SIGTERM);
  int st = WaitStatus(c.pid);
  ASSERT_TRUE(WIFSIGNALED(st));
  EXPECT_EQ(WTERMSIG(st), SIGTERM);
}

}  // namespace
}  // namespace preempt
