#include "slurm/slurm_util.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace preempt::testing::slurm {

std::string Sh(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    if (rc) *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  if (rc) *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

bool ClusterUp() {
  const char* conf = std::getenv("SLURM_CONF");
  if (!conf || !*conf) return false;
  int rc = 0;
  Sh("scontrol ping >/dev/null 2>&1", &rc);
  return rc == 0;
}

std::string Sbatch(const std::string& args, const std::string& script) {
  int rc = 0;
  std::string out = Sh("sbatch --parsable " + args + " " + script + " 2>&1", &rc);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (rc != 0) {
    ADD_FAILURE() << "sbatch " << args << " " << script << ": " << out;
    return "";
  }
  return out.substr(0, out.find(';'));
}

std::string JobState(const std::string& id) {
  std::string s = Sh("squeue -h -t all -j " + id + " -o %T 2>/dev/null");
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string JobInfo(const std::string& id) { return Sh("scontrol show job " + id + " 2>/dev/null"); }

std::string JobField(const std::string& info, const std::string& key) {
  const std::string k = key + "=";
  size_t p = info.find(k);
  // Only at the start of a field (not e.g. "Restarts=" inside "NoRestarts=").
  while (p != std::string::npos && p > 0 && info[p - 1] != ' ' && info[p - 1] != '\n') p = info.find(k, p + 1);
  if (p == std::string::npos) return "";
  p += k.size();
  return info.substr(p, info.find_first_of(" \n", p) - p);
}

int JobRestarts(const std::string& id) {
  std::string v = JobField(JobInfo(id), "Restarts");
  return v.empty() ? -1 : std::atoi(v.c_str());
}

void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << body;
  chmod(path.c_str(), 0755);
}

std::vector<std::string> LinesStartingWith(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

long long ReadInt(const std::string& path) {
  std::ifstream in(path);
  long long v = -1, x;
  while (in >> x) v = x;
  return v;
}

void SleepS(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

}  // namespace preempt::testing::slurm
