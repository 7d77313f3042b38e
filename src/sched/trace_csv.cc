// Trace files: the CSV trace format, the Alibaba GPU trace, and trace validation (simulator.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "trace_util.h"

namespace preempt::sched {

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

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end && *end == '\0' && std::isfinite(*out);
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
  const std::pair<const char*, int> required[] = {{"name", c_name},          {"memory_mib", c_mem},
                                                  {"num_gpu", c_gpu},         {"qos", c_qos},
                                                  {"creation_time", c_create}, {"deletion_time", c_del},
                                                  {"scheduled_time", c_sched}};
  for (const auto& [column, index] : required)
    if (index < 0)
      return Status(StatusCode::kCorruption, "alibaba trace " + path + ": missing column '" + column + "'");
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

Status ValidateTrace(const Trace& trace) {
  auto bad = [&](const std::string& m) { return Status(StatusCode::kInvalidArgument, "trace " + trace.name + ": " + m); };
  if (trace.nodes.empty()) return bad("no nodes");
  std::set<std::string> names;
  int largest = 0;
  for (const auto& n : trace.nodes) {
    if (n.gpus < 0 || n.gpus > kMaxTraceGpus) return bad("node " + n.name + ": gpus out of range");
    if (!names.insert(n.name).second) return bad("node " + n.name + " twice");
    largest = std::max(largest, n.gpus);
  }
  std::set<std::string> ids;
  for (const auto& j : trace.jobs) {
    if (!ids.insert(j.id).second) return bad("job " + j.id + " twice (job ids must be unique)");
    if (j.gpus < 1 || j.gpus > kMaxTraceGpus) return bad("job " + j.id + ": gpus out of range");
    // It could never start: its waits would be unbounded, not zero.
    if (j.gpus > largest)
      return bad("job " + j.id + " needs " + std::to_string(j.gpus) + " GPUs on one node; the largest node has " +
                 std::to_string(largest));
    for (double v : {j.submit, j.duration_s, j.ckpt_drain_s, j.ckpt_stall_s, j.ckpt_persist_s, j.restore_s})
      if (!(v >= 0 && v <= kMaxTraceSeconds)) return bad("job " + j.id + ": a time is negative, not finite or > 1e10 s");
    if (!(j.ckpt_interval_s >= 1 && j.ckpt_interval_s <= kMaxTraceSeconds))
      return bad("job " + j.id + ": ckpt_interval_s must be in [1, 1e10] s");
  }
  return Status::OK();
}

}  // namespace preempt::sched
