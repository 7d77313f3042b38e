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
#include "preempt/sched/plan.h"

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

}  // namespace

Status RunJobs(const std::vector<RunJobSpec>& specs, const RunOptions& opt, std::vector<RunEvent>* events) {
  if (opt.slots < 1) return Status(StatusCode::kInvalidArgument, "run: slots must be >= 1");
  if (opt.work_dir.empty()) return Status(StatusCode::kInvalidArgument, "run: work_dir is empty");
  ::mkdir(opt.work_dir.c_str(), 0755);
  const double t0 = NowUnix();
  FILE* log = opt.event_log.empty() ? nullptr : fopen(opt.event_log.c_str(), "a");
  auto emit = [&](const std::string& kind, const std::string& job, const std::string& detail) {
    RunEvent e{NowUnix() - t0, kind, job, detail};
    if (log) {
      fprintf(log, "t=%.3f %s %s %s\n", e.t, kind.c_str(), job.c_str(), detail.c_str());
      fflush(log);
    }
    PREEMPT_LOG_INFO("sched run: t=%.3f %s %s %s", e.t, kind.c_str(), job.c_str(), detail.c_str());
    if (events) events->push_back(std::move(e));
  };

  ClusterState st;
  st.nodes.push_back({"local", opt.slots});
  std::vector<Proc> procs(specs.size());
  std::vector<int> slot_owner(opt.slots, -1);
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].argv.empty()) return Status(StatusCode::kInvalidArgument, "run: job " + specs[i].id + " has no command");
    if (specs[i].gpus > opt.slots)
      return Status(StatusCode::kInvalidArgument, "run: job " + specs[i].id + " needs more GPUs than slots");
    procs[i].spec = &specs[i];
    procs[i].hints_path = opt.work_dir + "/" + specs[i].id + ".hints.json";
    procs[i].request_path = procs[i].hints_path + ".request";
    ::unlink(procs[i].hints_path.c_str());
    ::unlink(procs[i].request_path.c_str());
  }
  auto job_of = [&](const std::string& id) -> int {
    for (size_t k = 0; k < st.jobs.size(); ++k)
      if (st.jobs[k].id == id) return static_cast<int>(k);
    return -1;
  };
  int64_t next_request = 0;
  Status result;

  for (;;) {
    double now = NowUnix();
    if (now - t0 > opt.timeout_s) {
      result = Status(StatusCode::kDeadlineExceeded, "run: timeout after " + std::to_string(opt.timeout_s) + " s");
      break;
    }
    // Arrivals.
    for (size_t i = 0; i < procs.size(); ++i) {
      Proc& p = procs[i];
      if (p.arrived || now - t0 < p.spec->submit_after_s) continue;
      p.arrived = true;
      Job j;
      j.id = p.spec->id;
      j.cls = p.spec->cls;
      j.queue = p.spec->queue;
      j.gpus = p.spec->gpus;
      j.submit_time = now;
      j.user = static_cast<int64_t>(i);
      st.jobs.push_back(std::move(j));
      emit("arrive", p.spec->id, std::string(PriorityClassName(p.spec->cls)) + " gpus=" + std::to_string(p.spec->gpus));
    }
    // Exits.
    for (size_t k = 0; k < st.jobs.size();) {
      Job& j = st.jobs[k];
      Proc& p = procs[j.user];
      int wstatus = 0;
      if (p.pid <= 0 || ::waitpid(p.pid, &wstatus, WNOHANG) != p.pid) {
        ++k;
        continue;
      }
      std::string how = WIFEXITED(wstatus) ? "exit=" + std::to_string(WEXITSTATUS(wstatus))
                                           : std::string("signal=") + strsignal(WTERMSIG(wstatus));
      bool ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
      p.pid = -1;
      for (int s : p.slots) slot_owner[s] = -1;
      p.slots.clear();
      ::unlink(p.request_path.c_str());
      if (p.sigterm_sent && !ok) {
        bool moved = j.move_to >= 0;
        emit(moved ? "moved" : "preempted", j.id, how + (p.killed ? " (SIGKILLed)" : ""));
        if (moved)
          j.RequeueAfterMove(now);
        else
          j.RequeueAfterPreemption(now);
        p.sigterm_sent = p.killed = false;
        ++k;
        continue;
      }
      emit(ok ? "done" : "failed", j.id, how);
      p.done = true;
      st.jobs.erase(st.jobs.begin() + static_cast<long>(k));
    }
    // Escalate SIGTERM → SIGKILL after the grace period.
    for (auto& p : procs) {
      if (p.pid > 0 && p.sigterm_sent && !p.killed && now >= p.kill_at) {
        ::kill(p.pid, SIGKILL);
        p.killed = true;
        emit("kill", p.spec->id, "grace period of " + std::to_string(p.spec->grace_s) + " s passed");
      }
    }
    bool all_done = std::all_of(procs.begin(), procs.end(), [](const Proc& p) { return p.done; });
    if (all_done) break;

    // Hints of placed jobs (only those written by the current run count).
    for (Job& j : st.jobs) {
      if (j.phase == JobPhase::kPending) continue;
      Proc& p = procs[j.user];
      Hints h;
      if (ReadHints(p.hints_path, &h).ok() && h.updated_unix >= p.start_unix - 0.5) {
        j.hints = h;
        if (j.phase == JobPhase::kCheckpointing && h.request_ack >= j.request_id && p.acked_logged < j.request_id) {
          p.acked_logged = j.request_id;
          emit("ack", j.id, "request " + std::to_string(j.request_id) + " committed at step " +
                                std::to_string(h.last_commit.step));
        }
      }
    }
    st.now = now;
    Decisions d = Decide(st, opt.policy);
    for (const JobAction& a : d.actions) {
      int k = job_of(a.job);
      if (k < 0) continue;
      Job& j = st.jobs[k];
      Proc& p = procs[j.user];
      switch (a.kind) {
        case ActionKind::kStart: {
          std::vector<int> slots;
          for (int s = 0; s < opt.slots && static_cast<int>(slots.size()) < j.gpus; ++s)
            if (slot_owner[s] < 0) slots.push_back(s);
          if (static_cast<int>(slots.size()) < j.gpus) break;  // GPUs not yet released
          std::string devices;
          for (int s : slots) devices += (devices.empty() ? "" : ",") + std::to_string(s);
          ::unlink(p.request_path.c_str());
          // Everything the child needs is built before fork (only exec and _exit after it).
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
          if (pid < 0) {
            emit("failed", j.id, std::string("fork: ") + strerror(errno));
            break;
          }
          if (pid == 0) {
            ::execvpe(argv[0], argv.data(), envp.data());
            static const char msg[] = "preempt-sched: exec failed\n";
            ssize_t ignored = ::write(2, msg, sizeof msg - 1);
            (void)ignored;
            _exit(127);
          }
          p.pid = pid;
          p.slots = slots;
          for (int s : slots) slot_owner[s] = static_cast<int>(j.user);
          p.start_unix = now;
          j.phase = JobPhase::kRunning;
          j.node = 0;
          j.move_to = -1;
          j.start_time = now;
          j.hints.reset();
          emit("start", j.id, "pid=" + std::to_string(pid) + " slots=" + devices + " # " + a.reason);
          break;
        }
        case ActionKind::kRequestCheckpoint: {
          CheckpointRequest req;
          req.id = ++next_request;
          Status s = WriteCheckpointRequest(p.request_path, req);
          if (!s.ok()) {
            emit("request-failed", j.id, s.ToString());
            break;
          }
          j.phase = JobPhase::kCheckpointing;
          if (a.to_node >= 0) j.move_to = a.to_node;
          j.request_id = req.id;
          j.request_time = now;
          j.preemptor = a.for_job;
          emit("request", j.id, "id=" + std::to_string(req.id) + " for " + a.for_job + " # " + a.reason);
          break;
        }
        case ActionKind::kEvict: {
          // grace_s: < 0 the job's own grace period, 0 kill at once, > 0 at most that long.
          double grace = a.grace_s < 0 ? p.spec->grace_s : std::min(a.grace_s, p.spec->grace_s);
          if (p.pid > 0 && !p.sigterm_sent) {
            ::kill(p.pid, grace > 0 ? SIGTERM : SIGKILL);
            p.sigterm_sent = true;
            p.killed = grace <= 0;
            p.kill_at = now + grace;
          }
          j.phase = JobPhase::kEvicting;
          if (a.to_node >= 0) j.move_to = a.to_node;
          j.preemptor = a.for_job;
          emit("evict", j.id, std::string(grace > 0 ? "SIGTERM" : "SIGKILL") + " for " + a.for_job + " # " + a.reason);
          break;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(opt.tick_s));
  }
  // Leave nothing behind.
  for (auto& p : procs) {
    if (p.pid > 0) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, nullptr, 0);
      p.pid = -1;
    }
  }
  if (log) fclose(log);
  return result;
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
  if (doc.HasMember("slots")) {
    if (!doc["slots"].IsInt() || doc["slots"].GetInt() < 1) return err("field 'slots': expected an integer >= 1");
    opt->slots = doc["slots"].GetInt();
  }
  if (doc.HasMember("work_dir") && doc["work_dir"].IsString()) opt->work_dir = doc["work_dir"].GetString();
  if (doc.HasMember("timeout_s")) {
    if (!doc["timeout_s"].IsNumber() || !(doc["timeout_s"].GetDouble() > 0 && doc["timeout_s"].GetDouble() <= 1e9))
      return err("field 'timeout_s': expected seconds in (0, 1e9]");
    opt->timeout_s = doc["timeout_s"].GetDouble();
  }
  if (doc.HasMember("policy")) {
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> w(sb);
    doc["policy"].Accept(w);
    PREEMPT_RETURN_IF_ERROR(PolicyFromJson(sb.GetString(), &opt->policy));
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
    if (o.HasMember("class") && (!o["class"].IsString() || !ParsePriorityClass(o["class"].GetString(), &j.cls)))
      return err("job " + j.id + ": field 'class': expected low|medium|high");
    if (o.HasMember("queue") && o["queue"].IsString()) j.queue = o["queue"].GetString();
    if (o.HasMember("gpus")) {
      if (!o["gpus"].IsInt() || o["gpus"].GetInt() < 1 || o["gpus"].GetInt() > opt->slots)
        return err("job " + j.id + ": field 'gpus': expected an integer in [1, slots = " + std::to_string(opt->slots) +
                   "]");
      j.gpus = o["gpus"].GetInt();
    }
    PREEMPT_RETURN_IF_ERROR(seconds(o, "submit_after_s", &j.submit_after_s, j));
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
