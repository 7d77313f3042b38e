#include "preempt/sched/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "preempt/log.h"
#include "preempt/sched/executor.h"
#include "preempt/sched/plan.h"
#include "json_checks.h"

extern char** environ;

namespace preempt::sched {
namespace {

struct Proc {
  const RunJobSpec* spec = nullptr;
  bool arrived = false, done = false;
  pid_t pid = -1;
  std::vector<int> slots;
  double start_unix = 0;
  bool sigterm_sent = false;
  double kill_at = 0;
  bool killed = false;
  int64_t acked_logged = 0;
  std::string hints_path, request_path;
};

// The launcher as an Executor: child processes on virtual GPU slots of one node.
class Launcher final : public Executor {
 public:
  Launcher(const std::vector<RunJobSpec>& specs, const RunOptions& opt, std::vector<RunEvent>* events)
      : specs_(specs), opt_(opt), events_(events), procs_(specs.size()), slot_owner_(opt.slots, -1) {}
  ~Launcher();

  Status run();

  Status start(const Job& j, const JobAction& a) override;
  Status request_checkpoint(const Job& j, int64_t request_id, const JobAction& a) override;
  Status evict(const Job& j, const JobAction& a) override;

 private:
  Status prepare();
  void emit(const std::string& kind, const std::string& job, const std::string& detail);
  void arrivals();
  bool after_files_exist(const RunJobSpec& spec) const;
  void exits();
  void escalate();
  void refresh_hints();
  pid_t spawn(const Job& j, const std::string& devices, int* fork_errno);

  const std::vector<RunJobSpec>& specs_;
  const RunOptions& opt_;
  std::vector<RunEvent>* events_;
  std::vector<Proc> procs_;
  std::vector<int> slot_owner_;
  ClusterState st_;
  FILE* log_ = nullptr;
  double t0_ = 0, now_ = 0;
  int64_t next_request_ = 0;
};

Launcher::~Launcher() {
  // Leave nothing behind.
  for (auto& p : procs_) {
    if (p.pid > 0) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, nullptr, 0);
      p.pid = -1;
    }
  }
  if (log_) fclose(log_);
}

void Launcher::emit(const std::string& kind, const std::string& job, const std::string& detail) {
  RunEvent e{NowUnix() - t0_, kind, job, detail};
  if (log_) {
    fprintf(log_, "t=%.3f %s %s %s\n", e.t, kind.c_str(), job.c_str(), detail.c_str());
    fflush(log_);
  }
  PREEMPT_LOG_INFO("sched run: t=%.3f %s %s %s", e.t, kind.c_str(), job.c_str(), detail.c_str());
  if (events_) events_->push_back(std::move(e));
}

Status Launcher::prepare() {
  if (opt_.slots < 1) return Status(StatusCode::kInvalidArgument, "run: slots must be >= 1");
  if (opt_.work_dir.empty()) return Status(StatusCode::kInvalidArgument, "run: work_dir is empty");
  for (const RunJobSpec& spec : specs_) {
    if (spec.argv.empty()) return Status(StatusCode::kInvalidArgument, "run: job " + spec.id + " has no command");
    if (spec.gpus > opt_.slots)
      return Status(StatusCode::kInvalidArgument, "run: job " + spec.id + " needs more GPUs than slots");
    for (const std::string& f : spec.after_files)
      if (f.empty()) return Status(StatusCode::kInvalidArgument, "run: job " + spec.id + ": after_files has an empty path");
  }
  ::mkdir(opt_.work_dir.c_str(), 0755);
  t0_ = NowUnix();
  log_ = opt_.event_log.empty() ? nullptr : fopen(opt_.event_log.c_str(), "a");
  st_.nodes.push_back({"local", opt_.slots});
  for (size_t i = 0; i < specs_.size(); ++i) {
    procs_[i].spec = &specs_[i];
    procs_[i].hints_path = opt_.work_dir + "/" + specs_[i].id + ".hints.json";
    procs_[i].request_path = procs_[i].hints_path + ".request";
    ::unlink(procs_[i].hints_path.c_str());
    ::unlink(procs_[i].request_path.c_str());
  }
  return Status::OK();
}

bool Launcher::after_files_exist(const RunJobSpec& spec) const {
  for (const std::string& f : spec.after_files) {
    const std::string path = f[0] == '/' ? f : opt_.work_dir + "/" + f;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return false;
  }
  return true;
}

void Launcher::arrivals() {
  for (size_t i = 0; i < procs_.size(); ++i) {
    Proc& p = procs_[i];
    if (p.arrived || now_ - t0_ < p.spec->submit_after_s || !after_files_exist(*p.spec)) continue;
    p.arrived = true;
    Job j;
    j.id = p.spec->id;
    j.cls = p.spec->cls;
    j.queue = p.spec->queue;
    j.gpus = p.spec->gpus;
    j.submit_time = now_;
    j.user = static_cast<int64_t>(i);
    st_.jobs.push_back(std::move(j));
    emit("arrive", p.spec->id, std::string(PriorityClassName(p.spec->cls)) + " gpus=" + std::to_string(p.spec->gpus));
  }
}

// Reaps exited children: preempted ones (exited after our SIGTERM) are requeued, the others are
// done or failed and leave the cluster.
void Launcher::exits() {
  for (size_t k = 0; k < st_.jobs.size();) {
    Job& j = st_.jobs[k];
    Proc& p = procs_[j.user];
    int wstatus = 0;
    if (p.pid <= 0 || ::waitpid(p.pid, &wstatus, WNOHANG) != p.pid) {
      ++k;
      continue;
    }
    std::string how = WIFEXITED(wstatus) ? "exit=" + std::to_string(WEXITSTATUS(wstatus))
                                         : std::string("signal=") + strsignal(WTERMSIG(wstatus));
    bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    p.pid = -1;
    for (int s : p.slots) slot_owner_[s] = -1;
    p.slots.clear();
    ::unlink(p.request_path.c_str());
    if (p.sigterm_sent && !ok) {
      emit(j.move_to >= 0 ? "moved" : "preempted", j.id, how + (p.killed ? " (SIGKILLed)" : ""));
      RequeueAfterExit(now_, &j);
      p.sigterm_sent = p.killed = false;
      ++k;
      continue;
    }
    emit(ok ? "done" : "failed", j.id, how);
    p.done = true;
    st_.jobs.erase(st_.jobs.begin() + static_cast<long>(k));
  }
}

// SIGTERM -> SIGKILL after the grace period.
void Launcher::escalate() {
  for (auto& p : procs_) {
    if (p.pid > 0 && p.sigterm_sent && !p.killed && now_ >= p.kill_at) {
      ::kill(p.pid, SIGKILL);
      p.killed = true;
      emit("kill", p.spec->id, "grace period of " + std::to_string(p.spec->grace_s) + " s passed");
    }
  }
}

// Hints of placed jobs (only those written by the current run count).
void Launcher::refresh_hints() {
  for (Job& j : st_.jobs) {
    if (j.phase == JobPhase::kPending) continue;
    Proc& p = procs_[j.user];
    Hints h;
    if (!preempt::ReadHints(p.hints_path, &h).ok() || h.updated_unix < p.start_unix - 0.5) continue;
    j.hints = h;
    if (j.phase == JobPhase::kCheckpointing && h.request_ack >= j.request_id && p.acked_logged < j.request_id) {
      p.acked_logged = j.request_id;
      emit("ack", j.id, "request " + std::to_string(j.request_id) + " committed at step " +
                            std::to_string(h.last_commit.step));
    }
  }
}

Status Launcher::run() {
  PREEMPT_RETURN_IF_ERROR(prepare());
  for (;;) {
    now_ = NowUnix();
    if (now_ - t0_ > opt_.timeout_s)
      return Status(StatusCode::kDeadlineExceeded, "run: timeout after " + std::to_string(opt_.timeout_s) + " s");
    arrivals();
    exits();
    escalate();
    if (std::all_of(procs_.begin(), procs_.end(), [](const Proc& p) { return p.done; })) return Status::OK();
    refresh_hints();
    st_.now = now_;
    // Refused actions (GPUs not yet released, a failed fork or request) are decided again next tick.
    (void)ExecuteDecisions(Decide(st_, opt_.policy), now_, this, &st_, &next_request_).ok();
    std::this_thread::sleep_for(std::chrono::duration<double>(opt_.tick_s));
  }
}

// Forks and execs the job's command with its environment (everything built before fork: only
// exec and _exit after it). Returns the pid, or -1 with fork's errno in *fork_errno.
pid_t Launcher::spawn(const Job& j, const std::string& devices, int* fork_errno) {
  const Proc& p = procs_[j.user];
  std::vector<std::string> env_store = {
      "PREEMPT_JOB_ID=" + j.id, "PREEMPT_HINTS_FILE=" + p.hints_path,
      "PREEMPT_REQUEST_FILE=" + p.request_path, "PREEMPT_GRACE_S=" + std::to_string(p.spec->grace_s),
      "CUDA_VISIBLE_DEVICES=" + devices};
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (key != "PREEMPT_JOB_ID" && key != "PREEMPT_HINTS_FILE" && key != "PREEMPT_REQUEST_FILE" &&
        key != "PREEMPT_GRACE_S" && key != "CUDA_VISIBLE_DEVICES")
      env_store.push_back(kv);
  }
  std::vector<char*> envp, argv;
  for (auto& kv : env_store) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_store = p.spec->argv;
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) *fork_errno = errno;
  if (pid == 0) {
    ::execvpe(argv[0], argv.data(), envp.data());
    static const char msg[] = "preempt-sched: exec failed\n";
    ssize_t ignored = ::write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
  }
  return pid;
}

Status Launcher::start(const Job& j, const JobAction& a) {
  Proc& p = procs_[j.user];
  std::vector<int> slots;
  for (int s = 0; s < opt_.slots && static_cast<int>(slots.size()) < j.gpus; ++s)
    if (slot_owner_[s] < 0) slots.push_back(s);
  if (static_cast<int>(slots.size()) < j.gpus) return Status(StatusCode::kUnavailable, "GPUs not yet released");
  std::string devices;
  for (int s : slots) devices += (devices.empty() ? "" : ",") + std::to_string(s);
  ::unlink(p.request_path.c_str());
  int fork_errno = 0;
  pid_t pid = spawn(j, devices, &fork_errno);
  if (pid < 0) {
    std::string why = std::string("fork: ") + strerror(fork_errno);
    emit("failed", j.id, why);
    return Status(StatusCode::kIoError, why);
  }
  p.pid = pid;
  p.slots = slots;
  for (int s : slots) slot_owner_[s] = static_cast<int>(j.user);
  p.start_unix = now_;
  emit("start", j.id, "pid=" + std::to_string(pid) + " slots=" + devices + " # " + a.reason);
  return Status::OK();
}

Status Launcher::request_checkpoint(const Job& j, int64_t request_id, const JobAction& a) {
  CheckpointRequest req;
  req.id = request_id;
  Status s = WriteCheckpointRequest(procs_[j.user].request_path, req);
  if (!s.ok()) {
    emit("request-failed", j.id, s.to_string());
    return s;
  }
  const std::string whom = a.for_job.empty() ? "ahead of need" : "for " + a.for_job;
  emit("request", j.id, "id=" + std::to_string(req.id) + " " + whom + " # " + a.reason);
  return Status::OK();
}

Status Launcher::evict(const Job& j, const JobAction& a) {
  Proc& p = procs_[j.user];
  // grace_s: < 0 the job's own grace period, 0 kill at once, > 0 at most that long.
  double grace = a.grace_s < 0 ? p.spec->grace_s : std::min(a.grace_s, p.spec->grace_s);
  if (p.pid > 0 && !p.sigterm_sent) {
    ::kill(p.pid, grace > 0 ? SIGTERM : SIGKILL);
    p.sigterm_sent = true;
    p.killed = grace <= 0;
    p.kill_at = now_ + grace;
  }
  emit("evict", j.id, std::string(grace > 0 ? "SIGTERM" : "SIGKILL") + " for " + a.for_job + " # " + a.reason);
  return Status::OK();
}

}  // namespace

Status RunJobs(const std::vector<RunJobSpec>& specs, const RunOptions& opt, std::vector<RunEvent>* events) {
  Launcher launcher(specs, opt, events);
  return launcher.run();
}

Status LoadRunSpec(const std::string& path, std::vector<RunJobSpec>* jobs, RunOptions* opt) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, "run spec " + path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseRunSpec(ss.str(), path, jobs, opt);
}

Status ParseRunSpec(const std::string& text, const std::string& path, std::vector<RunJobSpec>* jobs, RunOptions* opt) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  if (doc.HasParseError() || !doc.IsObject())
    return Status(StatusCode::kCorruption, "run spec " + path + ": invalid JSON");
  auto err = [&](const std::string& m) { return Status(StatusCode::kCorruption, "run spec " + path + ": " + m); };
  const std::string unknown = json_checks::UnknownMember(doc, {"slots", "work_dir", "timeout_s", "policy", "jobs"});
  if (!unknown.empty()) return err("unknown field '" + unknown + "'");
  if (doc.HasMember("slots")) {
    if (!doc["slots"].IsInt() || doc["slots"].GetInt() < 1) return err("field 'slots': expected an integer >= 1");
    opt->slots = doc["slots"].GetInt();
  }
  if (json_checks::NotANonEmptyString(doc, "work_dir")) return err("field 'work_dir': expected a non-empty string");
  if (doc.HasMember("work_dir")) opt->work_dir = doc["work_dir"].GetString();
  if (doc.HasMember("timeout_s")) {
    if (!doc["timeout_s"].IsNumber() || !(doc["timeout_s"].GetDouble() > 0 && doc["timeout_s"].GetDouble() <= 1e9))
      return err("field 'timeout_s': expected seconds in (0, 1e9]");
    opt->timeout_s = doc["timeout_s"].GetDouble();
  }
  if (doc.HasMember("policy")) {
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    doc["policy"].Accept(w);
    Status s = PolicyFromJson(sb.GetString(), &opt->policy);
    if (!s.ok()) return s.with_context("run spec " + path);
  }
  if (!doc.HasMember("jobs") || !doc["jobs"].IsArray()) return err("field 'jobs': expected an array");
  std::set<std::string> ids;
  auto seconds = [&](const rapidjson::Value& o, const char* key, double* out, const RunJobSpec& j) -> Status {
    if (!o.HasMember(key)) return Status::OK();
    if (!o[key].IsNumber() || !(o[key].GetDouble() >= 0 && o[key].GetDouble() <= 1e9))
      return err("job " + j.id + ": field '" + key + "': expected seconds in [0, 1e9]");
    *out = o[key].GetDouble();
    return Status::OK();
  };
  for (const auto& o : doc["jobs"].GetArray()) {
    RunJobSpec j;
    if (!o.IsObject() || !o.HasMember("id") || !o["id"].IsString()) return err("field 'jobs[].id': missing");
    j.id = o["id"].GetString();
    if (j.id.empty() || j.id.find('/') != std::string::npos || j.id == "." || j.id == "..")
      return err("job id '" + j.id + "' must be a plain name");
    // Each job's hints and request files are named after its id.
    if (!ids.insert(j.id).second) return err("job id '" + j.id + "' twice");
    const std::string unknown_field = json_checks::UnknownMember(
        o, {"id", "class", "queue", "gpus", "submit_after_s", "after_files", "grace_s", "command"});
    if (!unknown_field.empty()) return err("job " + j.id + ": unknown field '" + unknown_field + "'");
    if (o.HasMember("class") && (!o["class"].IsString() || !ParsePriorityClass(o["class"].GetString(), &j.cls)))
      return err("job " + j.id + ": field 'class': expected low|medium|high");
    if (json_checks::NotANonEmptyString(o, "queue"))
      return err("job " + j.id + ": field 'queue': expected a non-empty string");
    if (o.HasMember("queue")) j.queue = o["queue"].GetString();
    if (o.HasMember("gpus")) {
      if (!o["gpus"].IsInt() || o["gpus"].GetInt() < 1 || o["gpus"].GetInt() > opt->slots)
        return err("job " + j.id + ": field 'gpus': expected an integer in [1, slots = " + std::to_string(opt->slots) +
                   "]");
      j.gpus = o["gpus"].GetInt();
    }
    PREEMPT_RETURN_IF_ERROR(seconds(o, "submit_after_s", &j.submit_after_s, j));
    if (o.HasMember("after_files")) {
      const auto& files = o["after_files"];
      if (!files.IsArray()) return err("job " + j.id + ": field 'after_files': expected an array of paths");
      for (const auto& f : files.GetArray()) {
        if (!f.IsString() || f.GetStringLength() == 0 || std::strlen(f.GetString()) != f.GetStringLength())
          return err("job " + j.id + ": field 'after_files': expected non-empty paths");
        j.after_files.push_back(f.GetString());
      }
    }
    PREEMPT_RETURN_IF_ERROR(seconds(o, "grace_s", &j.grace_s, j));
    if (!o.HasMember("command") || !o["command"].IsArray() || o["command"].Empty())
      return err("job " + j.id + ": field 'command': expected a non-empty array of strings");
    for (const auto& a : o["command"].GetArray()) {
      if (!a.IsString()) return err("job " + j.id + ": field 'command': expected strings");
      j.argv.push_back(a.GetString());
    }
    jobs->push_back(std::move(j));
  }
  return Status::OK();
}

}  // namespace preempt::sched
