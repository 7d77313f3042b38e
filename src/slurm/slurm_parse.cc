// Parsers for SLURM's command output: `squeue --json`, `scontrol show partition|node -o`,
// `scontrol show config`. See include/preempt/sched/slurm.h.
#include <rapidjson/document.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "preempt/sched/slurm.h"

namespace preempt::sched {
namespace {

// "Key=Value Key2=Value2 ..." (one `-o` record); values hold no spaces in the fields we read.
std::map<std::string, std::string> Record(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::istringstream in(line);
  std::string tok;
  while (in >> tok) {
    size_t eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

// A number field: plain, or {"set":bool,"number":N} (OpenAPI v0.0.39+); null/unset → 0.
bool Number(const rapidjson::Value& job, const char* key, double* out) {
  *out = 0;
  if (!job.HasMember(key)) return true;
  const auto& v = job[key];
  if (v.IsNull()) return true;
  if (v.IsNumber()) {
    *out = v.GetDouble();
    return std::isfinite(*out);
  }
  if (v.IsObject() && v.HasMember("number") && v["number"].IsNumber()) {
    if (v.HasMember("set") && v["set"].IsBool() && !v["set"].GetBool()) return true;
    *out = v["number"].GetDouble();
    return std::isfinite(*out);
  }
  return false;
}

std::string String(const rapidjson::Value& job, const char* key) {
  if (!job.HasMember(key)) return "";
  const auto& v = job[key];
  if (v.IsString()) return v.GetString();
  if (v.IsArray() && !v.Empty() && v[0].IsString()) return v[0].GetString();  // job_state: ["RUNNING"] (v0.0.40)
  return "";
}

// GPUs in a TRES/GRES list such as "gres:gpu:2", "gres/gpu=2", "gpu:a100:4,gres:nic:1"; 0 without GPUs.
int GpusIn(const std::string& tres) {
  std::istringstream in(tres);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t g = item.find("gpu");
    if (g == std::string::npos) continue;
    size_t sep = item.find_last_of(":=");
    if (sep == std::string::npos || sep < g) return 1;
    char* end = nullptr;
    long n = std::strtol(item.c_str() + sep + 1, &end, 10);
    return end && *end == '\0' && n > 0 && n < 1 << 20 ? static_cast<int>(n) : 1;
  }
  return 0;
}

}  // namespace

Status ParseSqueueJson(const std::string& text, const std::string& origin, std::vector<SlurmJob>* out) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  auto err = [&](const std::string& m) { return Status(StatusCode::kCorruption, origin + ": " + m); };
  if (doc.HasParseError() || !doc.IsObject()) return err("not a JSON object");
  if (!doc.HasMember("jobs") || !doc["jobs"].IsArray()) return err("field 'jobs': expected an array");
  out->clear();
  for (const auto& j : doc["jobs"].GetArray()) {
    if (!j.IsObject()) return err("field 'jobs[]': expected objects");
    SlurmJob sj;
    double id = 0, restarts = 0;
    if (!Number(j, "job_id", &id) || id <= 0) return err("field 'jobs[].job_id': expected a positive number");
    sj.id = std::to_string(static_cast<long long>(id));
    if (!Number(j, "submit_time", &sj.submit_unix)) return err("job " + sj.id + ": field 'submit_time'");
    if (!Number(j, "start_time", &sj.start_unix)) return err("job " + sj.id + ": field 'start_time'");
    if (!Number(j, "restart_cnt", &restarts)) return err("job " + sj.id + ": field 'restart_cnt'");
    sj.restarts = static_cast<int>(restarts);
    sj.partition = String(j, "partition");
    sj.state = String(j, "job_state");
    sj.nodes = String(j, "nodes");
    sj.comment = String(j, "comment");
    sj.gpus = GpusIn(String(j, "tres_per_node"));
    if (sj.gpus == 0) sj.gpus = GpusIn(String(j, "tres_per_job"));
    if (sj.state.empty()) return err("job " + sj.id + ": field 'job_state': missing");
    out->push_back(std::move(sj));
  }
  return Status::OK();
}

Status ParsePartitions(const std::string& text, std::vector<SlurmPartition>* out) {
  out->clear();
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto kv = Record(line);
    if (!kv.count("PartitionName")) continue;
    SlurmPartition p;
    p.name = kv["PartitionName"];
    p.priority_tier = std::atoi(kv["PriorityTier"].c_str());
    p.grace_time_s = std::atof(kv["GraceTime"].c_str());
    p.preempt_mode = kv["PreemptMode"];
    out->push_back(p);
  }
  if (out->empty()) return Status(StatusCode::kCorruption, "scontrol show partition: no PartitionName record");
  return Status::OK();
}

Status ParseNodes(const std::string& text, std::vector<Node>* out) {
  out->clear();
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto kv = Record(line);
    if (!kv.count("NodeName")) continue;
    out->push_back({kv["NodeName"], GpusIn(kv["Gres"])});
  }
  if (out->empty()) return Status(StatusCode::kCorruption, "scontrol show node: no NodeName record");
  return Status::OK();
}

double ParseKillWait(const std::string& config_text) {
  std::istringstream in(config_text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("KillWait", 0) != 0) continue;
    size_t eq = line.find('=');
    if (eq != std::string::npos) return std::atof(line.c_str() + eq + 1);
  }
  return 30;
}

std::string HintsPathForJob(const SlurmJob& job, const std::string& hints_dir) {
  const std::string key = "preempt-hints=";
  size_t p = job.comment.find(key);
  if (p != std::string::npos) {
    std::string path = job.comment.substr(p + key.size());
    path = path.substr(0, path.find_first_of(" ,;"));
    for (size_t at; (at = path.find("%j")) != std::string::npos;) path.replace(at, 2, job.id);
    return path;
  }
  return hints_dir.empty() ? "" : hints_dir + "/" + job.id + ".hints.json";
}

}  // namespace preempt::sched
