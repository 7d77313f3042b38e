// Tests of the hints contract: JSON round trip, validation errors that name file and field,
// atomic publication, cost tracking, and the checkpoint-request channel.
#include "preempt/hints.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "support/test_util.h"

namespace preempt {
namespace {

using preempt::testing::ReadFileOrDie;
using preempt::testing::TempDir;
using preempt::testing::WriteFileOrDie;

Hints Sample() {
  Hints h;
  h.job = "job-42";
  h.updated_unix = 1764680000.25;
  h.state = JobState::kCheckpointing;
  h.step = 1200;
  h.step_time_s = 0.35;
  h.last_commit = {1000, 1764679900.5, "/nvme/ckpt/step-00001000"};
  h.cost = {123456789, 0.2, 0.6, 4.5};
  h.grace = {6.0, 30.0};
  h.lost_work_s = 70.0;
  h.gpus = 8;
  h.request_ack = 3;
  return h;
}

TEST(Hints, RoundTripKeepsEveryField) {
  Hints in = Sample();
  Hints out;
  ASSERT_TRUE(HintsFromJson(HintsToJson(in), "mem", &out).ok());
  EXPECT_EQ(out.job, in.job);
  EXPECT_DOUBLE_EQ(out.updated_unix, in.updated_unix);
  EXPECT_EQ(out.state, in.state);
  EXPECT_EQ(out.step, in.step);
  EXPECT_DOUBLE_EQ(out.step_time_s, in.step_time_s);
  EXPECT_EQ(out.last_commit.step, in.last_commit.step);
  EXPECT_DOUBLE_EQ(out.last_commit.committed_at, in.last_commit.committed_at);
  EXPECT_EQ(out.last_commit.path, in.last_commit.path);
  EXPECT_EQ(out.cost.bytes, in.cost.bytes);
  EXPECT_DOUBLE_EQ(out.cost.drain_s, in.cost.drain_s);
  EXPECT_DOUBLE_EQ(out.cost.stall_s, in.cost.stall_s);
  EXPECT_DOUBLE_EQ(out.cost.persist_s, in.cost.persist_s);
  EXPECT_DOUBLE_EQ(out.grace.needed_s, in.grace.needed_s);
  EXPECT_DOUBLE_EQ(out.grace.granted_s, in.grace.granted_s);
  EXPECT_DOUBLE_EQ(out.lost_work_s, in.lost_work_s);
  EXPECT_EQ(out.gpus, in.gpus);
  EXPECT_EQ(out.request_ack, in.request_ack);
  EXPECT_NEAR(out.checkpoint_s(), 5.3, 1e-9);
}

// Bit-exact: the default rapidjson number parser reads some written doubles back one unit in the
// last place off (e.g. 26.993950415948042; found by fuzz_sched), so hints are parsed at full precision.
TEST(Hints, RoundTripIsBitExact) {
  Hints in = Sample();
  in.cost.persist_s = 26.993950415948042;
  in.cost.stall_s = 11.317408141314562;
  in.lost_work_s = 39.252393092058476;
  in.updated_unix = 1764679999.123456789;
  Hints out;
  ASSERT_TRUE(HintsFromJson(HintsToJson(in), "mem", &out).ok());
  EXPECT_EQ(out.cost.persist_s, in.cost.persist_s);
  EXPECT_EQ(out.cost.stall_s, in.cost.stall_s);
  EXPECT_EQ(out.lost_work_s, in.lost_work_s);
  EXPECT_EQ(out.updated_unix, in.updated_unix);
}

TEST(Hints, SchemaIsFirstAndNamed) {
  std::string j = HintsToJson(Sample());
  EXPECT_EQ(j.rfind("{\"schema\":\"preempt.hints/1\"", 0), 0u) << j;
}

TEST(Hints, StateNames) {
  for (JobState s : {JobState::kTraining, JobState::kCheckpointing, JobState::kStopping, JobState::kStopped}) {
    JobState back;
    ASSERT_TRUE(ParseJobState(JobStateName(s), &back));
    EXPECT_EQ(back, s);
  }
  JobState x;
  EXPECT_FALSE(ParseJobState("running", &x));
}

// Each bad document and the field its error must name.
TEST(Hints, InvalidDocumentsNameTheField) {
  const std::string good = HintsToJson(Sample());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  struct Case {
    std::string doc;
    StatusCode code;
    std::string needle;
  };
  const Case cases[] = {
      {"not json", StatusCode::kCorruption, "invalid JSON"},
      {"[1,2]", StatusCode::kCorruption, "not a JSON object"},
      {replace("preempt.hints/1", "preempt.hints/2"), StatusCode::kVersionMismatch, "field 'schema'"},
      {replace("\"job\":\"job-42\",", ""), StatusCode::kCorruption, "field 'job': missing"},
      {replace("\"job\":\"job-42\"", "\"job\":\"\""), StatusCode::kCorruption, "field 'job': empty"},
      {replace("\"state\":\"checkpointing\"", "\"state\":\"dancing\""), StatusCode::kCorruption, "field 'state'"},
      {replace("\"step\":1200", "\"step\":\"1200\""), StatusCode::kCorruption, "field 'step': expected an integer"},
      {replace("\"persist_s\":4.5", "\"persist_s\":\"x\""), StatusCode::kCorruption, "field 'cost.persist_s'"},
      {replace("\"persist_s\":4.5", "\"persist_s\":-1"), StatusCode::kCorruption, "negative"},
      {replace("\"unix\":1764679900.5,", ""), StatusCode::kCorruption, "field 'last_commit.unix': missing"},
      {replace("\"needed_s\":6.0", "\"needed_s\":null"), StatusCode::kCorruption, "field 'grace.needed_s'"},
      {replace("\"lost_work_s\":70.0", "\"lost_work_s\":-3"), StatusCode::kCorruption, "field 'lost_work_s'"},
      {replace("\"gpus\":8", "\"gpus\":-8"), StatusCode::kCorruption, "field 'gpus'"},
      {replace("\"bytes\":123456789", "\"bytes\":-1"), StatusCode::kCorruption, "field 'cost.bytes'"},
      {replace("\"lost_work_s\":70.0", "\"lost_work_s\":1.1e46"), StatusCode::kCorruption,
       "field 'lost_work_s': more than 1e9 s"},
      {replace("\"needed_s\":6.0", "\"needed_s\":-6"), StatusCode::kCorruption, "field 'grace.needed_s': negative"},
      {replace("\"unix\":1764679900.5", "\"unix\":-1"), StatusCode::kCorruption, "field 'last_commit.unix'"},
  };
  for (const auto& c : cases) {
    Hints h;
    Status s = HintsFromJson(c.doc, "/x/job.hints.json", &h);
    EXPECT_EQ(s.code(), c.code) << c.doc << " -> " << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("/x/job.hints.json"), std::string::npos) << s.to_string();
  }
}

TEST(Hints, OptionalFieldsAndUnknownFields) {
  std::string doc =
      "{\"schema\":\"preempt.hints/1\",\"job\":\"j\",\"updated_unix\":10,\"state\":\"training\",\"step\":5,"
      "\"last_commit\":{\"step\":-1,\"unix\":0},\"cost\":{\"bytes\":0,\"drain_s\":0,\"stall_s\":0,\"persist_s\":0},"
      "\"grace\":{\"needed_s\":0},\"lost_work_s\":1,\"gpus\":1,\"future_field\":[1,2]}";
  Hints h;
  ASSERT_TRUE(HintsFromJson(doc, "mem", &h).ok());
  EXPECT_EQ(h.request_ack, 0);
  EXPECT_EQ(h.last_commit.step, -1);
  EXPECT_EQ(h.last_commit.path, "");
}

TEST(Hints, LostWorkExtrapolatesOnlyWhileTraining) {
  Hints h = Sample();
  h.updated_unix = 100;
  h.lost_work_s = 10;
  h.state = JobState::kTraining;
  EXPECT_DOUBLE_EQ(h.lost_work_at(105), 15);
  EXPECT_DOUBLE_EQ(h.lost_work_at(90), 10);
  h.state = JobState::kStopped;
  EXPECT_DOUBLE_EQ(h.lost_work_at(105), 10);
}

TEST(Hints, WriteAtomicThenRead) {
  TempDir dir;
  std::string path = dir / "job.hints.json";
  Hints in = Sample();
  in.updated_unix = NowUnix() - 2;
  ASSERT_TRUE(WriteHintsAtomic(path, in).ok());
  Hints out;
  double age = -1;
  Status s = ReadHints(path, &out, &age);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(out.step, 1200);
  EXPECT_GE(age, 1.5);
  EXPECT_LT(age, 60);
  // No temp file left behind.
  EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
  // Overwrite replaces.
  in.step = 1300;
  ASSERT_TRUE(WriteHintsAtomic(path, in).ok());
  ASSERT_TRUE(ReadHints(path, &out).ok());
  EXPECT_EQ(out.step, 1300);
}

TEST(Hints, MissingAndCorruptFilesAreDistinguishable) {
  TempDir dir;
  Hints h;
  Status missing = ReadHints(dir / "absent.json", &h);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.to_string();
  WriteFileOrDie(dir / "bad.json", "{\"schema\":\"preempt.hints/1\"");
  Status bad = ReadHints(dir / "bad.json", &h);
  EXPECT_EQ(bad.code(), StatusCode::kCorruption);
  EXPECT_NE(bad.message().find(dir / "bad.json"), std::string::npos);
  Status nodir = WriteHintsAtomic(dir / "no/such/dir/h.json", Sample());
  EXPECT_FALSE(nodir.ok());
  EXPECT_NE(nodir.message().find("no/such/dir"), std::string::npos) << nodir.to_string();
  EXPECT_EQ(WriteHintsAtomic("", Sample()).code(), StatusCode::kInvalidArgument);
}

TEST(Hints, ConcurrentReaderNeverSeesTornFile) {
  TempDir dir;
  std::string path = dir / "h.json";
  ASSERT_TRUE(WriteHintsAtomic(path, Sample()).ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    Hints h = Sample();
    for (int i = 0; i < 200 && !stop; ++i) {
      h.step = i;
      h.job = std::string(static_cast<size_t>(1 + i % 50), 'x');
      ASSERT_TRUE(WriteHintsAtomic(path, h).ok());
    }
  });
  int reads = 0;
  for (int i = 0; i < 300; ++i) {
    Hints h;
    Status s = ReadHints(path, &h);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ++reads;
  }
  stop = true;
  writer.join();
  EXPECT_EQ(reads, 300);
}

TEST(Hints, PathsFromEnvironment) {
  unsetenv("PREEMPT_REQUEST_FILE");
  setenv("PREEMPT_HINTS_FILE", "/run/h.json", 1);
  EXPECT_EQ(HintsPathFromEnv(), "/run/h.json");
  EXPECT_EQ(RequestPathFor("/run/h.json"), "/run/h.json.request");
  setenv("PREEMPT_REQUEST_FILE", "/run/other", 1);
  EXPECT_EQ(RequestPathFor("/run/h.json"), "/run/other");
  unsetenv("PREEMPT_REQUEST_FILE");
  unsetenv("PREEMPT_HINTS_FILE");
  EXPECT_EQ(HintsPathFromEnv(), "");
}

// ---- CostTracker ----

TEST(CostTracker, EmptyIsZero) {
  CostTracker t;
  EXPECT_EQ(t.count(), 0u);
  EXPECT_EQ(t.p95().persist_s, 0);
  EXPECT_EQ(t.ewma().bytes, 0u);
}

// The runtime stores samples() in its checkpoints and add()s them back after a restore.
TEST(CostTracker, SamplesRoundTripTheP95) {
  CostTracker a(4);
  for (int i = 1; i <= 6; ++i) a.add({uint64_t(i), 0.1 * i, 0.2 * i, 0.3 * i});
  auto samples = a.samples();
  ASSERT_EQ(samples.size(), 4u);  // the window
  EXPECT_EQ(samples.front().bytes, 3u);
  EXPECT_EQ(samples.back().bytes, 6u);
  CostTracker b(4);
  b.add({999, 9, 9, 9});
  b.clear();
  EXPECT_EQ(b.count(), 0u);
  for (const auto& s : samples) b.add(s);
  EXPECT_EQ(b.p95().bytes, a.p95().bytes);
  EXPECT_DOUBLE_EQ(b.p95().persist_s, a.p95().persist_s);
}

TEST(CostTracker, EwmaAndP95Table) {
  struct Case {
    std::vector<double> persist;
    size_t window;
    double alpha;
    double want_ewma;
    double want_p95;
  };
  const Case cases[] = {
      {{4}, 8, 0.5, 4, 4},
      {{4, 8}, 8, 0.5, 6, 8},
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 32, 1.0, 20, 19},
      // Window drops old samples from the p95, the EWMA remembers them.
      {{100, 1, 1, 1}, 3, 0.5, 13.375, 1},
      {{1, 1, 1, 100}, 4, 0.0, 1, 100},
  };
  for (const auto& c : cases) {
    CostTracker t(c.window, c.alpha);
    for (double p : c.persist) t.add({static_cast<uint64_t>(p * 1000), p / 10, p / 100, p});
    EXPECT_NEAR(t.ewma().persist_s, c.want_ewma, 1e-9);
    EXPECT_NEAR(t.p95().persist_s, c.want_p95, 1e-9);
    EXPECT_NEAR(t.p95().drain_s, c.want_p95 / 10, 1e-9);
    EXPECT_EQ(t.p95_cost().bytes, static_cast<uint64_t>(c.want_p95 * 1000));
    EXPECT_EQ(t.count(), c.persist.size());
  }
}

// ---- request channel ----

TEST(Request, JsonRoundTripAndValidation) {
  CheckpointRequest r;
  r.id = 7;
  EXPECT_EQ(RequestToJson(r), "{\"schema\":\"preempt.request/1\",\"action\":\"checkpoint\",\"id\":7}\n");
  CheckpointRequest back;
  ASSERT_TRUE(RequestFromJson(RequestToJson(r), "m", &back).ok());
  EXPECT_EQ(back.id, 7);
  struct Case {
    std::string doc;
    std::string needle;
  };
  const Case bad[] = {
      {"{\"schema\":\"preempt.request/1\",\"action\":\"stop\",\"id\":1}", "field 'action'"},
      {"{\"schema\":\"preempt.request/1\",\"action\":\"checkpoint\",\"id\":0}", "field 'id'"},
      {"{\"schema\":\"preempt.request/1\",\"action\":\"checkpoint\"}", "field 'id': missing"},
      {"{\"schema\":\"preempt.hints/1\",\"action\":\"checkpoint\",\"id\":1}", "field 'schema'"},
      {"{", "invalid JSON"},
  };
  for (const auto& c : bad) {
    Status s = RequestFromJson(c.doc, "/r", &back);
    EXPECT_FALSE(s.ok()) << c.doc;
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
  }
  EXPECT_EQ(WriteCheckpointRequest("/tmp/never", CheckpointRequest{0, "checkpoint"}).code(),
            StatusCode::kInvalidArgument);
}

TEST(Request, ChannelReturnsEachNewRequestOnce) {
  TempDir dir;
  std::string path = dir / "h.json.request";
  RequestChannel ch(path, std::chrono::milliseconds(0));
  EXPECT_FALSE(ch.poll());  // no file
  ASSERT_TRUE(WriteCheckpointRequest(path, {1, "checkpoint"}).ok());
  auto r = ch.poll();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, 1);
  EXPECT_FALSE(ch.poll());  // same request, not again
  ASSERT_TRUE(WriteCheckpointRequest(path, {1, "checkpoint"}).ok());
  EXPECT_FALSE(ch.poll());  // rewritten with the same id: not new
  ASSERT_TRUE(WriteCheckpointRequest(path, {3, "checkpoint"}).ok());
  r = ch.poll();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, 3);
  EXPECT_EQ(ch.last_id(), 3);
  ASSERT_TRUE(WriteCheckpointRequest(path, {2, "checkpoint"}).ok());
  EXPECT_FALSE(ch.poll());  // older id ignored
  // Garbage is ignored, and a valid newer request after it is seen.
  WriteFileOrDie(path, "garbage");
  EXPECT_FALSE(ch.poll());
  ASSERT_TRUE(WriteCheckpointRequest(path, {4, "checkpoint"}).ok());
  r = ch.poll();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, 4);
  // Removal and re-creation.
  ASSERT_EQ(unlink(path.c_str()), 0);
  EXPECT_FALSE(ch.poll());
  ASSERT_TRUE(WriteCheckpointRequest(path, {5, "checkpoint"}).ok());
  r = ch.poll();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, 5);
}

TEST(Request, ChannelSkipsRequestsAlreadyHandled) {
  TempDir dir;
  std::string path = dir / "req";
  ASSERT_TRUE(WriteCheckpointRequest(path, {9, "checkpoint"}).ok());
  RequestChannel resumed(path, std::chrono::milliseconds(0), /*last_handled=*/9);
  EXPECT_FALSE(resumed.poll());
  RequestChannel fresh(path, std::chrono::milliseconds(0), 0);
  EXPECT_TRUE(fresh.poll());
}

TEST(Request, ChannelRateLimitsStat) {
  TempDir dir;
  std::string path = dir / "req";
  RequestChannel ch(path, std::chrono::milliseconds(200));
  EXPECT_FALSE(ch.poll());  // checks now, nothing there
  ASSERT_TRUE(WriteCheckpointRequest(path, {1, "checkpoint"}).ok());
  EXPECT_FALSE(ch.poll());  // within the interval: not even stat'ed
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(ch.poll());
}

}  // namespace
}  // namespace preempt
