// Shared by the `preempt-sched run` end-to-end tests (stand-in trainer and real trainer): reading
// event lists and logs, the policy both use to exercise checkpoint-then-evict, and the checks of
// its order of events.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "preempt/sched/runner.h"

namespace preempt::sched::testing {

inline std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

inline std::string Joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

// Index of the nth event of `kind` for `job` (-1 when absent).
inline int IndexOf(const std::vector<RunEvent>& ev, const std::string& kind, const std::string& job, int nth = 0) {
  for (size_t i = 0; i < ev.size(); ++i)
    if (ev[i].kind == kind && ev[i].job == job && nth-- == 0) return static_cast<int>(i);
  return -1;
}

inline std::string EventsText(const std::vector<RunEvent>& ev) {
  std::string all;
  for (const auto& e : ev) all += std::to_string(e.t) + " " + e.kind + " " + e.job + " " + e.detail + "\n";
  return all;
}

// A job spec whose working directory <dir>/<id> is created; the caller sets argv.
inline RunJobSpec Spec(const std::string& dir, const std::string& id, PriorityClass cls, double at, double grace_s) {
  RunJobSpec j;
  j.id = id;
  j.cls = cls;
  j.submit_after_s = at;
  j.grace_s = grace_s;
  const std::string d = dir + "/" + id;
  EXPECT_EQ(::mkdir(d.c_str(), 0755), 0) << d;
  return j;
}

// `slots` virtual GPUs, work dir and event log under `dir`.
inline RunOptions Options(const std::string& dir, int slots, double timeout_s) {
  RunOptions opt;
  opt.slots = slots;
  opt.work_dir = dir + "/run";
  opt.event_log = dir + "/events.log";
  opt.timeout_s = timeout_s;
  return opt;
}

// Rules off that would get in the way of a seconds-long scenario, and checkpoint-then-evict end
// to end: request, commit, SIGTERM (the job's own stop save), exit.
inline void CheckpointThenEvictPolicy(PolicyOptions* p) {
  p->min_runtime_s = 0;
  p->cooldown_s = 0.2;
  p->reserved_headroom = 0;
  p->low_guaranteed_share = 0;
  p->sigterm_save = false;
  p->kill_now_max_lost_s = 0;
  p->kill_after_commit = false;
}

// `victim` was asked to checkpoint for `preemptor` and left in order — request → ack (commit
// durable) → evict (SIGTERM) → exit → the preemptor starts — without a SIGKILL; `bystander` was
// never touched; the victim restarted after the preemptor and all three finished.
inline void ExpectCheckpointThenEvict(const std::vector<RunEvent>& ev, const std::string& victim,
                                      const std::string& bystander, const std::string& preemptor,
                                      const std::string& all) {
  int req = IndexOf(ev, "request", victim);
  ASSERT_GE(req, 0) << all;
  EXPECT_NE(ev[req].detail.find("for " + preemptor), std::string::npos) << all;
  EXPECT_EQ(IndexOf(ev, "request", bystander), -1) << all;
  EXPECT_EQ(IndexOf(ev, "evict", bystander), -1) << all;
  int ack = IndexOf(ev, "ack", victim);
  int evict = IndexOf(ev, "evict", victim);
  int gone = IndexOf(ev, "preempted", victim);
  int start = IndexOf(ev, "start", preemptor);
  ASSERT_GE(ack, 0) << all;
  EXPECT_LT(req, ack) << all;
  EXPECT_LT(ack, evict) << all;
  EXPECT_LT(evict, gone) << all;
  EXPECT_LT(gone, start) << all;
  EXPECT_EQ(IndexOf(ev, "kill", victim), -1) << "victim needed SIGKILL\n" << all;
  EXPECT_GE(IndexOf(ev, "start", victim, 1), start) << all;
  for (const std::string& id : {victim, bystander, preemptor}) EXPECT_GE(IndexOf(ev, "done", id), 0) << id << "\n" << all;
}

}  // namespace preempt::sched::testing
