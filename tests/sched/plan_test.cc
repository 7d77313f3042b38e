// `plan` inputs: snapshot files with hint files, Kubernetes pod lists with hint annotations,
// policy overrides; and the decisions' formatting.
#include "preempt/sched/plan.h"

#include "preempt/sched/runner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "support/test_util.h"

namespace preempt::sched {
namespace {

using preempt::testing::TempDir;
using preempt::testing::WriteFileOrDie;

Hints H(double lost, double now) {
  Hints h;
  h.job = "x";
  h.updated_unix = now;
  h.lost_work_s = lost;
  h.cost.persist_s = 3;
  return h;
}

TEST(Plan, SnapshotWithHintFilesRanksTheCheaperVictim) {
  TempDir dir;
  const double now = 1764680000;
  ASSERT_TRUE(WriteHintsAtomic(dir / "a.json", H(2000, now)).ok());
  ASSERT_TRUE(WriteHintsAtomic(dir / "b.json", H(60, now)).ok());
  WriteFileOrDie(dir / "snap.json", R"({"schema":"preempt.snapshot/1","now_unix":1764680000,
    "nodes":[{"name":"n0","gpus":1},{"name":"n1","gpus":2}],
    "jobs":[{"id":"a","class":"low","gpus":1,"state":"running","node":"n0","start_unix":1764670000,"hints_file":"a.json"},
            {"id":"b","class":"low","gpus":1,"state":"running","node":"n1","start_unix":1764670000,"hints_file":"b.json"},
            {"id":"c","class":"low","gpus":1,"state":"running","node":"n1","start_unix":1764670000,"hints_file":"missing.json"},
            {"id":"h","class":"high","gpus":1,"state":"pending","submit_unix":1764679990}]})");
  ClusterState st;
  std::vector<std::string> notes;
  ASSERT_TRUE(LoadSnapshot(dir / "snap.json", &st, &notes).ok());
  ASSERT_EQ(st.jobs.size(), 4u);
  EXPECT_TRUE(st.jobs[0].hints.has_value());
  EXPECT_FALSE(st.jobs[2].hints.has_value());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("job c"), std::string::npos) << notes[0];
  // b has the least uncommitted work; c (unknown cost) is never taken as free.
  PolicyOptions pc = HintAwareNoRulesPolicy();
  pc.kill_now_max_lost_s = 0;  // b's 60 s uncommitted would otherwise be killed at once (below)
  Decisions d = Decide(st, pc);
  ASSERT_EQ(d.actions.size(), 1u) << FormatDecisions(st, d);
  EXPECT_EQ(d.actions[0].job, "b");
  {
    PolicyOptions kill_now = HintAwareNoRulesPolicy();
    kill_now.kill_now_max_lost_s = 120;
    Decisions k = Decide(st, kill_now);
    ASSERT_EQ(k.actions.size(), 1u) << FormatDecisions(st, k);
    EXPECT_EQ(k.actions[0].job, "b");
    EXPECT_EQ(k.actions[0].kind, ActionKind::kEvict);
    EXPECT_EQ(k.actions[0].grace_s, 0);
    EXPECT_NE(FormatDecisions(st, k).find("grace=0(kill)"), std::string::npos) << FormatDecisions(st, k);
  }
  {
    // The Kubernetes order with the runtime: SIGTERM with a grace sized from the victim's hints.
    PolicyOptions runtime;
    ASSERT_TRUE(PolicyByName("k8s+runtime", &runtime));
    Decisions k = Decide(st, runtime);
    ASSERT_EQ(k.actions.size(), 1u) << FormatDecisions(st, k);
    const JobAction& a = k.actions[0];
    const Job& v = st.jobs[a.job_index];
    if (v.hints && v.hints->checkpoint_s() > 0) {
      EXPECT_DOUBLE_EQ(a.grace_s, 1.5 * std::max(v.hints->grace.needed_s, v.hints->checkpoint_s()) + 10);
      EXPECT_NE(FormatDecisions(st, k).find(" grace=" + std::to_string(std::lround(a.grace_s)) + "s"),
                std::string::npos)
          << FormatDecisions(st, k);
    } else {
      EXPECT_EQ(a.grace_s, -1) << FormatDecisions(st, k);
    }
  }
  std::string text = FormatDecisions(st, d);
  EXPECT_NE(text.find("checkpoint-then-evict"), std::string::npos) << text;
  EXPECT_NE(text.find("node=n1"), std::string::npos) << text;
  std::string json = DecisionsToJson(st, d);
  EXPECT_NE(json.find("\"job\":\"b\""), std::string::npos) << json;
}

TEST(Plan, SnapshotErrorsNameTheField) {
  TempDir dir;
  struct Case {
    std::string doc;
    std::string needle;
  };
  const Case cases[] = {
      {"{", "invalid JSON"},
      {R"({"schema":"x"})", "field 'schema'"},
      {R"({"schema":"preempt.snapshot/1"})", "field 'nodes'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[{"name":"n"}],"jobs":[]})", "nodes[]"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","class":"vip"}]})", "field 'class'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","state":"running","node":"zz"}]})",
       "unknown node 'zz'"},
      {R"({"schema":"preempt.snapshot/1","now_unix":"nan","nodes":[],"jobs":[]})", "field 'now_unix'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[{"name":"n","gpus":8},{"name":"n","gpus":8}],"jobs":[]})",
       "node 'n' twice"},
      {R"({"schema":"preempt.snapshot/1","nodes":[{"name":"n","gpus":1e300}],"jobs":[]})", "nodes[]"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a"},{"id":"a"}]})", "job 'a' twice"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","gpus":1e300}]})", "field 'gpus'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","gpus":2.5}]})", "field 'gpus'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","submit_unix":"inf"}]})",
       "field 'submit_unix'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[{"name":"n","gpus":8}],
           "jobs":[{"id":"a","gpus":6,"state":"running","node":"n"},{"id":"b","gpus":4,"state":"running","node":"n"}]})",
       "job b: field 'gpus': node 'n' would hold 10 GPUs of its 8"},
      // Typos and wrong types are refused by name, never read as a default: a misspelt "running"
      // would make a job pending and its GPUs look free.
      {R"({"schema":"preempt.snapshot/1","node":[],"nodes":[],"jobs":[]})", "unknown field 'node'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[{"name":"n","gpu":8}],"jobs":[]})",
       "field 'nodes[]': unknown field 'gpu'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","submit":5}]})", "job a: field 'submit': unknown field"},
      {R"({"schema":"preempt.snapshot/1","nodes":[{"name":"n","gpus":8}],"jobs":[{"id":"a","state":"runing","node":"n"}]})",
       "job a: field 'state': expected pending|running|checkpointing|evicting"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","state":3}]})", "job a: field 'state'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","class":3}]})", "job a: field 'class'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","queue":""}]})", "job a: field 'queue'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","gpus":"abc"}]})", "job a: field 'gpus'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","gpus":true}]})", "job a: field 'gpus'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","start_unix":"yesterday"}]})",
       "job a: field 'start_unix'"},
      {R"({"schema":"preempt.snapshot/1","now_unix":"now","nodes":[],"jobs":[]})", "field 'now_unix'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","hints":"a.json"}]})", "job a: field 'hints'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","hints_file":7}]})", "job a: field 'hints_file'"},
      {R"({"schema":"preempt.snapshot/1","nodes":[],"jobs":[{"id":"a","\u0001\u00e9x":1}]})", "unknown field"},
  };
  for (const auto& c : cases) {
    WriteFileOrDie(dir / "s.json", c.doc);
    ClusterState st;
    std::vector<std::string> notes;
    Status s = LoadSnapshot(dir / "s.json", &st, &notes);
    EXPECT_FALSE(s.ok()) << c.doc;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
  }
}

TEST(Plan, KubernetesPodList) {
  TempDir dir;
  const double now = 1764680000;  // 2025-12-02T12:53:20Z
  std::string hints = HintsToJson(H(30, now));
  std::string escaped;
  for (char ch : hints) {
    if (ch == '"') escaped += "\\\"";
    else if (ch != '\n') escaped += ch;
  }
  WriteFileOrDie(dir / "pods.json", R"({"items":[
    {"metadata":{"name":"train-a","namespace":"research","creationTimestamp":"2025-12-02T10:00:00Z",
                 "annotations":{"preempt.dev/hints":")" + escaped + R"("}},
     "spec":{"nodeName":"gpu-1","priorityClassName":"preempt-low",
             "containers":[{"resources":{"limits":{"nvidia.com/gpu":"4"}}}]},
     "status":{"phase":"Running","startTime":"2025-12-02T10:00:05Z"}},
    {"metadata":{"name":"train-b","namespace":"research","creationTimestamp":"2025-12-02T10:00:00Z"},
     "spec":{"nodeName":"gpu-1","priority":1,"containers":[{"resources":{"limits":{"nvidia.com/gpu":4}}}]},
     "status":{"phase":"Running","startTime":"2025-12-02T10:00:05Z"}},
    {"metadata":{"name":"web","namespace":"prod"},"spec":{"containers":[{}]},"status":{"phase":"Running"}},
    {"metadata":{"name":"serve","namespace":"prod","creationTimestamp":"2025-12-02T12:53:00Z"},
     "spec":{"priorityClassName":"preempt-high","containers":[{"resources":{"limits":{"nvidia.com/gpu":"4"}}}]},
     "status":{"phase":"Pending"}}]})");
  ClusterState st;
  std::vector<std::string> notes;
  Status s = LoadK8sPodList(dir / "pods.json", 8, now, &st, &notes);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(st.nodes.size(), 1u);
  EXPECT_EQ(st.nodes[0].gpus, 8);
  ASSERT_EQ(st.jobs.size(), 3u);  // the CPU-only pod is ignored
  EXPECT_EQ(st.jobs[0].id, "research/train-a");
  EXPECT_EQ(st.jobs[0].gpus, 4);
  EXPECT_EQ(st.jobs[0].cls, PriorityClass::kLow);
  EXPECT_TRUE(st.jobs[0].hints.has_value());
  EXPECT_FALSE(st.jobs[1].hints.has_value());
  EXPECT_EQ(st.jobs[2].cls, PriorityClass::kHigh);
  EXPECT_EQ(st.jobs[2].phase, JobPhase::kPending);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("train-b"), std::string::npos);
  Decisions d = Decide(st, HintAwareNoRulesPolicy());
  ASSERT_EQ(d.actions.size(), 1u) << FormatDecisions(st, d);
  EXPECT_EQ(d.actions[0].job, "research/train-a");  // known, small lost work beats unknown
}

TEST(Plan, KubernetesPodListErrors) {
  auto pod = [](const std::string& name, const std::string& gpus, const std::string& node) {
    return R"({"metadata":{"name":")" + name + R"(","namespace":"ns"},"spec":{"nodeName":")" + node +
           R"(","containers":[{"resources":{"limits":{"nvidia.com/gpu":)" + gpus +
           R"(}}}]},"status":{"phase":"Running"}})";
  };
  struct Case {
    std::string items;
    std::string needle;
  };
  const Case cases[] = {
      {pod("a", "\"1e300\"", "n"), "pod ns/a: field 'resources.limits.nvidia.com/gpu'"},
      {pod("a", "1.5", "n"), "pod ns/a: field 'resources.limits.nvidia.com/gpu'"},
      {pod("a", "1", "n") + "," + pod("a", "1", "m"), "pod ns/a twice"},
      {pod("a", "6", "n") + "," + pod("b", "4", "n"), "pod ns/b: node n would hold 10 GPUs of 8 (--gpus-per-node)"},
  };
  for (const auto& c : cases) {
    ClusterState st;
    std::vector<std::string> notes;
    Status s = ParseK8sPodList(R"({"items":[)" + c.items + "]}", "pods.json", 8, 1764680000, false, &st, &notes);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << c.items;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("pods.json"), std::string::npos) << s.to_string();
  }
  ClusterState st;
  std::vector<std::string> notes;
  EXPECT_EQ(ParseK8sPodList(R"({"items":[]})", "pods.json", 0, 0, false, &st, &notes).code(),
            StatusCode::kInvalidArgument);
  // A hints file is not read when reading files is off: noted, the cost stays unknown.
  const std::string with_file = R"({"items":[{"metadata":{"name":"a","namespace":"ns","annotations":
      {"preempt.dev/hints-file":"/etc/passwd"}},"spec":{"nodeName":"n","containers":[{"resources":{"limits":
      {"nvidia.com/gpu":1}}}]},"status":{"phase":"Running"}}]})";
  ASSERT_TRUE(ParseK8sPodList(with_file, "pods.json", 8, 1764680000, false, &st, &notes).ok());
  EXPECT_FALSE(st.jobs[0].hints.has_value());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("not read here"), std::string::npos) << notes[0];
}

TEST(Plan, KubernetesNodeListClassesAndGpuLimits) {
  const double now = 1764680000;
  const std::string nodes = R"({"items":[
    {"metadata":{"name":"gpu-1"},"status":{"allocatable":{"nvidia.com/gpu":"8"},"capacity":{"nvidia.com/gpu":"8"}}},
    {"metadata":{"name":"gpu-2"},"status":{"capacity":{"nvidia.com/gpu":"4"}}},
    {"metadata":{"name":"cpu-1"},"status":{"allocatable":{"cpu":"64"}}}]})";
  std::vector<Node> list;
  ASSERT_TRUE(ParseK8sNodeList(nodes, "nodes.json", &list).ok());
  ASSERT_EQ(list.size(), 2u);  // the CPU node is left out
  EXPECT_EQ(list[1].name, "gpu-2");
  EXPECT_EQ(list[1].gpus, 4);
  // gpu-1 is full of low work; gpu-2 is idle and only the node list shows it.
  auto pod = [](const std::string& name, const std::string& spec, const std::string& phase) {
    return R"({"metadata":{"name":")" + name + R"(","namespace":"ns"},"spec":{)" + spec +
           R"(},"status":{"phase":")" + phase + R"("}})";
  };
  const std::string gpus4 = R"("containers":[{"resources":{"limits":{"nvidia.com/gpu":"4"}}}])";
  const std::string pods = R"({"items":[)" +
                           pod("low-a", R"("nodeName":"gpu-1","priority":1,)" + gpus4, "Running") + "," +
                           pod("low-b", R"("nodeName":"gpu-1","priority":1,)" + gpus4, "Running") + "," +
                           pod("batch", R"("priorityClassName":"highmem-batch","priority":1,)" + gpus4, "Pending") +
                           "," + pod("named", R"("priorityClassName":"preempt-medium",)" + gpus4, "Pending") + "," +
                           pod("odd", R"("priorityClassName":"highmem-batch",)" + gpus4, "Pending") + "," +
                           pod("serve", R"("priority":1000000,)" + gpus4, "Pending") + "]}";
  ClusterState st;
  std::vector<std::string> notes;
  ASSERT_TRUE(ParseK8sPodList(pods, "pods.json", 8, now, false, list, &st, &notes).ok());
  ASSERT_EQ(st.nodes.size(), 2u);
  ASSERT_EQ(st.jobs.size(), 6u);
  EXPECT_EQ(st.jobs[2].cls, PriorityClass::kLow);     // spec.priority 1, whatever the class is called
  EXPECT_EQ(st.jobs[3].cls, PriorityClass::kMedium);  // exact name, no priority
  EXPECT_EQ(st.jobs[4].cls, PriorityClass::kLow);     // unknown name, no priority: low, noted
  EXPECT_EQ(st.jobs[5].cls, PriorityClass::kHigh);
  bool noted = false;
  for (const auto& n : notes) noted |= n.find("ns/odd") != std::string::npos && n.find("highmem-batch") != std::string::npos;
  EXPECT_TRUE(noted);
  // The high pod starts on the idle node: no eviction, no "add capacity".
  Decisions d = Decide(st, PolicyOptions());
  ASSERT_FALSE(d.actions.empty()) << FormatDecisions(st, d);
  EXPECT_EQ(d.actions[0].kind, ActionKind::kStart) << FormatDecisions(st, d);
  EXPECT_EQ(d.actions[0].job, "ns/serve");
  EXPECT_EQ(st.nodes[d.actions[0].node].name, "gpu-2");
  for (const auto& a : d.actions) EXPECT_NE(a.for_job, "ns/serve") << FormatDecisions(st, d);
  for (const auto& w : d.waits) EXPECT_NE(w.job, "ns/serve") << FormatDecisions(st, d);

  struct Case {
    std::string items, needle;
  };
  const Case bad[] = {
      {pod("a", R"("nodeName":"gpu-1","containers":[{"resources":{"limits":{"nvidia.com/gpu":"abc"}}}])", "Running"),
       "pod ns/a: field 'resources.limits.nvidia.com/gpu'"},
      {pod("b", R"("nodeName":"gpu-9",)" + gpus4, "Running"), "pod ns/b: field 'spec.nodeName': node gpu-9"},
      {pod("c", R"("nodeName":"gpu-2","containers":[{"resources":{"limits":{"nvidia.com/gpu":"5"}}}])", "Running"),
       "pod ns/c: node gpu-2 would hold 5 GPUs of 4"},
      {pod("d", R"("priority":"x",)" + gpus4, "Pending"), "pod ns/d: field 'spec.priority'"},
  };
  for (const auto& c : bad) {
    Status s = ParseK8sPodList(R"({"items":[)" + c.items + "]}", "pods.json", 8, now, false, list, &st, &notes);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << c.items;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
  }
  // "abc" is an error without a node list too (it never made a silent non-GPU pod).
  Status s = ParseK8sPodList(R"({"items":[)" + bad[0].items + "]}", "pods.json", 8, now, false, &st, &notes);
  EXPECT_NE(s.message().find("pod ns/a: field 'resources.limits.nvidia.com/gpu'"), std::string::npos) << s.to_string();
  EXPECT_NE(ParseK8sNodeList(R"({"items":[{"metadata":{"name":"n"},"status":{"allocatable":{"nvidia.com/gpu":"x"}}}]})",
                             "nodes.json", &list)
                .message()
                .find("node n: field 'status.allocatable.nvidia.com/gpu'"),
            std::string::npos);
}

// A victim already asked to checkpoint: a refill victim's reason names what it is for, and FCFS
// (which never preempts) leaves it running.
TEST(Plan, CheckpointedVictimReasonAndFcfs) {
  ClusterState st;
  st.now = 1000;
  st.nodes = {{"n0", 2}};
  Job v;
  v.id = "v";
  v.gpus = 2;
  v.phase = JobPhase::kCheckpointing;
  v.node = 0;
  v.request_id = 3;
  v.request_time = 990;
  v.hints = H(10, st.now);
  v.hints->request_ack = 3;
  v.hints->last_commit.step = 40;
  st.jobs = {v};
  Decisions d = Decide(st, PolicyOptions());
  ASSERT_EQ(d.actions.size(), 1u);
  EXPECT_EQ(d.actions[0].kind, ActionKind::kEvict);
  const std::string& r = d.actions[0].reason;
  EXPECT_NE(r.find("(no job waits for its GPUs)"), std::string::npos) << r;
  EXPECT_NE(r.substr(r.size() - 4), "for ") << r;
  PolicyOptions fcfs;
  ASSERT_TRUE(PolicyByName("fcfs", &fcfs));
  d = Decide(st, fcfs);
  for (const auto& a : d.actions) EXPECT_EQ(a.kind, ActionKind::kStart) << FormatDecisions(st, d);
  st.jobs[0].request_time = 0;  // past the deadline too
  st.jobs[0].hints->request_ack = 0;
  EXPECT_TRUE(Decide(st, fcfs).actions.empty());
}

TEST(Plan, SnapshotFromTextReadsNoHintsFileWithoutABaseDirectory) {
  ClusterState st;
  std::vector<std::string> notes;
  ASSERT_TRUE(ParseSnapshot(R"({"schema":"preempt.snapshot/1","nodes":[{"name":"n","gpus":8}],
      "jobs":[{"id":"a","state":"running","node":"n","hints_file":"/etc/passwd"}]})",
                            "inline", "", &st, &notes)
                  .ok());
  EXPECT_FALSE(st.jobs[0].hints.has_value());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("not read"), std::string::npos) << notes[0];
}

TEST(RunSpec, ErrorsNameTheField) {
  const std::string job = R"("command":["true"])";
  struct Case {
    std::string doc;
    std::string needle;
  };
  const Case cases[] = {
      {"{", "invalid JSON"},
      {R"({"slots":0,"jobs":[]})", "field 'slots'"},
      {R"({"timeout_s":-1,"jobs":[]})", "field 'timeout_s'"},
      {R"({"jobs":[{"id":"a",)" + job + R"(},{"id":"a",)" + job + "}]}", "job id 'a' twice"},
      {R"({"jobs":[{"id":"..",)" + job + "}]}", "must be a plain name"},
      {R"({"slots":2,"jobs":[{"id":"a","gpus":3,)" + job + "}]}", "job a: field 'gpus'"},
      {R"({"jobs":[{"id":"a","grace_s":-5,)" + job + "}]}", "job a: field 'grace_s'"},
      {R"({"jobs":[{"id":"a","submit_after_s":"soon",)" + job + "}]}", "job a: field 'submit_after_s'"},
      {R"({"jobs":[{"id":"a","command":[]}]})", "job a: field 'command'"},
      {R"({"policy":{"reserved_headroom":7},"jobs":[]})", "run spec spec.json: policy: field 'reserved_headroom'"},
      // Typos and wrong types are refused by name: "submit_after" would start the job at once.
      {R"({"slot":2,"jobs":[]})", "run spec spec.json: unknown field 'slot'"},
      {R"({"work_dir":5,"jobs":[]})", "field 'work_dir'"},
      {R"({"work_dir":"","jobs":[]})", "field 'work_dir'"},
      {R"({"jobs":[{"id":"a","submit_after":5,)" + job + "}]}", "job a: unknown field 'submit_after'"},
      {R"({"jobs":[{"id":"a","queue":7,)" + job + "}]}", "job a: field 'queue'"},
      {R"({"jobs":[{"id":"a","class":"vip",)" + job + "}]}", "job a: field 'class'"},
      {R"({"jobs":[{"id":"a","after_files":"b.hints.json",)" + job + "}]}", "job a: field 'after_files'"},
      {R"({"jobs":[{"id":"a","after_files":[""],)" + job + "}]}", "job a: field 'after_files'"},
      {R"({"jobs":[{"id":"a","after_files":[3],)" + job + "}]}", "job a: field 'after_files'"},
  };
  for (const auto& c : cases) {
    std::vector<RunJobSpec> jobs;
    RunOptions opt;
    Status s = ParseRunSpec(c.doc, "spec.json", &jobs, &opt);
    EXPECT_FALSE(s.ok()) << c.doc;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
  }
}

TEST(Plan, Rfc3339) {
  double t = 0;
  ASSERT_TRUE(ParseRfc3339("1970-01-01T00:01:00Z", &t));
  EXPECT_EQ(t, 60);
  ASSERT_TRUE(ParseRfc3339("2025-12-02T12:53:20.5Z", &t));
  EXPECT_DOUBLE_EQ(t, 1764680000.5);
  EXPECT_FALSE(ParseRfc3339("2025-12-02 12:53:20", &t));
  EXPECT_FALSE(ParseRfc3339("2025-12-02T12:53:20+01:00", &t));
}

TEST(Plan, PolicyOverrides) {
  PolicyOptions p;
  ASSERT_TRUE(PolicyFromJson(R"({"kind":"k8s","min_runtime_s":5,"checkpoint_then_evict":false,
                                 "budget_max_preemptions":3,"preempts_lower":[false,false,true],
                                 "nonhigh_preempt_delay_s":60,"defrag_max_moves":2,"defrag_min_wait_s":30})",
                             &p)
                  .ok());
  EXPECT_EQ(p.kind, PolicyKind::kKubernetes);
  EXPECT_EQ(p.min_runtime_s, 5);
  EXPECT_FALSE(p.checkpoint_then_evict);
  EXPECT_EQ(p.budget_max_preemptions, 3);
  EXPECT_FALSE(p.preempts_lower[1]);
  EXPECT_EQ(p.nonhigh_preempt_delay_s, 60);
  EXPECT_EQ(p.defrag_max_moves, 2);
  EXPECT_EQ(p.defrag_min_wait_s, 30);
  EXPECT_NE(PolicyFromJson(R"({"defrag_max_moves":1.5})", &p).message().find("field 'defrag_max_moves'"),
            std::string::npos);
  Status s = PolicyFromJson(R"({"min_runtime":5})", &p);
  EXPECT_NE(s.message().find("unknown field 'min_runtime'"), std::string::npos) << s.to_string();
  s = PolicyFromJson(R"({"cooldown_s":"x"})", &p);
  EXPECT_NE(s.message().find("field 'cooldown_s'"), std::string::npos) << s.to_string();
  // Ranges: fractions in [0, 1], times >= 0, counts >= 0; the tolerable wait is a mode or seconds > 0.
  for (const char* doc : {R"({"reserved_headroom":1.5})", R"({"low_guaranteed_share":-0.1})",
                          R"({"min_runtime_s":-1})", R"({"cooldown_s":1e300})", R"({"defrag_max_moves":-1})",
                          R"({"high_tolerable_wait":-1})", R"({"high_tolerable_wait":0})",
                          R"({"high_tolerable_wait":"grace"})", R"({"high_tolerable_wait_s":10})"}) {
    PolicyOptions q;
    EXPECT_EQ(PolicyFromJson(doc, &q).code(), StatusCode::kInvalidArgument) << doc;
  }
  ASSERT_TRUE(PolicyFromJson(R"({"high_tolerable_wait":"off","reserved_headroom":1,"tolerable_kill_max_lost_s":0})",
                             &p).ok());
  EXPECT_EQ(p.high_tolerable_wait, TolerableWait::kOff);
  ASSERT_TRUE(PolicyFromJson(R"({"high_tolerable_wait":15})", &p).ok());
  EXPECT_EQ(p.high_tolerable_wait, TolerableWait::kFixed);
  EXPECT_EQ(p.high_tolerable_wait_s, 15);
  ASSERT_TRUE(PolicyFromJson(R"({"high_tolerable_wait":"victim-grace"})", &p).ok());
  EXPECT_EQ(p.high_tolerable_wait, TolerableWait::kVictimGrace);
  // A refused document changes nothing.
  PolicyOptions before = p;
  EXPECT_FALSE(PolicyFromJson(R"({"min_runtime_s":7,"cooldown_s":-1})", &p).ok());
  EXPECT_EQ(p.min_runtime_s, before.min_runtime_s);
  EXPECT_EQ(p.tolerable_kill_max_lost_s, 0);
  ASSERT_TRUE(PolicyFromJson(R"({"tolerable_wait_min_gpus":1})", &p).ok());
  EXPECT_EQ(p.tolerable_wait_min_gpus, 1);
}

// The CLI end to end on small inputs: exit codes and the essential output.
// A snapshot fragmented by small high jobs: the plan moves one (move_to in text and JSON).
TEST(Plan, SnapshotPlanShowsMoves) {
  TempDir dir;
  const double now = 1764680000;
  for (const char* id : {"h1", "h2", "l0", "l1"})
    ASSERT_TRUE(WriteHintsAtomic(dir / (std::string(id) + ".json"), H(600, now)).ok());
  WriteFileOrDie(dir / "snap.json", R"({"schema":"preempt.snapshot/1","now_unix":1764680000,
    "nodes":[{"name":"n0","gpus":4},{"name":"n1","gpus":4}],
    "jobs":[{"id":"h1","class":"high","gpus":1,"state":"running","node":"n0","start_unix":1764670000,"hints_file":"h1.json"},
            {"id":"l0","class":"low","gpus":3,"state":"running","node":"n0","start_unix":1764670000,"hints_file":"l0.json"},
            {"id":"h2","class":"high","gpus":1,"state":"running","node":"n1","start_unix":1764670000,"hints_file":"h2.json"},
            {"id":"l1","class":"low","gpus":3,"state":"running","node":"n1","start_unix":1764670000,"hints_file":"l1.json"},
            {"id":"big","class":"high","gpus":4,"state":"pending","submit_unix":1764679990}]})");
  ClusterState st;
  std::vector<std::string> notes;
  ASSERT_TRUE(LoadSnapshot(dir / "snap.json", &st, &notes).ok());
  PolicyOptions defrag;
  ASSERT_TRUE(PolicyByName("hint-defrag", &defrag));
  Decisions d = Decide(st, defrag);
  std::string text = FormatDecisions(st, d), json = DecisionsToJson(st, d);
  EXPECT_NE(text.find(" move_to=n"), std::string::npos) << text;
  EXPECT_NE(json.find("\"move_to\":\"n"), std::string::npos) << json;
  int moves = 0;
  for (const auto& a : d.actions) moves += a.to_node >= 0;
  EXPECT_EQ(moves, 1) << text;
  PolicyOptions off;
  ASSERT_TRUE(PolicyFromJson(R"({"defrag_max_moves":0})", &off).ok());
  d = Decide(st, off);
  EXPECT_TRUE(d.actions.empty()) << FormatDecisions(st, d);
}

TEST(Cli, SimulatePlanAndUsage) {
  TempDir dir;
  const std::string cli = preempt::testing::BinaryDir() + "/src/sched/preempt-sched";
  auto run = [&](const std::string& args, std::string* out) {
    std::string cmd = cli + " " + args + " > " + (dir / "out.txt") + " 2>&1";
    int rc = std::system(cmd.c_str());
    *out = preempt::testing::ReadFileOrDie(dir / "out.txt");
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  std::string out;
  ASSERT_EQ(run("simulate --trace synthetic --jobs 120 --nodes 2 --policies fcfs,k8s,hint --csv " + (dir / "m.csv") +
                    " --write-trace " + (dir / "t.csv"),
                &out),
            0)
      << out;
  EXPECT_NE(out.find("hint"), std::string::npos) << out;
  std::string csv = preempt::testing::ReadFileOrDie(dir / "m.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4) << csv;  // header + 3 policies
  ASSERT_EQ(run("simulate --trace " + (dir / "t.csv") + " --nodes 2 --policies k8s", &out), 0) << out;
  // Eviction settings: naive victims lose their uncommitted work under k8s; grace sized from hints.
  ASSERT_EQ(run("simulate --trace " + (dir / "t.csv") + " --nodes 2 --policies k8s,hint-nodefrag --naive --grace 0 --csv " +
                    (dir / "n.csv"),
                &out),
            0)
      << out;
  EXPECT_NE(out.find("hint-nodefrag"), std::string::npos) << out;
  EXPECT_EQ(run("simulate --grace -1", &out), 1) << out;
  // Out-of-range and fractional counts are refused naming the flag, before anything runs (a
  // fraction was truncated, 1e300 overflowed an int).
  for (const char* bad : {"simulate --jobs 0", "simulate --jobs 2.5", "simulate --jobs 1e300", "simulate --nodes 0",
                          "simulate --gpus-per-node 0", "simulate --load -1", "simulate --seed -1",
                          "simulate --capacity-p95 x", "simulate --capacity-p95 -5",
                          "simulate --trace alibaba --alibaba-gpus 1.5", "plan --k8s x.json --gpus-per-node 0"}) {
    EXPECT_EQ(run(bad, &out), 2) << bad << "\n" << out;
    const std::string flag = std::string(bad).substr(std::string(bad).rfind("--"));
    EXPECT_NE(out.find(flag.substr(0, flag.find(' ')) + ":"), std::string::npos) << bad << "\n" << out;
    EXPECT_EQ(out.find("trace "), std::string::npos) << "ran before refusing: " << bad << "\n" << out;
  }

  const double now = NowUnix();
  ASSERT_TRUE(WriteHintsAtomic(dir / "a.json", H(500, now)).ok());
  WriteFileOrDie(dir / "snap.json", R"({"schema":"preempt.snapshot/1","nodes":[{"name":"n0","gpus":1}],
    "jobs":[{"id":"a","class":"low","state":"running","node":"n0","start_unix":0,"hints_file":"a.json"},
            {"id":"h","class":"high","state":"pending"}]})");
  ASSERT_EQ(run("plan --snapshot " + (dir / "snap.json"), &out), 0) << out;
  EXPECT_NE(out.find("checkpoint-then-evict"), std::string::npos) << out;
  ASSERT_EQ(run("plan --snapshot " + (dir / "snap.json") + " --json", &out), 0) << out;
  EXPECT_NE(out.find("\"action\":\"checkpoint-then-evict\""), std::string::npos) << out;
  EXPECT_EQ(run("plan --snapshot " + (dir / "absent.json"), &out), 1);
  EXPECT_EQ(run("frobnicate", &out), 2);
  EXPECT_EQ(run("simulate --policies nope", &out), 2);
  EXPECT_EQ(run("plan --snapshot x --policy-json '{\"bogus\":1}'", &out), 1) << out;
  // Misspelt flags and out-of-range values are refused, never ignored or replaced.
  EXPECT_EQ(run("simulate --policies k8s --jobs 5 --policy-json '{\"bogus\":1}'", &out), 2) << out;
  EXPECT_NE(out.find("unknown field 'bogus'"), std::string::npos) << out;
  EXPECT_EQ(run("simulate --polices fcfs", &out), 2);
  EXPECT_NE(out.find("unknown flag --polices"), std::string::npos) << out;
  EXPECT_EQ(run("plan --snapshot x --slots 2", &out), 2) << out;
  EXPECT_EQ(run("simulate --trace alibaba --alibaba-overload 0", &out), 2) << out;
  EXPECT_NE(out.find("--alibaba-overload"), std::string::npos) << out;
  EXPECT_EQ(run("simulate --trace alibaba --seed 3", &out), 2) << out;
  // A job larger than any node is an error (exit 1, the job named), never skipped with waits of 0.
  WriteFileOrDie(dir / "big.csv",
                 "id,submit_s,class,queue,gpus,duration_s,ckpt_interval_s,ckpt_drain_s,ckpt_stall_s,ckpt_persist_s,"
                 "restore_s\nsmall,0,low,q,2,100,600,0.1,0.1,1,10\nwide,5,high,q,16,100,600,0.1,0.1,1,10\n");
  EXPECT_EQ(run("simulate --trace " + (dir / "big.csv") + " --nodes 2 --gpus-per-node 8 --policies fcfs", &out), 1)
      << out;
  EXPECT_NE(out.find("job wide needs 16 GPUs on one node; the largest node has 8"), std::string::npos) << out;
  EXPECT_EQ(run("plan --snapshot x --k8s-nodes y", &out), 2) << out;
  // A large trace is written without simulating it.
  ASSERT_EQ(run("simulate --jobs 3000 --policies none --write-trace " + (dir / "big3k.csv"), &out), 0) << out;
  std::string big = preempt::testing::ReadFileOrDie(dir / "big3k.csv");
  EXPECT_EQ(std::count(big.begin(), big.end(), '\n'), 3001) << out;  // header + 3000 jobs
  EXPECT_EQ(out.find("hint"), std::string::npos) << out;
  // The bill per queue, as text and JSON; progress lines on stderr.
  ASSERT_EQ(run("simulate --jobs 60 --nodes 2 --policies hint --progress 0.001 --json " + (dir / "s.json"), &out), 0)
      << out;
  EXPECT_NE(out.find("bill per queue"), std::string::npos) << out;
  EXPECT_NE(out.find("hint: 60 of 60 jobs submitted, 60 finished, 0 pending"), std::string::npos) << out;
  std::string js = preempt::testing::ReadFileOrDie(dir / "s.json");
  EXPECT_NE(js.find("\"bill\":[{\"queue\":"), std::string::npos) << js;
  // --help lists every policy field.
  EXPECT_EQ(run("--help", &out), 2);
  EXPECT_NE(out.find("defrag_max_moves"), std::string::npos) << out;
}

}  // namespace
}  // namespace preempt::sched
