// SLURM's task environment and command output parsers (no cluster needed).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "preempt/sched/slurm.h"
#include "preempt/slurm_env.h"

namespace preempt {
namespace {

EnvLookup Env(std::map<std::string, std::string> m) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [held](const char* k) -> const char* {
    auto it = held->find(k);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(SlurmEnv, ReadsRankWorldAndRestartsAndRejectsBadValuesByName) {
  SlurmTask t;
  ASSERT_TRUE(ReadSlurmTask(Env({}), &t).ok());
  EXPECT_FALSE(t.in_slurm);
  ASSERT_TRUE(ReadSlurmTask(Env({{"SLURM_JOB_ID", "42"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                                 {"SLURM_RESTART_COUNT", "3"}, {"SLURM_JOB_PARTITION", "low"}}),
                            &t).ok());
  EXPECT_TRUE(t.in_slurm);
  EXPECT_EQ(t.job_id, "42");
  EXPECT_EQ(t.rank, 1);
  EXPECT_EQ(t.world_size, 2);
  EXPECT_EQ(t.restart_count, 3);
  EXPECT_EQ(t.partition, "low");
  Status s = ReadSlurmTask(Env({{"SLURM_JOB_ID", "42"}, {"SLURM_PROCID", "x"}}), &t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("SLURM_PROCID"), std::string::npos) << s.to_string();
  s = ReadSlurmTask(Env({{"SLURM_JOB_ID", "42"}, {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}}), &t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

TEST(SlurmEnv, RequeuesOnlyRankZeroAfterACommittedStopOnARequeueSignal) {
  SlurmTask t;
  t.in_slurm = true;
  t.job_id = "7";
  SlurmRequeueOptions o;
  ASSERT_TRUE(ReadSlurmRequeueOptions(Env({}), &o).ok());
  o.scontrol = "true";  // stands in for `scontrol requeue 7`
  o.requeue_preempted = false;
  Status err;
  EXPECT_EQ(RequeueAfterStop(t, o, SIGUSR1, true, &err), SelfRequeue::kRequeued);
  EXPECT_EQ(RequeueAfterStop(t, o, SIGUSR1, false, &err), SelfRequeue::kNotCommitted);
  EXPECT_EQ(RequeueAfterStop(t, o, SIGTERM, true, &err), SelfRequeue::kOtherSignal);
  t.rank = 1;
  EXPECT_EQ(RequeueAfterStop(t, o, SIGUSR1, true, &err), SelfRequeue::kNotRankZero);
  t.rank = 0;
  o.scontrol = "false";
  EXPECT_EQ(RequeueAfterStop(t, o, SIGUSR1, true, &err), SelfRequeue::kFailed);
  EXPECT_FALSE(err.ok());
  EXPECT_EQ(ReadSlurmRequeueOptions(Env({{"PREEMPT_SLURM_REQUEUE_ON", "BOGUS"}}), &o).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSlurmRequeueOptions(Env({{"PREEMPT_SLURM_REQUEUE_PREEMPTED", "yes"}}), &o).code(),
            StatusCode::kInvalidArgument);
}

TEST(SlurmParse, SqueueJsonPartitionsNodesAndHintsLocation) {
  std::vector<sched::SlurmJob> jobs;
  ASSERT_TRUE(sched::ParseSqueueJson(
                  R"({"jobs":[{"job_id":12,"partition":"low","job_state":"RUNNING","tres_per_node":"gres:gpu:2",)"
                  R"("submit_time":100,"start_time":{"set":true,"number":110},"restart_cnt":1,"nodes":"vm",)"
                  R"("comment":"preempt-hints=/h/%j.json"}]})",
                  "t", &jobs).ok());
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].id, "12");
  EXPECT_EQ(jobs[0].gpus, 2);
  EXPECT_EQ(jobs[0].start_unix, 110);
  EXPECT_EQ(jobs[0].restarts, 1);
  EXPECT_EQ(sched::HintsPathForJob(jobs[0], "/d"), "/h/12.json");
  jobs[0].comment.clear();
  EXPECT_EQ(sched::HintsPathForJob(jobs[0], "/d"), "/d/12.hints.json");
  Status s = sched::ParseSqueueJson(R"({"jobs":[{"job_id":"x"}]})", "squeue", &jobs);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("job_id"), std::string::npos);
  std::vector<sched::SlurmPartition> parts;
  ASSERT_TRUE(sched::ParsePartitions("PartitionName=low PriorityTier=1 GraceTime=20 PreemptMode=REQUEUE\n", &parts).ok());
  EXPECT_EQ(parts[0].grace_time_s, 20);
  std::vector<sched::Node> nodes;
  ASSERT_TRUE(sched::ParseNodes("NodeName=vm Arch=x86_64 Gres=gpu:4 State=IDLE\n", &nodes).ok());
  EXPECT_EQ(nodes[0].gpus, 4);
  EXPECT_EQ(sched::ParseKillWait("KillWait                = 10 sec\n"), 10);
}

}  // namespace
}  // namespace preempt
