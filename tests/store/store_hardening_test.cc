// Hostile directories and API misuse: FIFOs where checkpoint files belong, NUL bytes in strings,
// negative steps, null outputs, invalid options, steps going backwards, leftovers of crashed
// writers, and checkpoints retired while a reader looks at them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "format/format.h"
#include "preempt/log.h"
#include "preempt/store.h"
#include "support/fault_fs.h"
#include "support/test_util.h"

namespace preempt {
namespace {

namespace fsys = std::filesystem;
using testing::TempDir;

StoreOptions Options(const std::string& root) {
  StoreOptions o;
  o.root = root;
  o.chunk_bytes = 64 << 10;
  o.queue_depth = 4;
  return o;
}

// A checkpoint whose single entry "w" holds `step` repeated.
struct Saved {
  std::vector<int64_t> w;
  SaveRequest req;
};
Saved Request(int64_t step) {
  Saved s;
  s.w.assign(5000, step);
  s.req.step = step;
  s.req.items.push_back({"w", DType::kInt64, {5000}, s.w.data(), s.w.size() * 8});
  s.req.metadata["step"] = std::to_string(step);
  return s;
}
Status Save(Store& store, int64_t step, bool rewind = false) {
  Saved s = Request(step);
  s.req.rewind = rewind;
  return store.save(s.req);
}
// Restores "w" and checks it holds the restored step's pattern; returns the step (-1: failed).
int64_t RestoredStep(Store& store, RestoreResult* r) {
  std::vector<int64_t> w(5000, -7);
  Status s = store.restore({{"w", DType::kInt64, {5000}, w.data(), w.size() * 8}}, {}, r);
  EXPECT_TRUE(s.ok()) << s.to_string();
  if (!s.ok()) return -1;
  for (int64_t v : w) EXPECT_EQ(v, r->step);
  return r->step;
}

// Runs `fn` in a child process; fails the test (instead of hanging it) when it has not finished
// within `limit_s`. Returns the child's exit code.
int InChild(double limit_s, const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "child still blocked after " << limit_s << " s";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ---- a FIFO (or any non-regular file) where a checkpoint file belongs --------------------------

class FifoInStep : public ::testing::TestWithParam<const char*> {};

TEST_P(FifoInStep, RefusedAsCorruptionWithoutBlocking) {
  const std::string name = GetParam();
  TempDir dir;
  const std::string root = dir / "ckpt";
  {
    Store store(Options(root));
    ASSERT_TRUE(Save(store, 1).ok());
    ASSERT_TRUE(Save(store, 2).ok());
  }
  const std::string victim = root + "/step-00000002/" + name;
  fsys::remove(victim);
  ASSERT_EQ(mkfifo(victim.c_str(), 0644), 0);
  int code = InChild(30, [&] {
    Store store(Options(root));
    RestoreResult r;
    std::vector<int64_t> w(5000);
    Status s = store.restore({{"w", DType::kInt64, {5000}, w.data(), w.size() * 8}}, {}, &r);
    if (!s.ok() || r.step != 1 || r.rejected.size() != 1) return 1;
    if (r.rejected[0].find(victim) == std::string::npos || r.rejected[0].find("FIFO") == std::string::npos) return 2;
    std::vector<CheckpointInfo> list;
    if (!store.list(&list).ok() || list.size() != 2 || list[0].valid || !list[1].valid) return 3;
    if (!Store::ListCheckpoints(root, &list).ok() || list[0].valid) return 4;
    VerifyResult v;
    if (!Store::Verify(root + "/step-00000002", &v).ok() || v.ok) return 5;
    CheckpointManifest m;
    Status ms = Store::ReadManifest(root + "/step-00000002", 0, &m);
    if ((name == std::string("COMMIT")) != ms.ok()) return 6;
    // A save still works (it never reads the FIFO) and becomes the newest.
    if (!Save(store, 3).ok() || RestoredStep(store, &r) != 3) return 7;
    return 0;
  });
  EXPECT_EQ(code, 0) << name;
}

INSTANTIATE_TEST_SUITE_P(Files, FifoInStep, ::testing::Values("COMMIT", "rank-00000.manifest", "rank-00000.bin"));

TEST(HostileRoot, FifoAsLatestDoesNotBlockSaves) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  fsys::create_directories(root);
  ASSERT_EQ(mkfifo((root + "/LATEST").c_str(), 0644), 0);
  int code = InChild(30, [&] {
    Store store(Options(root));
    if (!Save(store, 1).ok()) return 1;
    RestoreResult r;
    return RestoredStep(store, &r) == 1 ? 0 : 2;
  });
  EXPECT_EQ(code, 0);
}

// ---- strings are stored whole or refused -------------------------------------------------------

TEST(Strings, NulInMetadataIsRefusedAtSave) {
  TempDir dir;
  Store store(Options(dir / "ckpt"));
  for (auto [key, value] : std::vector<std::pair<std::string, std::string>>{{"k", std::string("v\0x", 3)},
                                                                            {std::string("k\0y", 3), "v"}}) {
    Saved s = Request(1);
    s.req.metadata[key] = value;
    Status st = store.save(s.req);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("NUL"), std::string::npos) << st.message();
  }
  EXPECT_FALSE(fsys::exists(dir / "ckpt/step-00000001"));
}

TEST(Strings, NulInsideAManifestStringIsCorruption) {
  // Valid envelopes (length and checksum right) around payloads with a \u0000 in a string.
  for (const std::string payload : {R"({"schema":"preempt.manifest/1","tensors":[{"name":"a\u0000b"}]})",
                                    R"({"metadata":[{"key":"k","value":"v\u0000x"}]})"}) {
    std::string text = "preempt-manifest 1 " + std::to_string(payload.size()) + " " +
                       format::Hex64(format::Hash64(payload.data(), payload.size())) + "\n" + payload;
    format::Manifest m;
    Status s = format::DecodeManifest(text, "x.manifest", UINT64_MAX, &m);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << payload;
    EXPECT_NE(s.message().find("NUL"), std::string::npos) << s.message();
  }
  // An escaped backslash followed by "u0000" is text, not a NUL.
  const std::string ok = R"({"x":"\\u0000"})";
  std::string text = "preempt-commit 1 " + std::to_string(ok.size()) + " " + format::Hex64(format::Hash64(ok.data(), ok.size())) + "\n" + ok;
  format::CommitRecord c;
  EXPECT_EQ(format::DecodeCommit(text, "COMMIT", &c).message().find("NUL"), std::string::npos);
}

// ---- API misuse --------------------------------------------------------------------------------

TEST(Misuse, NegativeStepIsRefused) {
  TempDir dir;
  Store store(Options(dir / "ckpt"));
  Status s = Save(store, -5);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("-5"), std::string::npos) << s.message();
  EXPECT_FALSE(fsys::exists(dir / "ckpt/step--0000005"));
  EXPECT_FALSE(fsys::exists(dir / "ckpt/step--0000005.tmp"));
}

// Misspelt settings in the environment are never silently ignored: PREEMPT_IO_BACKEND names the
// value in one warning and the store saves with the backend chosen automatically; the log level's
// names parse exactly (an unknown PREEMPT_LOG_LEVEL warns on stderr at the first log call).
TEST(Misuse, UnknownSettingsInTheEnvironmentAreNamedInAWarning) {
  TempDir dir;
  std::vector<std::string> warnings;
  SetLogSink([&](LogLevel level, const std::string& line) {
    if (level == LogLevel::kWarn) warnings.push_back(line);
  });
  setenv("PREEMPT_IO_BACKEND", "uringg", 1);
  Status s;
  {
    Store store(Options(dir / "ckpt"));
    s = Save(store, 1);
    if (s.ok()) s = Save(store, 2);
  }
  unsetenv("PREEMPT_IO_BACKEND");
  SetLogSink(nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  int named = 0;
  for (const auto& w : warnings) named += w.find("PREEMPT_IO_BACKEND=\"uringg\"") != std::string::npos;
  EXPECT_EQ(named, 1) << ::testing::PrintToString(warnings);  // once per process, not per save

  LogLevel level = LogLevel::kError;
  EXPECT_TRUE(ParseLogLevel("warn", &level));
  EXPECT_EQ(level, LogLevel::kWarn);
  for (const char* bad : {"WARN", "warning", "", "info ", "verbose"}) {
    EXPECT_FALSE(ParseLogLevel(bad, &level)) << bad;
    EXPECT_EQ(level, LogLevel::kWarn) << bad;
  }
  EXPECT_FALSE(ParseLogLevel(nullptr, &level));
}

TEST(Misuse, NullOutputsAreInvalidArguments) {
  TempDir dir;
  Store store(Options(dir / "ckpt"));
  ASSERT_TRUE(Save(store, 1).ok());
  EXPECT_EQ(store.restore({}, {}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.list(nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.valid_steps(nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Store::Verify(dir / "ckpt/step-00000001", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Store::ListCheckpoints(dir / "ckpt", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Store::ReadManifest(dir / "ckpt/step-00000001", 0, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(Misuse, KeepLastBelowOneIsRefused) {
  TempDir dir;
  for (int keep : {0, -1}) {
    StoreOptions o = Options(dir / "ckpt");
    o.keep_last = keep;
    try {
      Store store(o);
      ADD_FAILURE() << "keep_last " << keep << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(e.status().message().find("keep_last"), std::string::npos) << e.what();
    }
  }
}

// ---- steps only move forward -------------------------------------------------------------------

TEST(StepOrder, GoingBackwardsIsRefusedUnlessRewinding) {
  TempDir dir;
  StoreOptions o = Options(dir / "ckpt");
  o.keep_last = 2;
  Store store(o);
  ASSERT_TRUE(Save(store, 10).ok());
  ASSERT_TRUE(Save(store, 11).ok());
  Status s = Save(store, 5);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("step 11"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rewind"), std::string::npos) << s.message();
  EXPECT_TRUE(Save(store, 11).ok()) << "re-saving the newest step is allowed";
  std::vector<int64_t> steps;
  ASSERT_TRUE(store.valid_steps(&steps).ok());
  EXPECT_EQ(steps, (std::vector<int64_t>{11, 10}));
  EXPECT_FALSE(fsys::exists(dir / "ckpt/step-00000005.tmp"));

  // Rewinding retires the abandoned branch; the rewound run then moves forward again.
  ASSERT_TRUE(Save(store, 5, /*rewind=*/true).ok());
  ASSERT_TRUE(Save(store, 6).ok());
  ASSERT_TRUE(Save(store, 7).ok());
  ASSERT_TRUE(store.valid_steps(&steps).ok());
  EXPECT_EQ(steps, (std::vector<int64_t>{7, 6}));
  RestoreResult r;
  EXPECT_EQ(RestoredStep(store, &r), 7);
  EXPECT_EQ(testing::ReadFileOrDie(dir / "ckpt/LATEST"), "step-00000007\n");
}

TEST(StepOrder, CorruptNewerStepDoesNotBlockTheResumedRun) {
  TempDir dir;
  Store store(Options(dir / "ckpt"));
  ASSERT_TRUE(Save(store, 10).ok());
  ASSERT_TRUE(Save(store, 20).ok());
  fsys::remove(dir / "ckpt/step-00000020/COMMIT");  // restore resumes from 10
  RestoreResult r;
  EXPECT_EQ(RestoredStep(store, &r), 10);
  EXPECT_TRUE(Save(store, 11).ok());
  EXPECT_EQ(RestoredStep(store, &r), 11);
}

// ---- leftovers of crashed writers --------------------------------------------------------------

TEST(Leftovers, NextSaveRemovesThemAndRepairsAnInterruptedResave) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  {
    Store store(Options(root));
    ASSERT_TRUE(Save(store, 3).ok());
    ASSERT_TRUE(Save(store, 4).ok());
  }
  // What a kill leaves: a LATEST temp file, an old copy of a re-saved step whose new copy is in
  // place, a half-deleted retired step, a partial save; and a re-save killed between its two
  // renames (step 4 moved aside, its new copy still a .tmp).
  testing::WriteFileOrDie(root + "/LATEST.tmp.12345.0", "step-00000003\n");
  fsys::copy(root + "/step-00000003", root + "/step-00000003.replaced.tmp");
  fsys::copy(root + "/step-00000003", root + "/step-00000002.retired.tmp");
  fsys::create_directory(root + "/step-00000009.tmp");
  fsys::rename(root + "/step-00000004", root + "/step-00000004.replaced.tmp");
  fsys::copy(root + "/step-00000004.replaced.tmp", root + "/step-00000004.tmp");
  Store store(Options(root));
  ASSERT_TRUE(Save(store, 5).ok());
  std::vector<std::string> names;
  for (const auto& e : fsys::directory_iterator(root)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".lock.rank-00000", "LATEST", "step-00000003", "step-00000004", "step-00000005"}));
  VerifyResult v;
  ASSERT_TRUE(Store::Verify(root + "/step-00000004", &v).ok());
  EXPECT_TRUE(v.ok) << (v.problems.empty() ? "" : v.problems[0]);
}

// ---- a checkpoint retired while a reader reads it ----------------------------------------------

TEST(ConcurrentRetention, RestoreListsAgainWhenItsStepVanishes) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  StoreOptions wo = Options(root);
  wo.keep_last = 1;
  Store writer(wo);
  ASSERT_TRUE(Save(writer, 1).ok());
  ASSERT_TRUE(Save(writer, 2).ok());
  testing::FaultInjectingFileSystem fs;
  int data_opens = 0;
  fs.on_open = [&](const std::string& path) {
    // The restore has checked step 2 and opens its data: the writer commits 3 and retires 2.
    if (path.find("step-00000002/rank-00000.bin") != std::string::npos && ++data_opens == 2) {
      ASSERT_TRUE(Save(writer, 3).ok());
      ASSERT_FALSE(fsys::exists(root + "/step-00000002"));
    }
  };
  StoreOptions ro = Options(root);
  ro.fs = &fs;
  Store reader(ro);
  RestoreResult r;
  EXPECT_EQ(RestoredStep(reader, &r), 3);
  EXPECT_TRUE(r.rejected.empty()) << r.rejected[0];
  EXPECT_EQ(data_opens, 2);
}

// Killed (the machine stops) after every possible number of operations of a save whose
// retention retires the previous step: a committed-looking directory is always a valid one.
TEST(ConcurrentRetention, KillAtEveryOperationLeavesNoInvalidCommittedStep) {
  int64_t total_ops = 0;
  {
    TempDir dir;
    testing::FaultInjectingFileSystem fs;
    StoreOptions o = Options(dir / "ckpt");
    o.fs = &fs;
    o.keep_last = 1;
    Store store(o);
    ASSERT_TRUE(Save(store, 1).ok());
    const int64_t before = fs.ops.load();
    ASSERT_TRUE(Save(store, 2).ok());
    total_ops = fs.ops.load() - before;
  }
  for (int64_t n = 0; n <= total_ops; ++n) {
    TempDir dir;
    testing::FaultInjectingFileSystem fs;
    StoreOptions o = Options(dir / "ckpt");
    o.fs = &fs;
    o.keep_last = 1;
    {
      Store store(o);
      ASSERT_TRUE(Save(store, 1).ok());
      fs.fail_after_ops = fs.ops.load() + n;
      (void)Save(store, 2);
    }
    std::vector<CheckpointInfo> all;
    ASSERT_TRUE(Store::ListCheckpoints(dir / "ckpt", &all).ok());
    int committed = 0;
    for (const auto& c : all) {
      if (!c.committed) continue;
      ++committed;
      EXPECT_TRUE(c.valid) << "killed after op " << n << ": " << c.path << ": " << c.problem;
    }
    EXPECT_GE(committed, 1) << "killed after op " << n;
  }
}

}  // namespace
}  // namespace preempt
