// Synthetic traces and the offered-demand measure (simulator.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "trace_util.h"

namespace preempt::sched {
namespace {

// Portable PRNG helpers (std::*_distribution differ across standard libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  double exponential(double mean) { return -mean * std::log(1.0 - uniform()); }
  double normal() {
    double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }

 private:
  uint64_t s_;
};

// Checkpoint model from a job's state size (docs/sched.md): NVMe persist at 2 GB/s plus a fixed

}  // namespace

void ApplyCheckpointModel(double bytes, double interval_s, TraceJob* j) {
  j->ckpt_interval_s = interval_s;
  j->ckpt_drain_s = 0.2;
  j->ckpt_stall_s = bytes / 20e9;
  j->ckpt_persist_s = 0.5 + bytes / 2e9;
  j->restore_s = 10 + bytes / 4e9;
}

Trace SyntheticTrace(const SyntheticOptions& o) {
  Trace t;
  t.name = "synthetic-seed" + std::to_string(o.seed);
  for (int i = 0; i < o.nodes; ++i) {
    char name[32];
    snprintf(name, sizeof name, "node-%03d", i);
    t.nodes.push_back({name, o.gpus_per_node});
  }
  Rng rng(o.seed);
  const int gpu_choices[] = {1, 2, 4, 8};
  const double gpu_cdf[] = {0.4, 0.6, 0.8, 1.0};
  double mean_gpus = 0.4 * 1 + 0.2 * 2 + 0.2 * 4 + 0.2 * 8;
  double mean_dur = o.median_duration_s * std::exp(o.duration_sigma * o.duration_sigma / 2);
  double capacity = static_cast<double>(o.nodes) * o.gpus_per_node;
  double rate = o.load * capacity / (mean_gpus * mean_dur);  // arrivals per second
  double now = 0;
  for (int i = 0; i < o.jobs; ++i) {
    TraceJob j;
    char id[32];
    snprintf(id, sizeof id, "job-%05d", i);
    j.id = id;
    now += rng.exponential(1.0 / rate);
    j.submit = std::round(now);
    double u = rng.uniform();
    j.cls = u < o.frac_high ? PriorityClass::kHigh
                            : (u < o.frac_high + o.frac_medium ? PriorityClass::kMedium : PriorityClass::kLow);
    j.queue = std::string(PriorityClassName(j.cls)) + "-team" + std::to_string(rng.next() % 3);
    double g = rng.uniform();
    j.gpus = 8;
    for (int k = 0; k < 4; ++k)
      if (g < gpu_cdf[k]) {
        j.gpus = gpu_choices[k];
        break;
      }
    j.gpus = std::min(j.gpus, o.gpus_per_node);
    j.duration_s = std::round(std::clamp(o.median_duration_s * std::exp(o.duration_sigma * rng.normal()), 60.0,
                                         o.max_duration_s));
    double bytes = j.gpus * rng.uniform(2e9, 16e9);      // model + optimizer state per GPU
    const double intervals[] = {600, 1200, 1800};
    ApplyCheckpointModel(bytes, intervals[rng.next() % 3], &j);
    t.jobs.push_back(std::move(j));
  }
  return t;
}

namespace {
struct OfferedCurve {
  int peak = 0;
  double over_s = 0, excess_gpu_s = 0;  // above `capacity`
};
// The GPUs held at once by the jobs `keep` selects, each from submit to submit + duration (ends
// before starts at the same instant): its peak, and the time and GPU-seconds above `capacity`.
template <typename Keep>
OfferedCurve Offered(const Trace& trace, int capacity, Keep keep) {
  std::vector<std::pair<double, int>> ev;
  for (const auto& j : trace.jobs) {
    if (!keep(j)) continue;
    ev.emplace_back(j.submit, j.gpus);
    ev.emplace_back(j.submit + j.duration_s, -j.gpus);
  }
  std::sort(ev.begin(), ev.end());
  OfferedCurve c;
  int cur = 0;
  double prev = ev.empty() ? 0 : ev.front().first;
  for (const auto& e : ev) {
    if (cur > capacity) {
      c.over_s += e.first - prev;
      c.excess_gpu_s += (e.first - prev) * (cur - capacity);
    }
    prev = e.first;
    c.peak = std::max(c.peak, cur += e.second);
  }
  return c;
}
}  // namespace

OfferedDemand MeasureOfferedDemand(const Trace& trace) {
  OfferedDemand d;
  for (const auto& n : trace.nodes) d.capacity_gpus += n.gpus;
  d.peak_gpus = Offered(trace, d.capacity_gpus, [](const TraceJob&) { return true; }).peak;
  for (int c = 0; c < kNumClasses; ++c) {
    OfferedCurve oc = Offered(trace, d.capacity_gpus, [c](const TraceJob& j) { return static_cast<int>(j.cls) == c; });
    d.peak_gpus_by_class[c] = oc.peak;
    if (c == static_cast<int>(PriorityClass::kHigh)) {
      d.high_over_capacity_s = oc.over_s;
      d.high_excess_gpu_s = oc.excess_gpu_s;
    }
  }
  return d;
}

}  // namespace preempt::sched
