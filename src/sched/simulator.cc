#include "preempt/sched/simulator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_map>

namespace preempt::sched {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Portable PRNG helpers (std::*_distribution differ across standard libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL) {}
  uint64_t Next() {  // splitmix64
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Uniform(double a, double b) { return a + (b - a) * Uniform(); }
  double Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }
  double Normal() {
    double u1 = 1.0 - Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }

 private:
  uint64_t s_;
};

// Checkpoint model from a job's state size (docs/sched.md): NVMe persist at 2 GB/s plus a fixed
// 0.5 s commit, staging copy at 20 GB/s, restore read at 4 GB/s plus 10 s process start.
void ApplyCheckpointModel(double bytes, double interval_s, TraceJob* j) {
  j->ckpt_interval_s = interval_s;
  j->ckpt_drain_s = 0.2;
  j->ckpt_stall_s = bytes / 20e9;
  j->ckpt_persist_s = 0.5 + bytes / 2e9;
  j->restore_s = 10 + bytes / 4e9;
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size()) - 1;
  return v[rank];
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

constexpr int kMaxTraceGpus = 1 << 16;
constexpr double kMaxTraceSeconds = 1e10;  // ~317 years

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && std::isfinite(*out);
}

}  // namespace

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
    now += rng.Exponential(1.0 / rate);
    j.submit = std::round(now);
    double u = rng.Uniform();
    j.cls = u < o.frac_high ? PriorityClass::kHigh
                            : (u < o.frac_high + o.frac_medium ? PriorityClass::kMedium : PriorityClass::kLow);
    j.queue = std::string(PriorityClassName(j.cls)) + "-team" + std::to_string(rng.Next() % 3);
    double g = rng.Uniform();
    j.gpus = 8;
    for (int k = 0; k < 4; ++k)
      if (g < gpu_cdf[k]) {
        j.gpus = gpu_choices[k];
        break;
      }
    j.gpus = std::min(j.gpus, o.gpus_per_node);
    j.duration_s = std::round(std::clamp(o.median_duration_s * std::exp(o.duration_sigma * rng.Normal()), 60.0,
                                         o.max_duration_s));
    double bytes = j.gpus * rng.Uniform(2e9, 16e9);      // model + optimizer state per GPU
    const double intervals[] = {600, 1200, 1800};
    ApplyCheckpointModel(bytes, intervals[rng.Next() % 3], &j);
    t.jobs.push_back(std::move(j));
  }
  return t;
}

Status LoadTraceCsv(const std::string& path, Trace* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kNotFound, "trace " + path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseTraceCsv(text.str(), path, out);
}

Status ParseTraceCsv(const std::string& text, const std::string& path, Trace* out) {
  std::istringstream in(text);
  Trace t;
  t.name = path;
  std::string line;
  int lineno = 0;
  bool header = false;
  std::map<std::string, int> id_line;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    auto f = SplitCsv(line);
    if (!header) {
      if (f.empty() || f[0] != "id")
        return Status(StatusCode::kCorruption, "trace " + path + ": line 1: expected header starting with 'id'");
      header = true;
      continue;
    }
    auto err = [&](const std::string& m) {
      return Status(StatusCode::kCorruption, "trace " + path + ": line " + std::to_string(lineno) + ": " + m);
    };
    if (f.size() != 11) return err("expected 11 fields, got " + std::to_string(f.size()));
    TraceJob j;
    j.id = f[0];
    if (j.id.empty()) return err("field 'id': empty");
    auto [it, fresh] = id_line.emplace(j.id, lineno);
    if (!fresh) return err("field 'id': job '" + j.id + "' already on line " + std::to_string(it->second));
    double v[11];
    const char* names[] = {"", "submit_s", "", "", "gpus", "duration_s", "ckpt_interval_s", "ckpt_drain_s",
                           "ckpt_stall_s", "ckpt_persist_s", "restore_s"};
    for (int k : {1, 4, 5, 6, 7, 8, 9, 10}) {
      if (!ParseDouble(f[k], &v[k]) || v[k] < 0) return err(std::string("field '") + names[k] + "': not a number >= 0");
    }
    if (!ParsePriorityClass(f[2], &j.cls)) return err("field 'class': expected low|medium|high");
    j.submit = v[1];
    j.queue = f[3].empty() ? "default" : f[3];
    if (v[4] < 1 || v[4] > kMaxTraceGpus || v[4] != std::floor(v[4]))
      return err("field 'gpus': must be a whole number in [1, " + std::to_string(kMaxTraceGpus) + "]");
    j.gpus = static_cast<int>(v[4]);
    for (int k : {1, 5, 7, 8, 9, 10})
      if (v[k] > kMaxTraceSeconds) return err(std::string("field '") + names[k] + "': larger than 1e10 s");
    if (v[6] != 0 && (v[6] < 1 || v[6] > kMaxTraceSeconds))
      return err("field 'ckpt_interval_s': must be 0 (default 600 s) or in [1, 1e10] s");
    j.duration_s = v[5];
    j.ckpt_interval_s = v[6] > 0 ? v[6] : 600;
    j.ckpt_drain_s = v[7];
    j.ckpt_stall_s = v[8];
    j.ckpt_persist_s = v[9];
    j.restore_s = v[10];
    t.jobs.push_back(std::move(j));
  }
  if (!header) return Status(StatusCode::kCorruption, "trace " + path + ": empty (no header)");
  *out = std::move(t);
  return Status::OK();
}

Status WriteTraceCsv(const std::string& path, const Trace& t) {
  std::ofstream o(path);
  if (!o) return Status(StatusCode::kIoError, "trace " + path + ": cannot open for write");
  o << "id,submit_s,class,queue,gpus,duration_s,ckpt_interval_s,ckpt_drain_s,ckpt_stall_s,ckpt_persist_s,restore_s\n";
  char buf[512];
  for (const auto& j : t.jobs) {
    snprintf(buf, sizeof buf, "%s,%.3f,%s,%s,%d,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f\n", j.id.c_str(), j.submit,
             PriorityClassName(j.cls), j.queue.c_str(), j.gpus, j.duration_s, j.ckpt_interval_s, j.ckpt_drain_s,
             j.ckpt_stall_s, j.ckpt_persist_s, j.restore_s);
    o << buf;
  }
  o.flush();
  if (!o) return Status(StatusCode::kIoError, "trace " + path + ": write failed");
  return Status::OK();
}

Status LoadAlibabaTrace(const AlibabaOptions& opt, Trace* out) {
  std::string path = opt.dir + "/pods.csv";
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, "alibaba trace " + path + ": cannot open");
  std::string line;
  if (!std::getline(in, line)) return Status(StatusCode::kCorruption, "alibaba trace " + path + ": empty");
  auto head = SplitCsv(line);
  auto col = [&](const char* name) {
    for (size_t i = 0; i < head.size(); ++i)
      if (head[i] == name) return static_cast<int>(i);
    return -1;
  };
  int c_name = col("name"), c_mem = col("memory_mib"), c_gpu = col("num_gpu"), c_qos = col("qos"),
      c_create = col("creation_time"), c_del = col("deletion_time"), c_sched = col("scheduled_time");
  if (std::min({c_name, c_mem, c_gpu, c_qos, c_create, c_del, c_sched}) < 0)
    return Status(StatusCode::kCorruption, "alibaba trace " + path + ": missing a required column");
  Trace t;
  t.name = "alibaba-gpu-2023";
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    auto f = SplitCsv(line);
    if (f.size() != head.size()) {
      return Status(StatusCode::kCorruption, "alibaba trace " + path + ": line " + std::to_string(lineno) +
                                                 ": expected " + std::to_string(head.size()) + " fields");
    }
    double gpus, create, del, sched, mem;
    if (f[c_sched].empty()) continue;  // never ran
    if (!ParseDouble(f[c_gpu], &gpus) || !ParseDouble(f[c_create], &create) || !ParseDouble(f[c_del], &del) ||
        !ParseDouble(f[c_sched], &sched) || !ParseDouble(f[c_mem], &mem))
      return Status(StatusCode::kCorruption, "alibaba trace " + path + ": line " + std::to_string(lineno) +
                                                 ": unparsable number");
    if (gpus < 1 || del <= sched) continue;  // CPU-only pod, or no run time
    TraceJob j;
    j.id = f[c_name];
    j.submit = create;
    const std::string& q = f[c_qos];
    j.cls = (q == "LS" || q == "Guaranteed") ? PriorityClass::kHigh
                                             : (q == "Burstable" ? PriorityClass::kMedium : PriorityClass::kLow);
    j.queue = q;
    j.gpus = static_cast<int>(gpus);  // fractional (shared) GPUs count as one whole GPU
    j.duration_s = del - sched;
    ApplyCheckpointModel(mem * 1048576.0, 600, &j);
    t.jobs.push_back(std::move(j));
  }
  std::stable_sort(t.jobs.begin(), t.jobs.end(), [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
  if (opt.max_jobs > 0 && static_cast<int>(t.jobs.size()) > opt.max_jobs) t.jobs.resize(opt.max_jobs);
  int capacity = opt.gpus;
  if (capacity <= 0)
    capacity = static_cast<int>(std::ceil(MeasureOfferedDemand(t).peak_gpus / std::max(1.0, opt.overload)));
  int nodes = std::max(1, (capacity + 7) / 8);
  for (int i = 0; i < nodes; ++i) {
    char name[32];
    snprintf(name, sizeof name, "openb-%03d", i);
    t.nodes.push_back({name, 8});
  }
  *out = std::move(t);
  return Status::OK();
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

bool PolicyByName(const std::string& name, PolicyConfig* out) {
  if (name == "fcfs") *out = FcfsPolicy();
  else if (name == "k8s") *out = KubernetesPolicy();
  else if (name == "hint-norules") *out = HintAwareNoRulesPolicy();
  else if (name == "hint") *out = PolicyConfig();
  else if (name == "hint-ckpt") {  // checkpoint-then-evict only: no SIGTERM save, kill-now or tolerable-wait rules
    *out = PolicyConfig();
    out->sigterm_save = false;
    out->kill_now_max_lost_s = 0;
    out->high_tolerable_wait_s = 0;
  }
  else if (name == "hint-nodefrag") {  // hint without moves of high jobs (defragmentation)
    *out = PolicyConfig();
    out->defrag_max_moves = 0;
  }
  else if (name == "hint-refill") {
    *out = PolicyConfig();
    out->refill_headroom = true;
  }
  else return false;
  return true;
}

namespace {

struct SimJob {
  const TraceJob* t = nullptr;
  int active = -1;            // index in ClusterState::jobs, -1 before arrival / after finish
  int gen = 0;                // bumps on every start/stop, invalidates old events
  double p0 = 0;              // committed progress when the current run started
  double seg_start = 0, seg_restore = 0;
  double extra_progress = -1, extra_time = kInf;  // requested checkpoint, or the save on SIGTERM
  double stop_at = kInf;      // training stopped here (SIGTERM: the stop snapshot)
  double grace = 0;           // termination grace period
  double exit_at = -kInf;     // after SIGTERM: when the process is gone (saved, or killed)
  double first_start = -1, finish = -1;
  double allocated_gpu_s = 0, lost_gpu_s = 0;
  // lost_gpu_s split: restores paid, trained-but-uncommitted progress thrown away, and time
  // between the stop (SIGTERM) and the GPUs being free (the save inside the grace + teardown).
  double lost_restore_gpu_s = 0, lost_discarded_gpu_s = 0, lost_stopped_gpu_s = 0;
  double last_preempted = -kInf;
  double moved_at = -1;       // a move (defragmentation) ended its run here; -1 once restarted
  double last_moved = -kInf;
  int preemptions = 0;
  bool placed = false;
  int node = -1;

  // A requested checkpoint pauses training for its stall: [stall_at, stall_at + stall_d).
  double stall_at = kInf, stall_d = 0;

  // Seconds of training in this run up to `now`: after the restore, minus the stall, until the stop.
  double Trained(double now) const {
    double x = std::min(now, stop_at);
    double stalled = std::min(std::max(0.0, x - stall_at), stall_d);
    return std::max(0.0, x - seg_start - seg_restore - stalled);
  }
  double Progress(double now) const { return std::min(p0 + Trained(now), t->duration_s); }
  // When this run reaches progress q (>= p0), training without a stop.
  double TimeAt(double q) const {
    double when = seg_start + seg_restore + (q - p0);
    return when > stall_at ? when + stall_d : when;
  }
  double Periodic(double now) const {
    double p = Progress(now) - t->ckpt_persist_s;
    if (p <= 0) return p0;
    double c = std::floor(p / t->ckpt_interval_s) * t->ckpt_interval_s;
    return std::max(p0, c);
  }
  double Committed(double now) const {
    double c = Periodic(now);
    if (now >= extra_time) c = std::max(c, extra_progress);
    return c;
  }
  double CommitTime(double now) const {
    double c = Committed(now);
    if (now >= extra_time && extra_progress >= c) return extra_time;
    if (c <= p0) return seg_start + seg_restore;
    return TimeAt(c + t->ckpt_persist_s);
  }
};

enum class EvType { kArrival = 0, kFinish = 1, kCkptDone = 2, kEvictDone = 3, kWake = 4 };
struct Event {
  double time;
  uint64_t seq;
  EvType type;
  int job;
  int gen;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

}  // namespace

Status ValidateTrace(const Trace& trace) {
  auto bad = [&](const std::string& m) { return Status(StatusCode::kInvalidArgument, "trace " + trace.name + ": " + m); };
  if (trace.nodes.empty()) return bad("no nodes");
  std::set<std::string> names;
  for (const auto& n : trace.nodes) {
    if (n.gpus < 0 || n.gpus > kMaxTraceGpus) return bad("node " + n.name + ": gpus out of range");
    if (!names.insert(n.name).second) return bad("node " + n.name + " twice");
  }
  std::set<std::string> ids;
  for (const auto& j : trace.jobs) {
    if (!ids.insert(j.id).second) return bad("job " + j.id + " twice (job ids must be unique)");
    if (j.gpus < 1 || j.gpus > kMaxTraceGpus) return bad("job " + j.id + ": gpus out of range");
    for (double v : {j.submit, j.duration_s, j.ckpt_drain_s, j.ckpt_stall_s, j.ckpt_persist_s, j.restore_s})
      if (!(v >= 0 && v <= kMaxTraceSeconds)) return bad("job " + j.id + ": a time is negative, not finite or > 1e10 s");
    if (!(j.ckpt_interval_s >= 1 && j.ckpt_interval_s <= kMaxTraceSeconds))
      return bad("job " + j.id + ": ckpt_interval_s must be in [1, 1e10] s");
  }
  return Status::OK();
}

Status Simulate(const Trace& trace, const PolicyConfig& policy, const SimOptions& opt, SimResult* out) {
  PREEMPT_RETURN_IF_ERROR(ValidateTrace(trace));
  SimResult res;
  SimMetrics& m = res.metrics;
  m.policy = PolicyKindName(policy.kind);
  m.jobs = static_cast<int>(trace.jobs.size());
  int total_gpus = 0, max_node = 0;
  for (const auto& n : trace.nodes) {
    total_gpus += n.gpus;
    max_node = std::max(max_node, n.gpus);
  }

  std::vector<SimJob> sj(trace.jobs.size());
  ClusterState cs;
  cs.nodes = trace.nodes;
  std::vector<int> used(trace.nodes.size(), 0);
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q;
  uint64_t seq = 0;
  auto push = [&](double time, EvType type, int job, int gen) { q.push({time, seq++, type, job, gen}); };
  for (size_t i = 0; i < trace.jobs.size(); ++i) {
    sj[i].t = &trace.jobs[i];
    const TraceJob& tj = trace.jobs[i];
    sj[i].grace = opt.grace_period_s > 0
                      ? opt.grace_period_s
                      : opt.grace_factor * (tj.ckpt_drain_s + tj.ckpt_stall_s + tj.ckpt_persist_s) + opt.grace_extra_s;
    if (trace.jobs[i].gpus > max_node) {
      res.violations.push_back("job " + trace.jobs[i].id + " needs more GPUs than any node; skipped");
      continue;
    }
    push(trace.jobs[i].submit, EvType::kArrival, static_cast<int>(i), 0);
  }
  std::set<double> wakes;
  int64_t next_request = 0;
  double first_submit = kInf, last_event = 0;
  double decide_total_us = 0;

  auto violation = [&](const std::string& s) {
    if (res.violations.size() < 20) res.violations.push_back(s);
  };
  auto deactivate = [&](int i) {
    int a = sj[i].active;
    int last = static_cast<int>(cs.jobs.size()) - 1;
    if (a != last) {
      cs.jobs[a] = std::move(cs.jobs[last]);
      sj[cs.jobs[a].user].active = a;
    }
    cs.jobs.pop_back();
    sj[i].active = -1;
  };
  auto release = [&](int i) {
    SimJob& s = sj[i];
    if (s.placed) used[s.node] -= s.t->gpus;
    s.placed = false;
    s.node = -1;
  };
  // Ends the current run at `now` (finish or eviction) and accounts its GPU time.
  auto end_run = [&](int i, double now, bool finished) {
    SimJob& s = sj[i];
    double alloc = now - s.seg_start;
    double committed = finished ? s.t->duration_s : s.Committed(now);
    double gain = committed - s.p0;
    double lost = alloc - gain;
    if (lost < -1e-6) violation("job " + s.t->id + ": negative lost work");
    if (gain < -1e-6) violation("job " + s.t->id + ": committed progress went backwards");
    s.allocated_gpu_s += s.t->gpus * alloc;
    s.lost_gpu_s += s.t->gpus * std::max(0.0, lost);
    {
      double restore = std::min(alloc, s.seg_restore);
      double trained = s.Trained(now);
      double stopped = std::max(0.0, alloc - restore - trained);
      s.lost_restore_gpu_s += s.t->gpus * restore;
      s.lost_stopped_gpu_s += s.t->gpus * stopped;
      s.lost_discarded_gpu_s += s.t->gpus * std::max(0.0, lost - restore - stopped);
    }
    s.p0 = committed;
    s.gen++;
    s.extra_progress = -1;
    s.extra_time = kInf;
    s.stop_at = kInf;
    s.stall_at = kInf;
    s.stall_d = 0;
    release(i);
    return lost;
  };

  // Wait attribution: the causes the last decision reported for pending high jobs, charged with
  // the time until the next event.
  constexpr int kCauses = SimMetrics::kCauses;
  std::vector<std::array<double, kCauses>> wait_by(sj.size());
  std::vector<std::pair<int, int>> waiting_now;  // (sim job, cause slot)
  double prev_now = 0;

  while (!q.empty()) {
    double now = q.top().time;
    if (opt.horizon_s > 0 && now > opt.horizon_s) break;
    for (const auto& [i, slot] : waiting_now) wait_by[i][slot] += now - prev_now;
    waiting_now.clear();
    prev_now = now;
    while (!q.empty() && q.top().time == now) {
      Event e = q.top();
      q.pop();
      last_event = now;
      SimJob* s = e.job >= 0 ? &sj[e.job] : nullptr;
      switch (e.type) {
        case EvType::kArrival: {
          first_submit = std::min(first_submit, now);
          Job j;
          j.id = s->t->id;
          j.cls = s->t->cls;
          j.queue = s->t->queue;
          j.gpus = s->t->gpus;
          j.submit_time = s->t->submit;
          j.restore_s = s->t->restore_s;
          j.user = e.job;
          s->active = static_cast<int>(cs.jobs.size());
          cs.jobs.push_back(std::move(j));
          break;
        }
        case EvType::kFinish: {
          if (e.gen != s->gen || s->active < 0) break;
          if (s->Progress(now) < s->t->duration_s - 1e-6) break;  // a stall delayed it: a later event is queued
          end_run(e.job, now, true);
          s->finish = now;
          m.completed++;
          deactivate(e.job);
          break;
        }
        case EvType::kCkptDone: {
          if (e.gen != s->gen || s->active < 0) break;
          Job& j = cs.jobs[s->active];
          if (j.phase == JobPhase::kCheckpointing && j.hints) j.hints->request_ack = j.request_id;
          break;
        }
        case EvType::kEvictDone: {
          if (e.gen != s->gen || s->active < 0) break;
          Job& j = cs.jobs[s->active];
          end_run(e.job, now, false);
          // Thrash: preempted or moved again within the window of its previous preemption or move.
          if (now - std::max(s->last_preempted, s->last_moved) < opt.thrash_window_s) m.thrash_cycles++;
          if (j.move_to >= 0) {  // moved for a high job (defragmentation), not preempted
            m.moves++;
            s->moved_at = s->last_moved = now;
            j.RequeueAfterMove(now);
            j.request_id = 0;
            break;
          }
          s->last_preempted = now;
          s->preemptions++;
          m.preemptions++;
          j.RequeueAfterPreemption(now);
          j.request_id = 0;
          break;
        }
        case EvType::kWake:
          wakes.erase(now);
          break;
      }
    }

    // Exact, fresh hints for every placed job.
    for (Job& j : cs.jobs) {
      if (j.phase == JobPhase::kPending) continue;
      const SimJob& s = sj[j.user];
      if (!j.hints) j.hints.emplace();
      Hints& h = *j.hints;
      h.updated_unix = now;
      h.gpus = j.gpus;
      h.cost.drain_s = s.t->ckpt_drain_s;
      h.cost.stall_s = s.t->ckpt_stall_s;
      h.cost.persist_s = s.t->ckpt_persist_s;
      h.grace.needed_s = h.checkpoint_s();
      h.grace.granted_s = opt.sigterm_saves ? s.grace : 0;  // a naive job does not save on SIGTERM
      double committed = s.Committed(now);
      // GPU time of this run not yet turned into a durable commit: with no new commit since it
      // (re)started, that includes the restore it is paying now.
      h.lost_work_s = committed > s.p0 ? std::max(0.0, s.Progress(now) - committed) : now - s.seg_start;
      h.last_commit.step = committed > 0 ? static_cast<int64_t>(committed) : -1;
      h.last_commit.committed_at = s.CommitTime(now);
      h.step = static_cast<int64_t>(s.Progress(now));
      h.state = j.phase == JobPhase::kCheckpointing ? JobState::kCheckpointing : JobState::kTraining;
    }
    cs.now = now;
    // Forget budget history older than any window.
    if (!cs.history.empty() && cs.history.front().time < now - policy.budget_window_s) {
      size_t k = 0;
      while (k < cs.history.size() && cs.history[k].time < now - policy.budget_window_s) ++k;
      cs.history.erase(cs.history.begin(), cs.history.begin() + static_cast<long>(k));
    }

    auto t0 = std::chrono::steady_clock::now();
    Decisions d = Decide(cs, policy);
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    m.decisions++;
    decide_total_us += us;
    m.decide_max_us = std::max(m.decide_max_us, us);

    for (const Action& a : d.actions) {
      Job& j = cs.jobs[a.job_index];
      int i = static_cast<int>(j.user);
      SimJob& s = sj[i];
      switch (a.kind) {
        case ActionKind::kStart: {
          if (j.phase != JobPhase::kPending) {
            violation("start of non-pending job " + j.id);
            break;
          }
          used[a.node] += j.gpus;
          if (used[a.node] > cs.nodes[a.node].gpus) {
            m.capacity_violations++;
            violation("node " + cs.nodes[a.node].name + " over capacity starting " + j.id);
          }
          if (j.move_to >= 0) {
            if (a.node != j.move_to) violation("moved job " + j.id + " restarted off the node it was moved to");
            if (s.moved_at >= 0) {
              m.move_restart_wait_s += now - s.moved_at;
              m.move_restarts++;
            }
            s.moved_at = -1;
            j.move_to = -1;
          }
          j.phase = JobPhase::kRunning;
          j.node = a.node;
          j.start_time = now;
          s.placed = true;
          s.node = a.node;
          s.seg_start = now;
          s.seg_restore = s.p0 > 0 ? s.t->restore_s : 0;
          s.gen++;
          if (s.first_start < 0) s.first_start = now;
          push(now + s.seg_restore + (s.t->duration_s - s.p0), EvType::kFinish, i, s.gen);
          break;
        }
        case ActionKind::kRequestCheckpoint: {
          if (a.to_node >= 0) j.move_to = a.to_node;
          j.phase = JobPhase::kCheckpointing;
          j.request_id = ++next_request;
          j.request_time = now;
          j.preemptor = a.for_job;
          // The in-flight step drains, the snapshot is taken at its end, training pauses for the
          // stall (copy to staging) and continues while the snapshot persists.
          double snap = now + s.t->ckpt_drain_s;
          s.extra_progress = s.Progress(snap);
          s.extra_time = snap + s.t->ckpt_stall_s + s.t->ckpt_persist_s;
          if (s.stall_at == kInf) {
            s.stall_at = snap;
            s.stall_d = s.t->ckpt_stall_s;
            push(s.TimeAt(s.t->duration_s), EvType::kFinish, i, s.gen);  // the stall delays the end
          }
          push(s.extra_time, EvType::kCkptDone, i, s.gen);
          m.checkpoint_requests++;
          cs.history.push_back({now, j.queue, a.est_lost_gpu_s / 3600.0});
          break;
        }
        case ActionKind::kEvict: {
          if (j.phase == JobPhase::kRunning) cs.history.push_back({now, j.queue, a.est_lost_gpu_s / 3600.0});
          if (a.to_node >= 0) j.move_to = a.to_node;
          j.phase = JobPhase::kEvicting;
          j.preemptor = a.for_job;
          // SIGTERM (or a kill at once when grace_s == 0); see the model in simulator.h.
          double exit_at = now;
          if (a.grace_s != 0 && opt.sigterm_saves) {
            double grace = a.grace_s > 0 ? a.grace_s : s.grace;
            double save_end = now;
            if (s.extra_time < kInf && s.extra_time > now) {
              // A requested save is in flight: the stop finishes it; training stops at its snapshot.
              save_end = s.extra_time;
              s.stop_at = std::max(now, s.stall_at);
            } else if (s.Progress(now) > s.Committed(now) + 1e-9) {
              // The stop snapshot: the in-flight step drains, then training is over; the stall
              // and the persist follow.
              double snap = now + s.t->ckpt_drain_s;
              s.extra_progress = s.Progress(snap);
              s.extra_time = snap + s.t->ckpt_stall_s + s.t->ckpt_persist_s;
              s.stop_at = snap;
              save_end = s.extra_time;
            } else {
              s.stop_at = now;  // nothing new to save: it exits at once
            }
            if (save_end <= now + grace) {
              exit_at = save_end;
            } else {  // SIGKILL at the end of the grace period: the save is lost
              s.extra_progress = -1;
              s.extra_time = kInf;
              exit_at = now + grace;
            }
          }
          s.exit_at = exit_at;
          s.gen++;  // pending finish/commit events of this run no longer apply
          push(exit_at + opt.eviction_latency_s, EvType::kEvictDone, i, s.gen);
          break;
        }
      }
    }
    {
      // Which pending high jobs wait, and why (victims leaving: saving or just exiting).
      std::unordered_map<std::string, bool> saving_for;
      for (const Job& j : cs.jobs) {
        if ((j.phase != JobPhase::kCheckpointing && j.phase != JobPhase::kEvicting) || j.preemptor.empty()) continue;
        const SimJob& v = sj[j.user];
        bool saving = j.phase == JobPhase::kCheckpointing || now < v.exit_at;
        saving_for[j.preemptor] = saving_for[j.preemptor] || saving;
      }
      for (const WaitEstimate& w : d.waits) {
        if (w.job_index < 0 || w.job_index >= static_cast<int>(cs.jobs.size())) continue;
        const Job& j = cs.jobs[w.job_index];
        if (j.phase != JobPhase::kPending || sj[j.user].first_start >= 0) continue;  // first-start waits only
        int slot = static_cast<int>(w.cause);
        if (w.cause == WaitCause::kVictimsLeaving) {
          auto it = saving_for.find(j.id);
          slot = it != saving_for.end() && it->second ? 0 : kNumWaitCauses;
        }
        waiting_now.emplace_back(static_cast<int>(j.user), slot);
      }
    }
    if (d.recheck_at < kInf && d.recheck_at > now && !wakes.count(d.recheck_at)) {
      wakes.insert(d.recheck_at);
      push(d.recheck_at, EvType::kWake, -1, 0);
    }
    if (opt.check_invariants) {
      for (size_t n = 0; n < used.size(); ++n) {
        if (used[n] < 0 || used[n] > cs.nodes[n].gpus) {
          m.capacity_violations++;
          violation("node " + cs.nodes[n].name + " uses " + std::to_string(used[n]) + " of " +
                    std::to_string(cs.nodes[n].gpus) + " GPUs");
        }
      }
    }
  }

  // Metrics.
  double end = opt.horizon_s > 0 ? std::min(opt.horizon_s, last_event) : last_event;
  std::vector<double> hw, mw, lw;
  double alloc = 0, lost = 0;
  res.first_start.resize(sj.size());
  res.finish.resize(sj.size());
  res.preemptions.resize(sj.size());
  for (size_t i = 0; i < sj.size(); ++i) {
    const SimJob& s = sj[i];
    double a = s.allocated_gpu_s, l = s.lost_gpu_s;
    if (s.placed) {  // still running at the horizon: account the partial run
      a += s.t->gpus * (end - s.seg_start);
    }
    alloc += a;
    lost += l;
    m.lost_restore_gpu_hours += s.lost_restore_gpu_s / 3600.0;
    m.lost_discarded_gpu_hours += s.lost_discarded_gpu_s / 3600.0;
    m.lost_stopped_gpu_hours += s.lost_stopped_gpu_s / 3600.0;
    if (s.finish >= 0) m.work_conservation_error_s += std::fabs(s.allocated_gpu_s - s.lost_gpu_s - s.t->gpus * s.t->duration_s);
    double wait = s.first_start >= 0 ? s.first_start - s.t->submit : std::max(0.0, end - s.t->submit);
    if (s.t->submit > end) continue;
    switch (s.t->cls) {
      case PriorityClass::kHigh: hw.push_back(wait); break;
      case PriorityClass::kMedium: mw.push_back(wait); break;
      case PriorityClass::kLow:
        lw.push_back(wait);
        m.low_total++;
        if (s.finish >= 0) m.low_completed++;
        if (wait > opt.starvation_s) m.low_starved++;
        break;
    }
    res.first_start[i] = s.first_start;
    res.finish[i] = s.finish;
    res.preemptions[i] = s.preemptions;
  }
  m.high_wait_mean_s = Mean(hw);
  m.high_wait_p95_s = Percentile(hw, 0.95);
  for (size_t i = 0; i < sj.size(); ++i) {
    const SimJob& s = sj[i];
    if (s.t->cls != PriorityClass::kHigh || s.t->submit > end) continue;
    double wait = s.first_start >= 0 ? s.first_start - s.t->submit : std::max(0.0, end - s.t->submit);
    bool tail = wait > 0 && wait >= m.high_wait_p95_s;
    if (tail) m.high_tail_jobs++;
    for (int k = 0; k < kCauses; ++k) {
      m.high_wait_cause_s[k] += wait_by[i][k];
      if (tail) m.high_tail_wait_cause_s[k] += wait_by[i][k];
    }
  }
  m.medium_wait_mean_s = Mean(mw);
  m.low_wait_mean_s = Mean(lw);
  m.low_wait_max_s = lw.empty() ? 0 : *std::max_element(lw.begin(), lw.end());
  m.lost_gpu_hours = lost / 3600.0;
  m.makespan_s = first_submit < kInf ? end - first_submit : 0;
  m.utilization = m.makespan_s > 0 ? alloc / (static_cast<double>(total_gpus) * m.makespan_s) : 0;
  m.decide_mean_us = m.decisions ? decide_total_us / m.decisions : 0;
  if (m.work_conservation_error_s > 1e-3 * std::max(1, m.completed))
    violation("work not conserved: error " + std::to_string(m.work_conservation_error_s) + " GPU-s");
  *out = std::move(res);
  return Status::OK();
}

const char* SimWaitCauseName(int k) {
  if (k == 0) return "victims-saving";
  if (k == kNumWaitCauses) return "victims-exiting";
  if (k < 0 || k > kNumWaitCauses) return "?";
  return WaitCauseName(static_cast<WaitCause>(k));
}

std::string MetricsCsvHeader() {
  return "trace,policy,jobs,completed,high_wait_mean_s,high_wait_p95_s,medium_wait_mean_s,low_wait_mean_s,"
         "low_wait_max_s,low_total,low_completed,low_starved,lost_gpu_hours,preemptions,checkpoint_requests,"
         "thrash_cycles,utilization,makespan_s,decisions,decide_mean_us,decide_max_us,capacity_violations,"
         "lost_restore_gpu_hours,lost_discarded_gpu_hours,lost_stopped_gpu_hours,moves,move_restart_wait_mean_s\n";
}

std::string MetricsCsvRow(const std::string& trace, const SimMetrics& m) {
  char buf[1024];
  snprintf(buf, sizeof buf,
           "%s,%s,%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%d,%d,%d,%.3f,%d,%d,%d,%.4f,%.0f,%d,%.1f,%.1f,%d,%.3f,%.3f,%.3f,%d,%.1f\n",
           trace.c_str(),
           m.policy.c_str(), m.jobs, m.completed, m.high_wait_mean_s, m.high_wait_p95_s, m.medium_wait_mean_s,
           m.low_wait_mean_s, m.low_wait_max_s, m.low_total, m.low_completed, m.low_starved, m.lost_gpu_hours,
           m.preemptions, m.checkpoint_requests, m.thrash_cycles, m.utilization, m.makespan_s, m.decisions,
           m.decide_mean_us, m.decide_max_us, m.capacity_violations, m.lost_restore_gpu_hours,
           m.lost_discarded_gpu_hours, m.lost_stopped_gpu_hours, m.moves,
           m.move_restarts ? m.move_restart_wait_s / m.move_restarts : 0.0);
  return buf;
}

std::string MetricsTable(const std::string& trace, const std::vector<SimMetrics>& rows) {
  std::ostringstream o;
  char buf[512];
  snprintf(buf, sizeof buf, "%-26s %-13s %10s %10s %10s %8s %6s %8s %7s %9s %9s %7s %6s  %s\n", "trace", "policy",
           "hi_mean_s", "hi_p95_s", "lost_GPUh", "preempt", "moves", "ckpt_req", "thrash", "lo_mean_s", "lo_starv", "util",
           "dec_us", "lost=restore+discarded+stopped");
  o << buf;
  for (const auto& m : rows) {
    snprintf(buf, sizeof buf, "%-26.26s %-13s %10.0f %10.0f %10.2f %8d %6d %8d %7d %9.0f %9d %7.3f %6.0f  %.1f+%.1f+%.1f\n",
             trace.c_str(), m.policy.c_str(), m.high_wait_mean_s, m.high_wait_p95_s, m.lost_gpu_hours,
             m.preemptions, m.moves, m.checkpoint_requests, m.thrash_cycles, m.low_wait_mean_s, m.low_starved, m.utilization,
             m.decide_mean_us, m.lost_restore_gpu_hours, m.lost_discarded_gpu_hours, m.lost_stopped_gpu_hours);
    o << buf;
  }
  return o.str();
}

}  // namespace preempt::sched
