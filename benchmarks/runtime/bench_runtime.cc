// bench_runtime — what a preemption costs, end to end, on real trainer processes.
//
//   bench_runtime [--json out.json] [--quick] [--dir /tmp/preempt-bench] [--sizes-mib 256,1024,4096]
//
// 1. SIGTERM → durable COMMIT: a 1-rank trainer (tests/runtime/trainer_worker.cc) holding S MiB of extra state is sent SIGTERM
//    mid-run; the runtime reports receipt → commit (signal_to_commit_s). Bound = S / fio write
//    bandwidth (measured in this run with fio O_DIRECT io_uring, bs 4 MiB, iodepth 8, end_fsync,
//    or taken from PREEMPT_BENCH_FIO_WRITE_GBPS when benchmarks/run.sh provides it);
//    target: latency ≤ 1.2 × bound + 100 ms.
// 2. per-step cost with nothing pending: mean time of Runtime::step_end and of the agreement
//    all-reduce, 1 rank and 2 gloo ranks, check_every 1 and 10.
// 3. overlapped snapshot: a trainer whose forward and backward (--compute-ms, longer than the
//    copy of its state, held as parameters) come between step_end and the update checkpoints
//    every 4 steps, with and without Runtime::before_update() before its update. Stall per
//    checkpoint, from the runtime's own "durable" log line: with the fence, what step_end and
//    the fence waited for the copy; without it, the whole copy inside step_end. The first
//    checkpoint (staging just prepared) is left out; target: with ≤ 10 % of without.
// --quick: 256 MiB only, fewer steps.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::string Slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, const std::vector<std::string>& env) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

double Num(const std::string& text, const std::string& key) {
  std::smatch m;
  std::regex re(key + "[ =]([0-9.eE+-]+)");
  if (std::regex_search(text, m, re)) return std::stod(m[1]);
  return -1;
}

double FioWriteGBps(const std::string& dir, int mib) {
  std::string file = dir + "/bench-runtime-fio.dat";
  std::string cmd = "fio --name=seq --filename=" + file + " --size=" + std::to_string(mib) +
                    "M --bs=4M --iodepth=8 --direct=1 --ioengine=io_uring --rw=write --end_fsync=1 "
                    "--output-format=terse --terse-version=3 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[8192];
  std::string out;
  while (fgets(buf, sizeof(buf), p)) out += buf;
  pclose(p);
  fs::remove(file);
  // terse v3: field 48 (1-based) is write bandwidth in KiB/s.
  std::vector<std::string> f;
  std::stringstream ss(out);
  std::string tok;
  while (std::getline(ss, tok, ';')) f.push_back(tok);
  if (f.size() < 48) return -1;
  return std::stod(f[47]) * 1024 / 1e9;
}

// Stall of every checkpoint the runtime logged ("checkpoint step N durable: ..., stall S s, ...").
std::vector<double> LoggedStalls(const std::string& text) {
  std::vector<double> out;
  std::regex re("durable: [^\\n]*?stall ([0-9.eE+-]+) s");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back(std::stod((*it)[1]));
  return out;
}

double MedianOf(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Section 3: returns whether the target was met.
bool OverlapSection(const std::string& trainer, const std::string& dir, bool quick, std::map<std::string, double>* out) {
  const int mib = quick ? 64 : 512, steps = quick ? 13 : 29, compute_ms = quick ? 150 : 400;
  double with_s = -1, without_s = -1;
  for (int fence : {1, 0}) {
    const std::string ck = dir + "/rt-overlap-" + std::to_string(fence);
    fs::remove_all(ck);
    fs::create_directories(ck);
    const std::string log = ck + ".log";
    const pid_t pid = Spawn({trainer, "--dir", ck, "--steps", std::to_string(steps), "--every", "4", "--extra-mib",
                             std::to_string(mib), "--extra-param", "1", "--compute-ms", std::to_string(compute_ms),
                             "--fence", std::to_string(fence)},
                            log, {"PREEMPT_LOG_LEVEL=info"});
    const int code = Wait(pid);
    std::vector<double> stalls = LoggedStalls(Slurp(log));
    if (code != 0 || stalls.size() < 2) {
      std::printf("overlapped snapshot: the trainer (fence %d) exited with %d after %zu checkpoints (see %s)\n", fence,
                  code, stalls.size(), log.c_str());
      return false;
    }
    stalls.erase(stalls.begin());
    (fence ? with_s : without_s) = MedianOf(stalls);
    fs::remove_all(ck);
    fs::remove(log);
  }
  const double ratio = without_s > 0 ? with_s / without_s : -1;
  const bool pass = ratio >= 0 && ratio <= 0.10;
  (*out)["overlap_state_mib"] = mib;
  (*out)["overlap_compute_ms"] = compute_ms;
  (*out)["overlap_stall_s_with_fence"] = with_s;
  (*out)["overlap_stall_s_without_fence"] = without_s;
  (*out)["overlap_stall_ratio"] = ratio;
  std::printf("overlapped snapshot, %d MiB, %d ms of compute per step: stall per checkpoint %.4f s with the fence, "
              "%.4f s without (%.3f x; target <= 0.10: %s)\n", mib, compute_ms, with_s, without_s, ratio,
              pass ? "PASS" : "MISS");
  return pass;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string json_path, dir = std::getenv("PREEMPT_BENCH_DIR") ? std::getenv("PREEMPT_BENCH_DIR") : "/tmp/preempt-bench";
  bool quick = std::getenv("PREEMPT_BENCH_QUICK") != nullptr;
  std::string sizes_arg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--sizes-mib" && i + 1 < argc) sizes_arg = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_runtime [--json F] [--quick] [--dir D] [--sizes-mib N,M]\n"
                           "bench_runtime: unknown flag or missing value: %s\n", a.c_str());
      return 2;
    }
  }
  std::vector<int> sizes = quick ? std::vector<int>{256} : std::vector<int>{256, 1024, 4096};
  if (!sizes_arg.empty()) {
    sizes.clear();
    std::stringstream ss(sizes_arg);
    std::string t;
    while (std::getline(ss, t, ',')) {
      char* end = nullptr;
      const long v = std::strtol(t.c_str(), &end, 10);
      if (t.empty() || *end != '\0' || v < 1 || v > 65536) {
        std::fprintf(stderr, "bench_runtime: --sizes-mib: '%s' is not a whole number of MiB in [1, 65536]\n", t.c_str());
        return 2;
      }
      sizes.push_back(static_cast<int>(v));
    }
  }
  fs::create_directories(dir);
  std::string trainer = PREEMPT_TRAINER_PATH;
  std::map<std::string, double> out;
  std::map<std::string, std::string> sout;

  double fio = -1;
  if (const char* e = std::getenv("PREEMPT_BENCH_FIO_WRITE_GBPS")) {
    char* end = nullptr;
    fio = std::strtod(e, &end);
    if (*e == '\0' || *end != '\0' || !(fio > 0 && fio < 1e4)) {
      std::fprintf(stderr, "bench_runtime: PREEMPT_BENCH_FIO_WRITE_GBPS: '%s' is not a bandwidth in GB/s\n", e);
      return 2;
    }
  }
  if (!(fio > 0)) {
    fio = FioWriteGBps(dir, quick ? 256 : 1024);
    sout["fio_source"] = "this run (fio O_DIRECT io_uring bs=4M iodepth=8 end_fsync)";
  } else {
    sout["fio_source"] = "PREEMPT_BENCH_FIO_WRITE_GBPS (benchmarks/run.sh)";
  }
  out["fio_write_gbps"] = fio;
  std::printf("fio write bandwidth: %.3f GB/s (%s)\n", fio, sout["fio_source"].c_str());

  // ---- 1. SIGTERM → COMMIT --------------------------------------------------------------------
  bool all_pass = true;
  for (int mib : sizes) {
    std::string ck = dir + "/rt-sigterm-" + std::to_string(mib);
    fs::remove_all(ck);
    fs::create_directories(ck);
    std::string log = dir + "/rt-sigterm-" + std::to_string(mib) + ".log";
    pid_t pid = Spawn({trainer, "--dir", ck, "--steps", "100000", "--sleep-ms", "10", "--extra-mib", std::to_string(mib),
                       "--staging-buffers", "1"},
                      log, {"PREEMPT_GRACE_S=600", "PREEMPT_LOG_LEVEL=info"});
    // A few steps first: the runtime reserves (allocates + pre-faults) staging after step 0.
    for (int i = 0; i < 60000; ++i) {
      std::ifstream in(ck + "/.rank0.progress");
      int64_t s = -1;
      in >> s;
      if (s >= 5) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto t0 = std::chrono::steady_clock::now();
    kill(pid, SIGTERM);
    int code = Wait(pid);
    double exit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string text = Slurp(log);
    double lat = Num(text, "signal_to_commit_s");
    double stall = Num(text, "stall");
    double bytes = mib * 1048576.0;
    double bound = bytes / (fio * 1e9);
    double target = 1.2 * bound + 0.1;
    bool pass = code == 143 && lat > 0 && lat <= target;
    all_pass = all_pass && pass;
    std::string k = std::to_string(mib) + "mib";
    out["sigterm_to_commit_s_" + k] = lat;
    out["sigterm_to_exit_s_" + k] = exit_s;
    out["bound_s_" + k] = bound;
    out["target_s_" + k] = target;
    out["ratio_vs_bound_" + k] = lat / bound;
    out["exit_code_" + k] = code;
    out["stall_s_" + k] = stall;
    std::printf("SIGTERM→COMMIT %5d MiB: %.3f s (exit after %.3f s, code %d); bound %.3f s, target ≤ %.3f s: %s\n", mib,
                lat, exit_s, code, bound, target, pass ? "PASS" : "MISS");
    fs::remove_all(ck);
  }

  // ---- 2. per-step cost with nothing pending -------------------------------------------------
  int steps = quick ? 300 : 2000;
  for (int world : {1, 2}) {
    for (int variant = 0; variant < 4; ++variant) {
      int every = variant % 2 == 0 ? 1 : 10;
      bool pipelined = variant >= 2;
      if (world == 1 && variant > 0) continue;
      std::string ck = dir + "/rt-step-" + std::to_string(world) + "-" + std::to_string(every);
      fs::remove_all(ck);
      fs::create_directories(ck);
      std::string store = ck + ".rdzv";
      fs::remove(store);
      std::vector<pid_t> pids;
      for (int r = 0; r < world; ++r) {
        pids.push_back(Spawn({trainer, "--rank", std::to_string(r), "--world", std::to_string(world), "--rendezvous",
                              store, "--dir", ck, "--steps", std::to_string(steps), "--check-every",
                              std::to_string(every), "--pipelined", pipelined ? "1" : "0"},
                             ck + ".rank" + std::to_string(r) + ".log", {"PREEMPT_LOG_LEVEL=warn"}));
      }
      for (pid_t p : pids) Wait(p);
      std::string text = Slurp(ck + ".rank0.log");
      std::string k = "w" + std::to_string(world) + "_k" + std::to_string(every) + (pipelined ? "_pipelined" : "");
      out["step_end_mean_us_" + k] = Num(text, "step_end_mean_us");
      out["check_mean_us_" + k] = Num(text, "mean_check_us");
      std::printf("per-step cost, %d rank(s), check_every %2d%s: step_end %.2f µs (%.2f µs per check step)\n", world,
                  every, pipelined ? ", pipelined" : "", out["step_end_mean_us_" + k], out["check_mean_us_" + k]);
      fs::remove_all(ck);
      fs::remove(store);
    }
  }
  // ---- 3. overlapped snapshot -----------------------------------------------------------------
  all_pass = OverlapSection(trainer, dir, quick, &out) && all_pass;
  out["all_targets_met"] = all_pass ? 1 : 0;
  if (!json_path.empty()) {
    std::ofstream j(json_path);
    j << "{\n  \"bench\": \"runtime\",\n";
    for (auto& [k, v] : sout) j << "  \"" << k << "\": \"" << v << "\",\n";
    size_t i = 0;
    for (auto& [k, v] : out) j << "  \"" << k << "\": " << v << (++i < out.size() ? ",\n" : "\n");
    j << "}\n";
  }
  return 0;
}
