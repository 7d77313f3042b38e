#include "preempt/hints.h"

#include "preempt/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "preempt/log.h"

namespace preempt {
namespace {

Status ReadWholeFile(const std::string& path, size_t max_bytes, std::string* out) {
  return FileSystem::Default()->read_file(path, max_bytes, out);
}

// Field accessors that produce errors naming the origin and the field.
class FieldReader {
 public:
  FieldReader(std::string what, std::string origin) : what_(std::move(what)), origin_(std::move(origin)) {}

  Status err(const std::string& field, const std::string& msg) const {
    return Status(StatusCode::kCorruption, what_ + " " + origin_ + ": field '" + field + "': " + msg);
  }
  // `required`: missing is an error; otherwise *out keeps its value.
  Status number(const rapidjson::Value& obj, const char* name, const std::string& full, bool required,
                double* out) const {
    auto it = obj.FindMember(name);
    if (it == obj.MemberEnd()) return required ? err(full, "missing") : Status::OK();
    if (!it->value.IsNumber()) return err(full, "expected a number");
    double v = it->value.GetDouble();
    if (!std::isfinite(v)) return err(full, "not finite");
    *out = v;
    return Status::OK();
  }
  Status integer(const rapidjson::Value& obj, const char* name, const std::string& full, bool required,
             int64_t* out) const {
    auto it = obj.FindMember(name);
    if (it == obj.MemberEnd()) return required ? err(full, "missing") : Status::OK();
    if (!it->value.IsInt64()) return err(full, "expected an integer");
    *out = it->value.GetInt64();
    return Status::OK();
  }
  Status text(const rapidjson::Value& obj, const char* name, const std::string& full, bool required,
                std::string* out) const {
    auto it = obj.FindMember(name);
    if (it == obj.MemberEnd()) return required ? err(full, "missing") : Status::OK();
    if (!it->value.IsString()) return err(full, "expected a string");
    out->assign(it->value.GetString(), it->value.GetStringLength());
    return Status::OK();
  }
  Status object(const rapidjson::Value& obj, const char* name, bool required, const rapidjson::Value** out) const {
    *out = nullptr;
    auto it = obj.FindMember(name);
    if (it == obj.MemberEnd()) return required ? err(name, "missing") : Status::OK();
    if (!it->value.IsObject()) return err(name, "expected an object");
    *out = &it->value;
    return Status::OK();
  }

 private:
  std::string what_, origin_;
};

Status ParseDocument(const std::string& json, const std::string& what, const std::string& origin,
                     const char* schema, rapidjson::Document* doc) {
  // Full precision: a number reads back as the double that was written (the default parser can be
  // off by one unit in the last place, found by fuzz_sched on a hints round trip).
  doc->Parse<rapidjson::kParseFullPrecisionFlag>(json.c_str(), json.size());
  if (doc->HasParseError()) {
    return Status(StatusCode::kCorruption, what + " " + origin + ": invalid JSON at offset " +
                                               std::to_string(doc->GetErrorOffset()) + ": " +
                                               rapidjson::GetParseError_En(doc->GetParseError()));
  }
  if (!doc->IsObject()) return Status(StatusCode::kCorruption, what + " " + origin + ": not a JSON object");
  auto it = doc->FindMember("schema");
  if (it == doc->MemberEnd() || !it->value.IsString())
    return Status(StatusCode::kCorruption, what + " " + origin + ": field 'schema': missing");
  if (std::string(it->value.GetString()) != schema)
    return Status(StatusCode::kVersionMismatch, what + " " + origin + ": field 'schema': '" +
                                                    it->value.GetString() + "' is not '" + schema + "'");
  return Status::OK();
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

}  // namespace

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kTraining: return "training";
    case JobState::kCheckpointing: return "checkpointing";
    case JobState::kStopping: return "stopping";
    case JobState::kStopped: return "stopped";
  }
  return "training";
}

bool ParseJobState(const std::string& name, JobState* out) {
  for (JobState s : {JobState::kTraining, JobState::kCheckpointing, JobState::kStopping, JobState::kStopped}) {
    if (name == JobStateName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

double Hints::lost_work_at(double now_unix) const {
  if (state != JobState::kTraining && state != JobState::kCheckpointing) return lost_work_s;
  return lost_work_s + std::max(0.0, now_unix - updated_unix);
}

double NowUnix() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string HintsToJson(const Hints& h) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  w.Key("schema"); w.String(kHintsSchema);
  w.Key("job"); w.String(h.job.c_str(), static_cast<rapidjson::SizeType>(h.job.size()));
  w.Key("updated_unix"); w.Double(h.updated_unix);
  w.Key("state"); w.String(JobStateName(h.state));
  w.Key("step"); w.Int64(h.step);
  w.Key("step_time_s"); w.Double(h.step_time_s);
  w.Key("last_commit");
  w.StartObject();
  w.Key("step"); w.Int64(h.last_commit.step);
  w.Key("unix"); w.Double(h.last_commit.committed_at);
  w.Key("path"); w.String(h.last_commit.path.c_str(), static_cast<rapidjson::SizeType>(h.last_commit.path.size()));
  w.EndObject();
  w.Key("cost");
  w.StartObject();
  w.Key("bytes"); w.Uint64(h.cost.bytes);
  w.Key("drain_s"); w.Double(h.cost.drain_s);
  w.Key("stall_s"); w.Double(h.cost.stall_s);
  w.Key("persist_s"); w.Double(h.cost.persist_s);
  w.EndObject();
  w.Key("grace");
  w.StartObject();
  w.Key("needed_s"); w.Double(h.grace.needed_s);
  w.Key("granted_s"); w.Double(h.grace.granted_s);
  w.EndObject();
  w.Key("lost_work_s"); w.Double(h.lost_work_s);
  w.Key("gpus"); w.Int(h.gpus);
  w.Key("request_ack"); w.Int64(h.request_ack);
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize()) + "\n";
}

Status HintsFromJson(const std::string& json, const std::string& origin, Hints* out) {
  rapidjson::Document doc;
  PREEMPT_RETURN_IF_ERROR(ParseDocument(json, "hints", origin, kHintsSchema, &doc));
  FieldReader r("hints", origin);
  Hints h;
  PREEMPT_RETURN_IF_ERROR(r.text(doc, "job", "job", true, &h.job));
  if (h.job.empty()) return r.err("job", "empty");
  PREEMPT_RETURN_IF_ERROR(r.number(doc, "updated_unix", "updated_unix", true, &h.updated_unix));
  std::string state;
  PREEMPT_RETURN_IF_ERROR(r.text(doc, "state", "state", true, &state));
  if (!ParseJobState(state, &h.state)) return r.err("state", "unknown state '" + state + "'");
  PREEMPT_RETURN_IF_ERROR(r.integer(doc, "step", "step", true, &h.step));
  PREEMPT_RETURN_IF_ERROR(r.number(doc, "step_time_s", "step_time_s", false, &h.step_time_s));

  const rapidjson::Value* obj = nullptr;
  PREEMPT_RETURN_IF_ERROR(r.object(doc, "last_commit", true, &obj));
  PREEMPT_RETURN_IF_ERROR(r.integer(*obj, "step", "last_commit.step", true, &h.last_commit.step));
  PREEMPT_RETURN_IF_ERROR(r.number(*obj, "unix", "last_commit.unix", true, &h.last_commit.committed_at));
  PREEMPT_RETURN_IF_ERROR(r.text(*obj, "path", "last_commit.path", false, &h.last_commit.path));

  PREEMPT_RETURN_IF_ERROR(r.object(doc, "cost", true, &obj));
  int64_t bytes = 0;
  PREEMPT_RETURN_IF_ERROR(r.integer(*obj, "bytes", "cost.bytes", true, &bytes));
  if (bytes < 0) return r.err("cost.bytes", "negative");
  h.cost.bytes = static_cast<uint64_t>(bytes);
  PREEMPT_RETURN_IF_ERROR(r.number(*obj, "drain_s", "cost.drain_s", true, &h.cost.drain_s));
  PREEMPT_RETURN_IF_ERROR(r.number(*obj, "stall_s", "cost.stall_s", true, &h.cost.stall_s));
  PREEMPT_RETURN_IF_ERROR(r.number(*obj, "persist_s", "cost.persist_s", true, &h.cost.persist_s));

  PREEMPT_RETURN_IF_ERROR(r.object(doc, "grace", true, &obj));
  PREEMPT_RETURN_IF_ERROR(r.number(*obj, "needed_s", "grace.needed_s", true, &h.grace.needed_s));
  PREEMPT_RETURN_IF_ERROR(r.number(*obj, "granted_s", "grace.granted_s", false, &h.grace.granted_s));

  PREEMPT_RETURN_IF_ERROR(r.number(doc, "lost_work_s", "lost_work_s", true, &h.lost_work_s));
  int64_t gpus = 1;
  PREEMPT_RETURN_IF_ERROR(r.integer(doc, "gpus", "gpus", true, &gpus));
  if (gpus < 0 || gpus > 1000000) return r.err("gpus", "out of range");
  h.gpus = static_cast<int>(gpus);
  PREEMPT_RETURN_IF_ERROR(r.integer(doc, "request_ack", "request_ack", false, &h.request_ack));
  // Ranges: unix times in [0, 1e11], durations in [0, 1e9] s (about 31 years).
  for (auto [field, v] : {std::pair<const char*, double>{"updated_unix", h.updated_unix},
                          {"last_commit.unix", h.last_commit.committed_at}}) {
    if (!(v >= 0 && v <= 1e11)) return r.err(field, "not a unix time in [0, 1e11]");
  }
  for (auto [field, v] : {std::pair<const char*, double>{"step_time_s", h.step_time_s},
                          {"cost.drain_s", h.cost.drain_s},
                          {"cost.stall_s", h.cost.stall_s},
                          {"cost.persist_s", h.cost.persist_s},
                          {"grace.needed_s", h.grace.needed_s},
                          {"grace.granted_s", h.grace.granted_s},
                          {"lost_work_s", h.lost_work_s}}) {
    if (!(v >= 0 && v <= 1e9)) return r.err(field, v < 0 ? "negative" : "more than 1e9 s");
  }
  *out = std::move(h);
  return Status::OK();
}

Status WriteFileAtomic(const std::string& path, const std::string& data) {
  return FileSystem::Default()->write_file_atomic(path, data);
}

Status WriteHintsAtomic(const std::string& path, const Hints& h) {
  if (path.empty()) return Status(StatusCode::kInvalidArgument, "hints path is empty");
  return WriteFileAtomic(path, HintsToJson(h));
}

Status ReadHints(const std::string& path, Hints* out, double* age_s) {
  std::string data;
  PREEMPT_RETURN_IF_ERROR(ReadWholeFile(path, 1 << 20, &data));
  PREEMPT_RETURN_IF_ERROR(HintsFromJson(data, path, out));
  if (age_s) *age_s = NowUnix() - out->updated_unix;
  return Status::OK();
}

std::string HintsPathFromEnv() {
  const char* v = std::getenv("PREEMPT_HINTS_FILE");
  return v ? v : "";
}

// ---- CostTracker ----

CostTracker::CostTracker(size_t window, double ewma_alpha)
    : window_(std::max<size_t>(1, window)), alpha_(std::clamp(ewma_alpha, 0.0, 1.0)) {}

void CostTracker::add(const CostSample& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (count_ == 0) {
    ewma_ = s;
  } else {
    auto mix = [this](double old, double v) { return old + alpha_ * (v - old); };
    ewma_.bytes = static_cast<uint64_t>(std::llround(mix(static_cast<double>(ewma_.bytes), static_cast<double>(s.bytes))));
    ewma_.drain_s = mix(ewma_.drain_s, s.drain_s);
    ewma_.stall_s = mix(ewma_.stall_s, s.stall_s);
    ewma_.persist_s = mix(ewma_.persist_s, s.persist_s);
  }
  ++count_;
  recent_.push_back(s);
  if (recent_.size() > window_) recent_.pop_front();
}

size_t CostTracker::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

CostSample CostTracker::ewma() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ewma_;
}

CostSample CostTracker::p95() const {
  std::lock_guard<std::mutex> lock(mu_);
  CostSample out;
  if (recent_.empty()) return out;
  // Nearest-rank: the ceil(0.95 n)-th smallest value.
  size_t n = recent_.size();
  size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(n)));
  rank = std::clamp<size_t>(rank, 1, n) - 1;
  auto pick = [&](auto get) {
    std::vector<double> v;
    v.reserve(n);
    for (const auto& s : recent_) v.push_back(get(s));
    std::nth_element(v.begin(), v.begin() + static_cast<long>(rank), v.end());
    return v[rank];
  };
  out.bytes = static_cast<uint64_t>(pick([](const CostSample& s) { return static_cast<double>(s.bytes); }));
  out.drain_s = pick([](const CostSample& s) { return s.drain_s; });
  out.stall_s = pick([](const CostSample& s) { return s.stall_s; });
  out.persist_s = pick([](const CostSample& s) { return s.persist_s; });
  return out;
}

Hints::Cost CostTracker::p95_cost() const {
  CostSample p = p95();
  Hints::Cost c;
  c.bytes = p.bytes;
  c.drain_s = p.drain_s;
  c.stall_s = p.stall_s;
  c.persist_s = p.persist_s;
  return c;
}

void CostTracker::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  count_ = 0;
  ewma_ = CostSample{};
  recent_.clear();
}

std::vector<CostSample> CostTracker::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<CostSample>(recent_.begin(), recent_.end());
}

// ---- request channel ----

std::string RequestPathFor(const std::string& hints_path) {
  const char* v = std::getenv("PREEMPT_REQUEST_FILE");
  if (v && *v) return v;
  return hints_path + ".request";
}

std::string RequestToJson(const CheckpointRequest& r) {
  return std::string("{\"schema\":\"") + kRequestSchema + "\",\"action\":\"" + r.action +
         "\",\"id\":" + std::to_string(r.id) + "}\n";
}

Status RequestFromJson(const std::string& json, const std::string& origin, CheckpointRequest* out) {
  rapidjson::Document doc;
  PREEMPT_RETURN_IF_ERROR(ParseDocument(json, "request", origin, kRequestSchema, &doc));
  FieldReader r("request", origin);
  CheckpointRequest req;
  PREEMPT_RETURN_IF_ERROR(r.text(doc, "action", "action", true, &req.action));
  if (req.action != "checkpoint") return r.err("action", "unknown action '" + req.action + "'");
  PREEMPT_RETURN_IF_ERROR(r.integer(doc, "id", "id", true, &req.id));
  if (req.id <= 0) return r.err("id", "must be > 0");
  *out = std::move(req);
  return Status::OK();
}

Status WriteCheckpointRequest(const std::string& path, const CheckpointRequest& r) {
  if (r.id <= 0) return Status(StatusCode::kInvalidArgument, "checkpoint request id must be > 0");
  return WriteFileAtomic(path, RequestToJson(r));
}

Status ReadCheckpointRequest(const std::string& path, CheckpointRequest* out) {
  std::string data;
  PREEMPT_RETURN_IF_ERROR(ReadWholeFile(path, 4096, &data));
  return RequestFromJson(data, path, out);
}

RequestChannel::RequestChannel(std::string path, std::chrono::milliseconds min_interval, int64_t last_handled,
                               double fulfilled_before_unix)
    : path_(std::move(path)),
      min_interval_(min_interval),
      last_id_(last_handled),
      fulfilled_before_unix_(fulfilled_before_unix) {}

std::optional<CheckpointRequest> RequestChannel::poll() {
  auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return std::nullopt;
  next_check_ = now + min_interval_;
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) {
    have_stat_ = false;
    return std::nullopt;
  }
  if (have_stat_ && st.st_ino == ino_ && st.st_size == size_ && MtimeNs(st) == mtime_ns_) return std::nullopt;
  CheckpointRequest req;
  Status s = ReadCheckpointRequest(path_, &req);
  if (!s.ok()) {
    if (s.code() == StatusCode::kNotFound) {
      have_stat_ = false;
      return std::nullopt;
    }
    if (!warned_) PREEMPT_LOG_WARN("ignoring checkpoint request: %s", s.to_string().c_str());
    warned_ = true;
    // Remember the bad version so it is not re-parsed on every poll.
    have_stat_ = true;
    ino_ = st.st_ino;
    size_ = st.st_size;
    mtime_ns_ = MtimeNs(st);
    return std::nullopt;
  }
  have_stat_ = true;
  ino_ = st.st_ino;
  size_ = st.st_size;
  mtime_ns_ = MtimeNs(st);
  warned_ = false;
  if (req.id <= last_id_) return std::nullopt;
  last_id_ = req.id;
  if (mtime_ns_ / 1e9 < fulfilled_before_unix_) {
    fulfilled_id_ = req.id;
    PREEMPT_LOG_INFO("checkpoint request %lld in %s predates the commit this job resumed from: already fulfilled",
                     static_cast<long long>(req.id), path_.c_str());
    return std::nullopt;
  }
  return req;
}

}  // namespace preempt
