// Spawning real worker processes for multi-process tests (fork + execv, stdout/stderr to a file).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace preempt::testing {

inline pid_t SpawnProcess(const std::vector<std::string>& argv, const std::string& log_path,
                          const std::vector<std::string>& env = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `timeout_s`; on timeout kills the process (SIGKILL) and returns -1.
// Otherwise the raw wait status.
inline int WaitProcess(pid_t pid, double timeout_s, double* waited_s = nullptr) {
  auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == pid) {
      if (waited_s) *waited_s = dt;
      return status;
    }
    if (dt > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      if (waited_s) *waited_s = dt;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

inline int ExitCode(int status) { return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

}  // namespace preempt::testing
