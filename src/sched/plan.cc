#include "preempt/sched/plan.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "json_checks.h"

namespace preempt::sched {
namespace {

Status ReadText(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kNotFound, path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return Status::OK();
}

Status Parse(const std::string& text, const std::string& what, rapidjson::Document* doc) {
  doc->Parse(text.c_str(), text.size());
  if (doc->HasParseError())
    return Status(StatusCode::kCorruption, what + ": invalid JSON at offset " + std::to_string(doc->GetErrorOffset()) +
                                               ": " + rapidjson::GetParseError_En(doc->GetParseError()));
  if (!doc->IsObject()) return Status(StatusCode::kCorruption, what + ": not a JSON object");
  return Status::OK();
}

std::string Str(const rapidjson::Value& o, const char* k, const std::string& dflt = "") {
  if (!o.IsObject()) return dflt;
  auto it = o.FindMember(k);
  return it != o.MemberEnd() && it->value.IsString() ? std::string(it->value.GetString()) : dflt;
}

bool Num(const rapidjson::Value& o, const char* k, double* out) {
  if (!o.IsObject()) return false;
  auto it = o.FindMember(k);
  if (it == o.MemberEnd()) return false;
  if (it->value.IsNumber()) {
    *out = it->value.GetDouble();
    return true;
  }
  if (it->value.IsString()) {  // Kubernetes quantities are strings ("2")
    char* end = nullptr;
    double v = std::strtod(it->value.GetString(), &end);
    if (end && *end == '\0') {
      *out = v;
      return true;
    }
  }
  return false;
}

// Whole GPU counts and times from user files: finite and in range, or the field is rejected.
constexpr double kMaxGpus = 1 << 16;
constexpr double kMaxAbsTime = 1e11;  // seconds; unix times and durations (~3,000 years)

bool WholeInRange(double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi && v == std::floor(v); }
bool TimeOk(double v) { return std::isfinite(v) && std::fabs(v) <= kMaxAbsTime; }

std::string DirOf(const std::string& path) {
  size_t s = path.find_last_of('/');
  return s == std::string::npos ? "." : path.substr(0, s);
}

void AttachHintsFile(Job* j, const std::string& path, std::vector<std::string>* notes) {
  Hints h;
  Status s = ReadHints(path, &h);
  if (s.ok()) {
    j->hints = h;
  } else {
    notes->push_back("job " + j->id + ": no usable hints (" + s.to_string() + "); treated as unknown cost");
  }
}

int NodeIndex(ClusterState* st, const std::string& name, int gpus_if_new) {
  for (size_t i = 0; i < st->nodes.size(); ++i)
    if (st->nodes[i].name == name) return static_cast<int>(i);
  if (gpus_if_new <= 0) return -1;
  st->nodes.push_back({name, gpus_if_new});
  return static_cast<int>(st->nodes.size()) - 1;
}

// A snapshot job's "state" (false when it names none of them).
bool SnapshotPhase(const std::string& s, JobPhase* out) {
  if (s == "pending") *out = JobPhase::kPending;
  else if (s == "running") *out = JobPhase::kRunning;
  else if (s == "checkpointing") *out = JobPhase::kCheckpointing;
  else if (s == "evicting") *out = JobPhase::kEvicting;
  else return false;
  return true;
}

std::string JsonEscape(const std::string& s) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
  return sb.GetString();
}

}  // namespace

bool ParseRfc3339(const std::string& s, double* unix_out) {
  struct tm tm = {};
  int frac_end = 0;
  if (sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
             &tm.tm_sec, &frac_end) != 6)
    return false;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  double frac = 0;
  std::string rest = s.substr(static_cast<size_t>(frac_end));
  if (!rest.empty() && rest[0] == '.') {
    size_t k = 1;
    while (k < rest.size() && isdigit(static_cast<unsigned char>(rest[k]))) ++k;
    frac = std::strtod(("0" + rest.substr(0, k)).c_str(), nullptr);
    rest = rest.substr(k);
  }
  if (rest != "Z") return false;
  *unix_out = static_cast<double>(timegm(&tm)) + frac;
  return true;
}

Status LoadSnapshot(const std::string& path, ClusterState* out, std::vector<std::string>* notes) {
  std::string text;
  PREEMPT_RETURN_IF_ERROR(ReadText(path, &text));
  return ParseSnapshot(text, path, DirOf(path), out, notes);
}

Status ParseSnapshot(const std::string& text, const std::string& path, const std::string& base_dir, ClusterState* out,
                     std::vector<std::string>* notes) {
  rapidjson::Document doc;
  PREEMPT_RETURN_IF_ERROR(Parse(text, "snapshot " + path, &doc));
  if (Str(doc, "schema") != "preempt.snapshot/1")
    return Status(StatusCode::kVersionMismatch, "snapshot " + path + ": field 'schema': expected preempt.snapshot/1");
  const std::string unknown = json_checks::UnknownMember(doc, {"schema", "now_unix", "nodes", "jobs"});
  if (!unknown.empty()) return Status(StatusCode::kCorruption, "snapshot " + path + ": unknown field '" + unknown + "'");
  ClusterState st;
  st.now = NowUnix();
  if (doc.HasMember("now_unix") && (!Num(doc, "now_unix", &st.now) || !TimeOk(st.now)))
    return Status(StatusCode::kCorruption, "snapshot " + path + ": field 'now_unix': not a finite time");
  auto nodes = doc.FindMember("nodes");
  if (nodes == doc.MemberEnd() || !nodes->value.IsArray())
    return Status(StatusCode::kCorruption, "snapshot " + path + ": field 'nodes': expected an array");
  for (const auto& n : nodes->value.GetArray()) {
    const std::string unknown_field = json_checks::UnknownMember(n, {"name", "gpus"});
    if (!unknown_field.empty())
      return Status(StatusCode::kCorruption, "snapshot " + path + ": field 'nodes[]': unknown field '" + unknown_field + "'");
    double g = 0;
    std::string name = Str(n, "name");
    if (name.empty() || !Num(n, "gpus", &g) || !WholeInRange(g, 0, kMaxGpus))
      return Status(StatusCode::kCorruption,
                    "snapshot " + path + ": field 'nodes[]': needs a name and gpus, a whole number in [0, 65536]");
    if (NodeIndex(&st, name, 0) >= 0)
      return Status(StatusCode::kCorruption, "snapshot " + path + ": field 'nodes[].name': node '" + name + "' twice");
    st.nodes.push_back({name, static_cast<int>(g)});
  }
  auto jobs = doc.FindMember("jobs");
  if (jobs == doc.MemberEnd() || !jobs->value.IsArray())
    return Status(StatusCode::kCorruption, "snapshot " + path + ": field 'jobs': expected an array");
  std::set<std::string> ids;
  std::vector<int> used(st.nodes.size(), 0);
  for (const auto& o : jobs->value.GetArray()) {
    Job j;
    j.id = Str(o, "id");
    if (j.id.empty()) return Status(StatusCode::kCorruption, "snapshot " + path + ": field 'jobs[].id': missing");
    if (!ids.insert(j.id).second)
      return Status(StatusCode::kCorruption, "snapshot " + path + ": field 'jobs[].id': job '" + j.id + "' twice");
    auto err = [&](const std::string& f, const std::string& m) {
      return Status(StatusCode::kCorruption, "snapshot " + path + ": job " + j.id + ": field '" + f + "': " + m);
    };
    const std::string unknown_field =
        json_checks::UnknownMember(o, {"id", "class", "queue", "gpus", "state", "node", "submit_unix", "start_unix",
                                       "last_preempted_unix", "restore_s", "hints", "hints_file"});
    if (!unknown_field.empty()) return err(unknown_field, "unknown field");
    if (json_checks::NotANonEmptyString(o, "class") || !ParsePriorityClass(Str(o, "class", "low"), &j.cls))
      return err("class", "expected low|medium|high");
    if (json_checks::NotANonEmptyString(o, "queue")) return err("queue", "expected a non-empty string");
    j.queue = Str(o, "queue", "default");
    double g = 1;
    if ((o.HasMember("gpus") && !Num(o, "gpus", &g)) || !WholeInRange(g, 1, kMaxGpus))
      return err("gpus", "must be a whole number in [1, 65536]");
    j.gpus = static_cast<int>(g);
    if (json_checks::NotANonEmptyString(o, "state") || !SnapshotPhase(Str(o, "state", "pending"), &j.phase))
      return err("state", "expected pending|running|checkpointing|evicting");
    for (auto [key, field] : {std::pair<const char*, double*>{"submit_unix", &j.submit_time},
                              {"start_unix", &j.start_time},
                              {"last_preempted_unix", &j.last_preempted},
                              {"restore_s", &j.restore_s}}) {
      if (o.HasMember(key) && (!Num(o, key, field) || !TimeOk(*field))) return err(key, "not a finite time");
    }
    if (json_checks::NotANonEmptyString(o, "node")) return err("node", "expected a node name");
    if (json_checks::NotANonEmptyString(o, "hints_file")) return err("hints_file", "expected a path");
    if (o.HasMember("hints") && !o["hints"].IsObject()) return err("hints", "expected an object (preempt.hints/1)");
    if (j.phase != JobPhase::kPending) {
      j.node = NodeIndex(&st, Str(o, "node"), 0);
      if (j.node < 0) return err("node", "unknown node '" + Str(o, "node") + "'");
      used[j.node] += j.gpus;
      if (used[j.node] > st.nodes[j.node].gpus)
        return err("gpus", "node '" + st.nodes[j.node].name + "' would hold " + std::to_string(used[j.node]) +
                               " GPUs of its " + std::to_string(st.nodes[j.node].gpus));
    }
    std::string hf = Str(o, "hints_file");
    auto inl = o.FindMember("hints");
    if (inl != o.MemberEnd() && inl->value.IsObject()) {
      rapidjson::StringBuffer sb;
      rapidjson::Writer<rapidjson::StringBuffer> w(sb);
      inl->value.Accept(w);
      Hints h;
      Status s = HintsFromJson(sb.GetString(), path + " job " + j.id, &h);
      if (s.ok()) j.hints = h;
      else notes->push_back(s.to_string() + "; treated as unknown cost");
    } else if (!hf.empty() && base_dir.empty()) {
      notes->push_back("job " + j.id + ": hints_file not read (no base directory); treated as unknown cost");
    } else if (!hf.empty()) {
      AttachHintsFile(&j, hf[0] == '/' ? hf : base_dir + "/" + hf, notes);
    } else if (j.phase != JobPhase::kPending) {
      notes->push_back("job " + j.id + ": no hints; treated as unknown cost");
    }
    st.jobs.push_back(std::move(j));
  }
  *out = std::move(st);
  return Status::OK();
}

namespace {

// A pod's class: from spec.priority (what Kubernetes resolved from its PriorityClass; thresholds as
// in examples/k8s/priorityclasses.yaml: >= 1000000 high, >= 100 medium), else from an exact
// PriorityClass name (preempt-high|medium|low or high|medium|low), else low, noted.
Status PodClass(const rapidjson::Value& spec, const std::string& what, PriorityClass* out,
                std::vector<std::string>* notes) {
  const std::string pc = Str(spec, "priorityClassName");
  if (spec.IsObject() && spec.HasMember("priority")) {
    const rapidjson::Value& v = spec["priority"];
    if (!v.IsNumber() || !std::isfinite(v.GetDouble()))
      return Status(StatusCode::kCorruption, what + ": field 'spec.priority': not a number");
    const double prio = v.GetDouble();
    *out = prio >= 1000000 ? PriorityClass::kHigh : prio >= 100 ? PriorityClass::kMedium : PriorityClass::kLow;
    return Status::OK();
  }
  for (PriorityClass c : {PriorityClass::kLow, PriorityClass::kMedium, PriorityClass::kHigh}) {
    const std::string name = PriorityClassName(c);
    if (pc == name || pc == "preempt-" + name) {
      *out = c;
      return Status::OK();
    }
  }
  *out = PriorityClass::kLow;
  if (!pc.empty()) notes->push_back(what + ": priority class '" + pc + "' has no spec.priority here; treated as low");
  return Status::OK();
}

}  // namespace

Status LoadK8sPodList(const std::string& path, int gpus_per_node, double now, ClusterState* out,
                      std::vector<std::string>* notes) {
  return LoadK8sPodList(path, "", gpus_per_node, now, out, notes);
}

Status LoadK8sPodList(const std::string& path, const std::string& nodes_path, int gpus_per_node, double now,
                      ClusterState* out, std::vector<std::string>* notes) {
  std::vector<Node> nodes;
  if (!nodes_path.empty()) {
    std::string node_text;
    PREEMPT_RETURN_IF_ERROR(ReadText(nodes_path, &node_text));
    PREEMPT_RETURN_IF_ERROR(ParseK8sNodeList(node_text, nodes_path, &nodes));
  }
  std::string text;
  PREEMPT_RETURN_IF_ERROR(ReadText(path, &text));
  return ParseK8sPodList(text, path, gpus_per_node, now, /*read_hints_files=*/true, nodes, out, notes);
}

Status ParseK8sNodeList(const std::string& text, const std::string& path, std::vector<Node>* out) {
  rapidjson::Document doc;
  PREEMPT_RETURN_IF_ERROR(Parse(text, "node list " + path, &doc));
  auto items = doc.FindMember("items");
  if (items == doc.MemberEnd() || !items->value.IsArray())
    return Status(StatusCode::kCorruption, "node list " + path + ": field 'items': expected an array");
  std::vector<Node> nodes;
  std::set<std::string> names;
  for (const auto& item : items->value.GetArray()) {
    const rapidjson::Value empty(rapidjson::kObjectType);
    auto member = [&](const rapidjson::Value& o, const char* k) -> const rapidjson::Value& {
      if (!o.IsObject()) return empty;
      auto it = o.FindMember(k);
      return it == o.MemberEnd() ? empty : it->value;
    };
    const std::string name = Str(member(item, "metadata"), "name");
    if (name.empty()) return Status(StatusCode::kCorruption, "node list " + path + ": field 'metadata.name': missing");
    if (!names.insert(name).second)
      return Status(StatusCode::kCorruption, "node list " + path + ": node " + name + " twice");
    // What the scheduler may place (allocatable), else what the node has.
    const auto& status = member(item, "status");
    const char* field = "status.allocatable";
    const rapidjson::Value* res = &member(status, "allocatable");
    if (!res->IsObject() || !res->HasMember("nvidia.com/gpu")) {
      field = "status.capacity";
      res = &member(status, "capacity");
    }
    double g = 0;
    if (res->IsObject() && res->HasMember("nvidia.com/gpu") &&
        (!Num(*res, "nvidia.com/gpu", &g) || !WholeInRange(g, 0, kMaxGpus)))
      return Status(StatusCode::kCorruption, "node list " + path + ": node " + name + ": field '" + field +
                                                 ".nvidia.com/gpu': not a whole number in [0, 65536]");
    if (g >= 1) nodes.push_back({name, static_cast<int>(g)});
  }
  *out = std::move(nodes);
  return Status::OK();
}

Status ParseK8sPodList(const std::string& text, const std::string& path, int gpus_per_node, double now,
                       bool read_hints_files, ClusterState* out, std::vector<std::string>* notes) {
  return ParseK8sPodList(text, path, gpus_per_node, now, read_hints_files, {}, out, notes);
}

Status ParseK8sPodList(const std::string& text, const std::string& path, int gpus_per_node, double now,
                       bool read_hints_files, const std::vector<Node>& nodes, ClusterState* out,
                       std::vector<std::string>* notes) {
  if (gpus_per_node < 1 || gpus_per_node > kMaxGpus)
    return Status(StatusCode::kInvalidArgument, "pod list " + path + ": GPUs per node must be in [1, 65536]");
  rapidjson::Document doc;
  PREEMPT_RETURN_IF_ERROR(Parse(text, "pod list " + path, &doc));
  auto items = doc.FindMember("items");
  if (items == doc.MemberEnd() || !items->value.IsArray())
    return Status(StatusCode::kCorruption, "pod list " + path + ": field 'items': expected an array");
  ClusterState st;
  st.now = now;
  st.nodes = nodes;  // with a node list, idle nodes are known too
  std::set<std::string> ids;
  std::vector<int> used;
  for (const auto& pod : items->value.GetArray()) {
    if (!pod.IsObject()) continue;
    const rapidjson::Value empty(rapidjson::kObjectType);
    auto member = [&](const rapidjson::Value& o, const char* k) -> const rapidjson::Value& {
      if (!o.IsObject()) return empty;
      auto it = o.FindMember(k);
      return it == o.MemberEnd() ? empty : it->value;
    };
    const auto& meta = member(pod, "metadata");
    const auto& spec = member(pod, "spec");
    const auto& status = member(pod, "status");
    std::string phase = Str(status, "phase");
    if (phase == "Succeeded" || phase == "Failed") continue;
    Job j;
    j.id = Str(meta, "namespace", "default") + "/" + Str(meta, "name");
    j.queue = Str(meta, "namespace", "default");
    const auto& ann = member(meta, "annotations");
    if (!Str(ann, "preempt.dev/queue").empty()) j.queue = Str(ann, "preempt.dev/queue");
    double gpus = 0;
    const auto& containers = member(spec, "containers");
    if (containers.IsArray()) {
      for (const auto& c : containers.GetArray()) {
        double g = 0;
        const auto& limits = member(member(c, "resources"), "limits");
        if (limits.IsObject() && limits.HasMember("nvidia.com/gpu")) {
          if (!Num(limits, "nvidia.com/gpu", &g) || !WholeInRange(g, 0, kMaxGpus))
            return Status(StatusCode::kCorruption, "pod list " + path + ": pod " + j.id +
                                                       ": field 'resources.limits.nvidia.com/gpu': not a whole "
                                                       "number in [0, 65536]");
          gpus += g;
        }
      }
    }
    if (gpus < 1) continue;  // not a GPU pod
    if (gpus > kMaxGpus)
      return Status(StatusCode::kCorruption, "pod list " + path + ": pod " + j.id + ": more than 65536 GPUs");
    if (!ids.insert(j.id).second)
      return Status(StatusCode::kCorruption, "pod list " + path + ": pod " + j.id + " twice");
    j.gpus = static_cast<int>(gpus);
    PREEMPT_RETURN_IF_ERROR(PodClass(spec, "pod list " + path + ": pod " + j.id, &j.cls, notes));
    ParseRfc3339(Str(meta, "creationTimestamp"), &j.submit_time);
    std::string node = Str(spec, "nodeName");
    if (phase == "Running" && !node.empty()) {
      j.phase = JobPhase::kRunning;
      j.node = NodeIndex(&st, node, nodes.empty() ? gpus_per_node : 0);
      if (j.node < 0)
        return Status(StatusCode::kCorruption, "pod list " + path + ": pod " + j.id + ": field 'spec.nodeName': node " +
                                                   node + " is not a GPU node of the node list");
      used.resize(st.nodes.size(), 0);
      used[j.node] += j.gpus;
      if (used[j.node] > st.nodes[j.node].gpus)
        return Status(StatusCode::kCorruption, "pod list " + path + ": pod " + j.id + ": node " + node + " would hold " +
                                                   std::to_string(used[j.node]) + " GPUs of " +
                                                   std::to_string(st.nodes[j.node].gpus) +
                                                   (nodes.empty() ? " (--gpus-per-node)" : " (node list)"));
      if (!ParseRfc3339(Str(status, "startTime"), &j.start_time)) j.start_time = j.submit_time;
    }
    std::string inl = Str(ann, "preempt.dev/hints");
    std::string file = Str(ann, "preempt.dev/hints-file");
    if (!inl.empty()) {
      Hints h;
      Status s = HintsFromJson(inl, "annotation preempt.dev/hints of " + j.id, &h);
      if (s.ok()) j.hints = h;
      else notes->push_back(s.to_string() + "; treated as unknown cost");
    } else if (!file.empty() && !read_hints_files) {
      notes->push_back("pod " + j.id + ": preempt.dev/hints-file not read here; treated as unknown cost");
    } else if (!file.empty()) {
      AttachHintsFile(&j, file, notes);
    } else if (j.phase == JobPhase::kRunning) {
      notes->push_back("pod " + j.id + ": no preempt.dev/hints annotation; treated as unknown cost");
    }
    st.jobs.push_back(std::move(j));
  }
  *out = std::move(st);
  return Status::OK();
}

std::string FormatDecisions(const ClusterState& st, const Decisions& d) {
  std::ostringstream o;
  int rank = 0;
  for (const auto& a : d.actions) {
    char buf[128];
    snprintf(buf, sizeof buf, "%2d. %-22s %-24s", ++rank, ActionKindName(a.kind), a.job.c_str());
    o << buf;
    if (a.node >= 0 && a.node < static_cast<int>(st.nodes.size())) o << " node=" << st.nodes[a.node].name;
    if (a.kind != ActionKind::kStart && a.kind != ActionKind::kWithdraw) {
      snprintf(buf, sizeof buf, " est_lost=%.0fGPU-s", a.est_lost_gpu_s);
      o << buf;
    }
    if (a.kind == ActionKind::kEvict)
      o << (a.grace_s == 0 ? " grace=0(kill)" : a.grace_s < 0 ? " grace=own" : " grace=" + std::to_string(std::lround(a.grace_s)) + "s");
    if (a.to_node >= 0 && a.to_node < static_cast<int>(st.nodes.size())) o << " move_to=" << st.nodes[a.to_node].name;
    o << "  # " << a.reason << "\n";
  }
  for (const auto& w : d.waits) {
    char buf[160];
    snprintf(buf, sizeof buf, "    wait %-24s waited=%.0fs est_wait=%s", w.job.c_str(), w.waited_s,
             std::isinf(w.est_wait_s) ? "unbounded" : (std::to_string(static_cast<long long>(w.est_wait_s)) + "s").c_str());
    o << buf;
    if (!w.suggestion.empty()) o << "  # suggestion: " << w.suggestion;
    o << "\n";
  }
  if (d.actions.empty() && d.waits.empty()) o << "no action\n";
  return o.str();
}

std::string DecisionsToJson(const ClusterState& st, const Decisions& d) {
  std::ostringstream o;
  o << "{\"actions\":[";
  for (size_t i = 0; i < d.actions.size(); ++i) {
    const auto& a = d.actions[i];
    o << (i ? "," : "") << "{\"action\":\"" << ActionKindName(a.kind) << "\",\"mode\":\"" << EvictionModeName(a.mode)
      << "\",\"job\":" << JsonEscape(a.job)
      << ",\"node\":" << JsonEscape(a.node >= 0 && a.node < static_cast<int>(st.nodes.size()) ? st.nodes[a.node].name : "")
      << ",\"for\":" << JsonEscape(a.for_job) << ",\"est_lost_gpu_s\":" << a.est_lost_gpu_s
      << ",\"grace_s\":" << a.grace_s << ",\"move_to\":"
      << JsonEscape(a.to_node >= 0 && a.to_node < static_cast<int>(st.nodes.size()) ? st.nodes[a.to_node].name : "")
      << ",\"reason\":" << JsonEscape(a.reason) << "}";
  }
  o << "],\"waits\":[";
  for (size_t i = 0; i < d.waits.size(); ++i) {
    const auto& w = d.waits[i];
    o << (i ? "," : "") << "{\"job\":" << JsonEscape(w.job) << ",\"waited_s\":" << w.waited_s
      << ",\"est_wait_s\":" << (std::isinf(w.est_wait_s) ? -1.0 : w.est_wait_s)
      << ",\"suggestion\":" << JsonEscape(w.suggestion) << "}";
  }
  o << "]}\n";
  return o.str();
}

}  // namespace preempt::sched
