#include "decide_latency.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace preempt::sched::bench {

ClusterState BigState(int nodes, int jobs, uint64_t seed, bool fragmented) {
  ClusterState st;
  st.now = 1e6;
  uint64_t x = seed;
  auto rnd = [&]() {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(x >> 11) * 0x1.0p-53;
  };
  for (int i = 0; i < nodes; ++i) st.nodes.push_back({"n" + std::to_string(i), 8});
  const int sizes[] = {1, 2, 4, 8};
  int id = 0;
  for (int n = 0; n < nodes && id < jobs; ++n) {
    int left = 8;
    while (left > 0 && id < jobs) {
      int g = sizes[static_cast<int>(rnd() * 4)];
      while (g > left) g /= 2;
      const bool high = fragmented && left == 8;
      if (high) g = 1;
      Job j;
      j.id = "r" + std::to_string(id++);
      j.cls = high ? PriorityClass::kHigh : rnd() < 0.7 ? PriorityClass::kLow : PriorityClass::kMedium;
      j.queue = "q" + std::to_string(id % 5);
      j.gpus = g;
      j.node = n;
      j.phase = JobPhase::kRunning;
      j.start_time = st.now - 1000 - rnd() * 50000;
      j.submit_time = j.start_time - 100;
      Hints h;
      h.job = j.id;
      h.updated_unix = st.now - rnd() * 30;
      h.lost_work_s = rnd() * 1800;
      h.cost.persist_s = 1 + rnd() * 30;
      h.cost.stall_s = 0.5;
      h.cost.drain_s = 0.1;
      if (rnd() > 0.05) j.hints = h;  // 5% without hints
      left -= g;
      st.jobs.push_back(std::move(j));
    }
  }
  while (id < jobs) {
    Job j;
    j.id = "p" + std::to_string(id++);
    j.cls = rnd() < 0.1 ? PriorityClass::kHigh : (rnd() < 0.5 ? PriorityClass::kMedium : PriorityClass::kLow);
    j.gpus = sizes[static_cast<int>(rnd() * 4)];
    j.submit_time = st.now - rnd() * 3600;
    st.jobs.push_back(std::move(j));
  }
  return st;
}

namespace {

double ThreadCpuMs() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

}  // namespace

Latency MeasureDecide(const PolicyOptions& p, int reps, bool fragmented) {
  ClusterState st = BigState(1000, 10000, 42, fragmented);
  Latency l;
  for (const auto& j : st.jobs) {
    if (j.phase == JobPhase::kPending) {
      l.pending++;
      l.pending_high += j.cls == PriorityClass::kHigh;
    } else {
      l.running++;
    }
  }
  std::vector<double> ms, cpu;
  for (int i = 0; i < reps; ++i) {
    double c0 = ThreadCpuMs();
    auto t0 = std::chrono::steady_clock::now();
    Decisions d = Decide(st, p);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(ThreadCpuMs() - c0);
    l.actions = static_cast<int>(d.actions.size());
  }
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  l.cpu_median_ms = cpu[cpu.size() / 2];
  l.cpu_p99_ms = cpu[std::min(cpu.size() - 1, static_cast<size_t>(std::ceil(0.99 * cpu.size())) - 1)];
  l.median_ms = ms[ms.size() / 2];
  l.p99_ms = ms[std::min(ms.size() - 1, static_cast<size_t>(std::ceil(0.99 * ms.size())) - 1)];
  l.max_ms = ms.back();
  return l;
}

}  // namespace preempt::sched::bench
