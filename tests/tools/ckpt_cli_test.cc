// preempt-ckpt list/inspect/verify on real checkpoints: output and exit codes scripts rely on.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "preempt/store.h"
#include "support/test_util.h"

namespace preempt {
namespace {

struct CliRun {
  int code;
  std::string out;
};

CliRun Cli(const std::string& args) {
  // `timeout`: a tool blocked on a file fails the test (exit 124) instead of hanging it.
  std::string cmd = "timeout 30 " + testing::BinaryDir() + "/src/tools/preempt-ckpt " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(CkptCli, ListInspectVerify) {
  testing::TempDir dir;
  StoreOptions o;
  o.root = dir / "ckpt";
  o.chunk_bytes = 64 << 10;
  Store store(o);
  std::vector<float> w(50000, 0.5f);
  int64_t counter = 42;
  for (int step : {10, 20}) {
    std::fill(w.begin(), w.end(), 0.05f * step);  // every chunk changes: step 20 writes all of its data
    SaveRequest req;
    req.step = step;
    req.items.push_back({"model:fc.weight", DType::kFloat32, {250, 200}, w.data(), w.size() * 4});
    req.items.push_back({"extra:counter", DType::kInt64, {}, &counter, 8});
    req.metadata["lr"] = "0.01";
    ASSERT_TRUE(store.save(req).ok());
  }
  CliRun r = Cli("list " + o.root);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("step-00000020"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("step-00000020"), r.out.find("step-00000010")) << "newest first";

  r = Cli("inspect " + o.root + "/step-00000020");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("model:fc.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("float32"), std::string::npos);
  EXPECT_NE(r.out.find("[250,200]"), std::string::npos);
  EXPECT_NE(r.out.find("lr = 0.01"), std::string::npos);

  r = Cli("verify " + o.root);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("OK"), std::string::npos);

  {  // flip one byte of the weight
    std::fstream f(o.root + "/step-00000020/rank-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x7f');
  }
  r = Cli("verify " + o.root + "/step-00000020");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("model:fc.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank-00000.bin"), std::string::npos) << r.out;

  std::filesystem::remove(o.root + "/step-00000010/COMMIT");
  r = Cli("list " + o.root);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("INVALID"), std::string::npos) << r.out;

  EXPECT_EQ(Cli("verify " + dir.path() + "/nope").code, 3);
  EXPECT_EQ(Cli("frobnicate x").code, 2);
}

// A step whose weight is unchanged references the older step's chunks: list and inspect show
// what it wrote and what it references; a flipped byte in the shared chunk fails both steps.
TEST(CkptCli, WrittenAndReferencedBytes) {
  testing::TempDir dir;
  StoreOptions o;
  o.root = dir / "ckpt";
  o.chunk_bytes = 64 << 10;
  Store store(o);
  std::vector<float> frozen(64 << 10, 0.25f);  // 4 chunks
  int64_t counter = 0;
  for (int step : {10, 20}) {
    counter = step;
    SaveRequest req;
    req.step = step;
    req.items.push_back({"model:frozen", DType::kFloat32, {static_cast<int64_t>(frozen.size())}, frozen.data(), frozen.size() * 4});
    req.items.push_back({"extra:counter", DType::kInt64, {}, &counter, 8});
    ASSERT_TRUE(store.save(req).ok());
  }
  CliRun r = Cli("list " + o.root);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("written"), std::string::npos) << r.out;
  const std::string line20 = r.out.substr(r.out.find("step-00000020"), r.out.find('\n', r.out.find("step-00000020")) - r.out.find("step-00000020"));
  EXPECT_NE(line20.find("4.0 KiB"), std::string::npos) << "step 20 writes only the chunk holding the counter: " << r.out;

  r = Cli("inspect " + o.root + "/step-00000020");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("written 4.0 KiB in 1 chunks; referenced 256.0 KiB in 4 unchanged chunks of step-00000010"), std::string::npos) << r.out;

  {  // flip one byte of the shared weight, in step 10's file
    std::fstream f(o.root + "/step-00000010/rank-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(70000);
    f.put('\x7f');
  }
  r = Cli("verify " + o.root + "/step-00000020");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("step-00000010/rank-00000.bin: chunk 1 of step 20"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model:frozen"), std::string::npos) << r.out;
}

void SaveSteps(const std::string& root, std::initializer_list<int> steps) {
  StoreOptions o;
  o.root = root;
  o.chunk_bytes = 64 << 10;
  o.keep_last = 10;
  Store store(o);
  std::vector<float> w(50000, 0.5f);
  for (int step : steps) {
    SaveRequest req;
    req.step = step;
    req.items.push_back({"model:fc.weight", DType::kFloat32, {250, 200}, w.data(), w.size() * 4});
    ASSERT_TRUE(store.save(req).ok());
  }
}

// The tool, Store::list and restore apply one validity check: a renamed step directory or
// manifests swapped between steps are invalid for all three.
TEST(CkptCli, RenamedAndSwappedStepsAreInvalidEverywhere) {
  testing::TempDir dir;
  const std::string root = dir / "ckpt";
  SaveSteps(root, {10, 20, 30});
  namespace fsys = std::filesystem;
  fsys::rename(root + "/step-00000030", root + "/step-00000040");  // renamed: COMMIT says 30
  for (const char* f : {"rank-00000.manifest", "rank-00000.bin"}) {  // swapped: 10's files in 20
    fsys::copy_file(root + "/step-00000010/" + f, root + "/step-00000020/" + f, fsys::copy_options::overwrite_existing);
  }
  CliRun r = Cli("list " + root);
  EXPECT_EQ(r.code, 1) << r.out;
  auto line = [&](const std::string& name) {
    auto at = r.out.find(name);
    return at == std::string::npos ? std::string() : r.out.substr(at, r.out.find('\n', at) - at);
  };
  EXPECT_NE(line("step-00000040").find("INVALID"), std::string::npos) << r.out;
  EXPECT_NE(line("step-00000040").find("field step is 30"), std::string::npos) << r.out;
  EXPECT_NE(line("step-00000020").find("INVALID"), std::string::npos) << r.out;
  EXPECT_NE(line("step-00000010").find("committed"), std::string::npos) << r.out;
  EXPECT_EQ(Cli("verify " + root + "/step-00000040").code, 1);
  EXPECT_EQ(Cli("verify " + root + "/step-00000020").code, 1);
  EXPECT_EQ(Cli("verify " + root).code, 1);
  EXPECT_EQ(Cli("verify " + root + "/step-00000010").code, 0);

  StoreOptions o;
  o.root = root;
  Store store(o);
  std::vector<CheckpointInfo> list;
  ASSERT_TRUE(store.list(&list).ok());
  ASSERT_EQ(list.size(), 3u);
  EXPECT_FALSE(list[0].valid);
  EXPECT_FALSE(list[1].valid);
  EXPECT_TRUE(list[2].valid);
  RestoreResult res;
  RestoreOptions ro;
  ro.strict = false;
  ASSERT_TRUE(store.restore({}, ro, &res).ok());
  EXPECT_EQ(res.step, 10);
  EXPECT_EQ(res.rejected.size(), 2u);
}

// A FIFO where COMMIT or a manifest belongs: every command answers (no hang) and says INVALID.
TEST(CkptCli, FifoInACheckpointDoesNotHangTheTool) {
  testing::TempDir dir;
  const std::string root = dir / "ckpt";
  SaveSteps(root, {10, 20});
  for (const char* victim : {"/step-00000020/COMMIT", "/step-00000020/rank-00000.manifest"}) {
    SCOPED_TRACE(victim);
    const std::string p = root + victim;
    const std::string saved = testing::ReadFileOrDie(p);
    std::filesystem::remove(p);
    ASSERT_EQ(mkfifo(p.c_str(), 0644), 0);
    CliRun r = Cli("list " + root);  // `timeout` below would turn a hang into exit 124
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("FIFO"), std::string::npos) << r.out;
    r = Cli("verify " + root + "/step-00000020");
    EXPECT_EQ(r.code, 1) << r.out;
    r = Cli("inspect " + root + "/step-00000020");
    EXPECT_NE(r.code, 0) << r.out;
    std::filesystem::remove(p);
    testing::WriteFileOrDie(p, saved);
  }
  EXPECT_EQ(Cli("list " + root).code, 0);
  EXPECT_EQ(Cli("inspect " + root + "/step-00000020 --rank x").code, 2);
  EXPECT_EQ(Cli("inspect " + root + "/step-00000020 --rank -1").code, 2);
}

}  // namespace
}  // namespace preempt
