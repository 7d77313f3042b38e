// The scheduler fuzz target's seed and regression inputs (tests/fuzz/corpus-sched) run through the
// same entry point in every build — release and ASan+UBSan, with gcc — not only in the clang
// libFuzzer stage: any input that once crashed stays fixed. The seeds must also be accepted by
// their parsers, so the fuzzer starts from inputs that reach Decide() and the simulator.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "preempt/hints.h"
#include "preempt/sched/plan.h"
#include "preempt/sched/runner.h"
#include "preempt/sched/simulator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace preempt::sched {
namespace {

const std::string kCorpus = PREEMPT_SOURCE_DIR "/tests/fuzz/corpus-sched";

std::vector<std::string> CorpusFiles() {
  std::vector<std::string> out;
  DIR* d = opendir(kCorpus.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Read(const std::string& name) {
  std::ifstream in(kCorpus + "/" + name, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SchedFuzzCorpus, SeedsAreAcceptedByTheirParsers) {
  std::vector<std::string> notes;
  ClusterState st;
  Status s = ParseSnapshot(Read("snapshot").substr(1), "snapshot", "", &st, &notes);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(st.jobs.size(), 5u);
  s = ParseK8sPodList(Read("pods").substr(1), "pods", 8, 1.7e9, false, &st, &notes);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(st.jobs.size(), 2u);
  EXPECT_TRUE(st.jobs[0].hints.has_value());
  Hints h;
  s = HintsFromJson(Read("hints").substr(1), "hints", &h);
  EXPECT_TRUE(s.ok()) << s.to_string();
  PolicyOptions p;
  s = PolicyFromJson(Read("policy").substr(1), &p);
  EXPECT_TRUE(s.ok()) << s.to_string();
  Trace t;
  s = ParseTraceCsv(Read("trace").substr(1), "trace", &t);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(t.jobs.size(), 5u);
  CheckpointRequest q;
  s = RequestFromJson(Read("request").substr(1), "request", &q);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(q.id, 7);
  std::vector<RunJobSpec> run;
  RunOptions ro;
  s = ParseRunSpec(Read("run").substr(1), "run", &run, &ro);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(run.size(), 2u);
}

TEST(SchedFuzzCorpus, EveryInputRunsClean) {
  std::vector<std::string> files = CorpusFiles();
  ASSERT_GE(files.size(), 5u) << kCorpus;
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    std::string data = Read(f);
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size()), 0);
  }
}

}  // namespace
}  // namespace preempt::sched
