// preempt-ckpt list/inspect/verify on real checkpoints: output and exit codes scripts rely on.
#include <gtest/gtest.h>
#include <sys/wait.h>

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
  std::string cmd = testing::BinaryDir() + "/src/tools/preempt-ckpt " + args + " 2>&1";
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

}  // namespace
}  // namespace preempt
