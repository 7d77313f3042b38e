// Store round trips, corruption fallback, fault injection, retention, multi-rank commit.
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "format/format.h"
#include "preempt/store.h"
#include "support/fault_fs.h"
#include "support/test_util.h"

namespace preempt {
namespace {

using testing::TempDir;

// Deterministic content for (step, item).
std::vector<uint8_t> Pattern(int64_t step, int item, size_t n) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 1000003 + item);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

struct Fixture {
  std::vector<std::vector<uint8_t>> data;
  SaveRequest req;
};

// A mix of sizes: tiny, unaligned, exactly a chunk, spanning several chunks.
Fixture MakeRequest(int64_t step, size_t chunk) {
  Fixture f;
  const std::vector<size_t> sizes = {4, 1000, chunk, 3 * chunk + 17, 12, 0, chunk / 2 + 3};
  f.data.resize(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) f.data[i] = Pattern(step, static_cast<int>(i), sizes[i]);
  f.req.step = step;
  for (size_t i = 0; i < sizes.size(); ++i) {
    SaveItem it;
    it.name = "model:layer" + std::to_string(i) + ".weight";
    it.dtype = DType::kUInt8;
    it.shape = {static_cast<int64_t>(sizes[i])};
    it.data = f.data[i].data();
    it.nbytes = sizes[i];
    f.req.items.push_back(it);
  }
  f.req.metadata["note"] = "step " + std::to_string(step);
  return f;
}

std::vector<RestoreTarget> TargetsFor(const Fixture& f, std::vector<std::vector<uint8_t>>* out) {
  out->clear();
  std::vector<RestoreTarget> t;
  for (const auto& it : f.req.items) out->emplace_back(it.nbytes, 0xAA);
  for (size_t i = 0; i < f.req.items.size(); ++i) {
    const auto& it = f.req.items[i];
    t.push_back({it.name, it.dtype, it.shape, (*out)[i].data(), it.nbytes});
  }
  return t;
}

StoreOptions SmallOptions(const std::string& root) {
  StoreOptions o;
  o.root = root;
  o.chunk_bytes = 64 << 10;
  o.queue_depth = 4;
  o.read_queue_depth = 3;  // restores recycle their read buffers too
  return o;
}

void ExpectRestores(Store& store, int64_t step, const Fixture& f) {
  std::vector<std::vector<uint8_t>> got;
  auto targets = TargetsFor(f, &got);
  RestoreResult r;
  Status s = store.restore(targets, RestoreOptions{}, &r);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(r.step, step);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], f.data[i]) << f.req.items[i].name;
  EXPECT_EQ(r.metadata.at("note"), "step " + std::to_string(step));
}

struct Mode {
  IoBackend backend;
  DirectIo direct;
  bool refuse_direct;  // the file system answers O_DIRECT with EINVAL (as tmpfs did before Linux 6.6)
};

class StoreModes : public ::testing::TestWithParam<Mode> {};

TEST_P(StoreModes, RoundTripEveryBackend) {
  Mode mode = GetParam();
  TempDir dir;
  testing::FaultInjectingFileSystem fs;
  fs.native_fds = true;  // real fds: io_uring drives them
  fs.refuse_direct = mode.refuse_direct;
  StoreOptions o = SmallOptions(dir / "ckpt");
  o.fs = &fs;
  o.io_backend = mode.backend;
  o.direct_io = mode.direct;
  Store store(o);
  Fixture f = MakeRequest(10, o.chunk_bytes);
  auto h = store.save_async(f.req);
  ASSERT_TRUE(h->wait().ok()) << h->status().to_string();
  EXPECT_TRUE(h->done());
  EXPECT_EQ(h->bytes_written(), h->bytes_total());
  SaveStats st = h->stats();
  EXPECT_NE(st.backend.find(mode.backend == IoBackend::kPosix ? "posix" : "io_uring"), std::string::npos) << st.backend;
  EXPECT_NE(st.backend.find(mode.refuse_direct || mode.direct == DirectIo::kOff ? "buffered" : "direct"), std::string::npos) << st.backend;
  ExpectRestores(store, 10, f);
  VerifyResult v;
  ASSERT_TRUE(Store::Verify(dir / "ckpt/step-00000010", &v).ok());
  EXPECT_TRUE(v.ok);
  EXPECT_TRUE(std::filesystem::exists(dir / "ckpt/LATEST"));
}

INSTANTIATE_TEST_SUITE_P(All, StoreModes,
                         ::testing::Values(Mode{IoBackend::kUring, DirectIo::kAuto, false},
                                           Mode{IoBackend::kPosix, DirectIo::kAuto, false},
                                           Mode{IoBackend::kUring, DirectIo::kOff, false},
                                           Mode{IoBackend::kUring, DirectIo::kAuto, true},
                                           Mode{IoBackend::kPosix, DirectIo::kAuto, true}));

TEST(Store, DirectOnFailsWhereRefused) {
  TempDir dir;
  testing::FaultInjectingFileSystem fs;
  fs.refuse_direct = true;
  StoreOptions o = SmallOptions(dir / "ckpt");
  o.fs = &fs;
  o.direct_io = DirectIo::kOn;
  Store store(o);
  Fixture f = MakeRequest(1, o.chunk_bytes);
  Status s = store.save(f.req);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank-00000.bin"), std::string::npos) << s.to_string();
}

TEST(Store, RestoreIntoOwnedBuffersAndNonStrict) {
  TempDir dir;
  Store store(SmallOptions(dir / "ckpt"));
  Fixture f = MakeRequest(3, 64 << 10);
  ASSERT_TRUE(store.save(f.req).ok());
  RestoreOptions ro;
  ro.strict = false;
  std::vector<uint8_t> one(f.data[1].size());
  std::vector<uint8_t> ghost(8);
  std::vector<RestoreTarget> t = {{f.req.items[1].name, DType::kUInt8, f.req.items[1].shape, one.data(), one.size()},
                                  {"not.there", DType::kBytes, {}, ghost.data(), 8}};
  RestoreResult r;
  ASSERT_TRUE(store.restore(t, ro, &r).ok());
  EXPECT_EQ(one, f.data[1]);
  ASSERT_EQ(r.missing.size(), 1u);
  EXPECT_EQ(r.missing[0], "not.there");
  EXPECT_EQ(r.owned.size(), f.req.items.size() - 1);
  const auto& buf = r.owned.at(f.req.items[3].name);
  ASSERT_EQ(buf.size(), f.data[3].size());
  EXPECT_EQ(0, std::memcmp(buf.data(), f.data[3].data(), buf.size()));
}

TEST(Store, StrictRestoreNamesMismatches) {
  TempDir dir;
  Store store(SmallOptions(dir / "ckpt"));
  std::vector<float> w(20, 1.5f);
  SaveRequest req;
  req.step = 5;
  req.items.push_back({"fc1.weight", DType::kFloat32, {4, 5}, w.data(), w.size() * 4});
  ASSERT_TRUE(store.save(req).ok());
  std::vector<float> out(20);
  RestoreResult r;
  Status s = store.restore({{"fc1.weight", DType::kFloat32, {5, 4}, out.data(), 80}}, {}, &r);
  EXPECT_EQ(s.code(), StatusCode::kMismatch);
  EXPECT_NE(s.message().find("fc1.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("float32[4,5]"), std::string::npos) << s.message();
  s = store.restore({{"fc2.weight", DType::kFloat32, {4, 5}, out.data(), 80}}, {}, &r);
  EXPECT_EQ(s.code(), StatusCode::kMismatch);
  EXPECT_NE(s.message().find("missing in checkpoint: fc2.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unexpected in checkpoint: fc1.weight"), std::string::npos) << s.message();
}

TEST(Store, RejectsOutOfRangeQueueDepths) {
  TempDir dir;
  for (int depth : {0, 257}) {
    StoreOptions w = SmallOptions(dir / "ckpt");
    w.queue_depth = depth;
    EXPECT_THROW(Store{w}, Error) << depth;
    StoreOptions r = SmallOptions(dir / "ckpt");
    r.read_queue_depth = depth;
    try {
      Store store(r);
      ADD_FAILURE() << "read_queue_depth " << depth << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(e.status().message().find("read_queue_depth"), std::string::npos) << e.status().message();
    }
  }
}

TEST(Store, RejectsBadItems) {
  TempDir dir;
  Store store(SmallOptions(dir / "ckpt"));
  uint8_t b[8] = {};
  for (std::string bad : std::vector<std::string>{"../etc/passwd", "a/b", "", ".hidden", "x..y", std::string("nul\0x", 5)}) {
    SaveRequest req;
    req.step = 1;
    req.items.push_back({bad, DType::kBytes, {}, b, 8});
    Status s = store.save(req);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  SaveRequest req;
  req.step = 1;
  req.items.push_back({"w", DType::kFloat32, {3}, b, 8});  // 3 floats != 8 bytes
  Status s = store.save(req);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("item w"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/step-00000001"));
}

TEST(Store, RetentionKeepsNewest) {
  TempDir dir;
  StoreOptions o = SmallOptions(dir / "ckpt");
  o.keep_last = 2;
  Store store(o);
  Fixture last;
  for (int step : {100, 200, 300, 400}) {
    last = MakeRequest(step, o.chunk_bytes);
    ASSERT_TRUE(store.save(last.req).ok());
  }
  std::vector<CheckpointInfo> list;
  ASSERT_TRUE(store.list(&list).ok());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].step, 400);
  EXPECT_EQ(list[1].step, 300);
  EXPECT_TRUE(list[0].valid);
  ExpectRestores(store, 400, last);
}

TEST(Store, QueuedSavesRunInOrderAndResaveReplaces) {
  TempDir dir;
  Store store(SmallOptions(dir / "ckpt"));
  Fixture a = MakeRequest(1, 64 << 10), b = MakeRequest(2, 64 << 10);
  auto ha = store.save_async(a.req);
  auto hb = store.save_async(b.req);
  ASSERT_TRUE(hb->wait().ok());
  EXPECT_TRUE(ha->done());
  Fixture b2 = MakeRequest(2, 64 << 10);
  b2.req.metadata["note"] = "step 2";
  ASSERT_TRUE(store.save(b2.req).ok());  // same step again
  ExpectRestores(store, 2, b2);
}

TEST(Store, CancelLeavesNothing) {
  TempDir dir;
  testing::FaultInjectingFileSystem fs;
  fs.max_write_piece = 4096;  // slow it down
  StoreOptions o = SmallOptions(dir / "ckpt");
  o.fs = &fs;
  Store store(o);
  std::vector<uint8_t> big(8 << 20, 7);
  SaveRequest req;
  req.step = 9;
  req.items.push_back({"big", DType::kBytes, {}, big.data(), big.size()});
  auto h = store.save_async(req);
  h->cancel();
  Status s = h->wait();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.to_string();
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/step-00000009"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/step-00000009.tmp"));
}

// ---- corruption: every kind falls back to the next-older checkpoint ----------------------------

class Corruption : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<Store>(SmallOptions(dir_ / "ckpt"));
    old_ = MakeRequest(100, 64 << 10);
    new_ = MakeRequest(200, 64 << 10);
    ASSERT_TRUE(store_->save(old_.req).ok());
    ASSERT_TRUE(store_->save(new_.req).ok());
    newdir_ = dir_ / "ckpt/step-00000200";
  }
  void expect_fallback(const std::string& must_mention) {
    std::vector<std::vector<uint8_t>> got;
    auto targets = TargetsFor(old_, &got);
    RestoreResult r;
    Status s = store_->restore(targets, {}, &r);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(r.step, 100);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], old_.data[i]);
    ASSERT_EQ(r.rejected.size(), 1u);
    EXPECT_NE(r.rejected[0].find(must_mention), std::string::npos) << r.rejected[0];
    // Without fallback the same restore is an error.
    RestoreOptions strict;
    strict.fallback = false;
    EXPECT_FALSE(store_->restore(targets, strict, &r).ok());
    std::vector<int64_t> steps;
    ASSERT_TRUE(store_->valid_steps(&steps).ok());
  }
  TempDir dir_;
  std::unique_ptr<Store> store_;
  Fixture old_, new_;
  std::string newdir_;
};

TEST_F(Corruption, FlippedDataByteNamesFileAndTensor) {
  // Byte 70000 lies in chunk 1, inside layer3 (offset 66624 .. 66624+3*65536+17).
  preempt::testing::FlipByte(newdir_ + "/rank-00000.bin", 70000);
  expect_fallback("rank-00000.bin: chunk 1");
  VerifyResult v;
  ASSERT_TRUE(Store::Verify(newdir_, &v).ok());
  ASSERT_FALSE(v.ok);
  EXPECT_NE(v.problems[0].find("model:layer3.weight"), std::string::npos) << v.problems[0];
}

TEST_F(Corruption, FlippedByteAnywhereIsDetected) {
  std::mt19937 rng(42);
  uint64_t size = std::filesystem::file_size(newdir_ + "/rank-00000.bin");
  uint64_t data_bytes = 0;
  for (auto& d : new_.data) data_bytes = AlignUp(data_bytes, 64) + d.size();
  for (int i = 0; i < 20; ++i) {
    // Only bytes inside the logical data are covered by checksums (the rest is zero padding).
    uint64_t off = std::uniform_int_distribution<uint64_t>(0, data_bytes - 1)(rng);
    preempt::testing::FlipByte(newdir_ + "/rank-00000.bin", off);
    VerifyResult v;
    ASSERT_TRUE(Store::Verify(newdir_, &v).ok());
    EXPECT_FALSE(v.ok) << "flip at " << off << " of " << size;
    preempt::testing::FlipByte(newdir_ + "/rank-00000.bin", off);  // undo
  }
}

TEST_F(Corruption, FlippedManifestOrCommitByteAnywhere) {
  for (const std::string name : {"rank-00000.manifest", "COMMIT"}) {
    const std::string p = newdir_ + "/" + name;
    const uint64_t size = std::filesystem::file_size(p);
    for (uint64_t off = 0; off < size; off += 3) {
      preempt::testing::FlipByte(p, off);
      std::vector<std::vector<uint8_t>> got;
      auto targets = TargetsFor(old_, &got);
      RestoreResult r;
      Status s = store_->restore(targets, {}, &r);
      ASSERT_TRUE(s.ok()) << name << " flip at " << off << ": " << s.to_string();
      ASSERT_EQ(r.step, 100) << name << " flip at " << off << " went undetected";
      ASSERT_EQ(r.rejected.size(), 1u);
      EXPECT_NE(r.rejected[0].find(name), std::string::npos) << r.rejected[0];
      preempt::testing::FlipByte(p, off);
    }
  }
}

TEST_F(Corruption, FlippedManifestByte) {
  preempt::testing::FlipByte(newdir_ + "/rank-00000.manifest", 200);
  expect_fallback("rank-00000.manifest");
}

TEST_F(Corruption, TruncatedDataFile) {
  std::filesystem::resize_file(newdir_ + "/rank-00000.bin", 4096 * 3);
  expect_fallback("truncated");
}

TEST_F(Corruption, TruncatedManifest) {
  auto p = newdir_ + "/rank-00000.manifest";
  std::filesystem::resize_file(p, std::filesystem::file_size(p) / 2);
  expect_fallback("rank-00000.manifest");
}

TEST_F(Corruption, MissingCommit) {
  std::filesystem::remove(newdir_ + "/COMMIT");
  expect_fallback("COMMIT missing");
}

TEST_F(Corruption, UnknownFormatVersion) {
  // A well-formed manifest of a future version: the header and the JSON say the next version.
  auto p = newdir_ + "/rank-00000.manifest";
  std::string text = testing::ReadFileOrDie(p);
  std::string payload = text.substr(text.find('\n') + 1);
  const std::string now = "\"format_version\": " + std::to_string(format::kFormatVersion);
  const std::string next = std::to_string(format::kFormatVersion + 1);
  auto pos = payload.find(now);
  ASSERT_NE(pos, std::string::npos);
  payload.replace(pos, now.size(), "\"format_version\": " + next);
  std::string head = "preempt-manifest " + next + " " + std::to_string(payload.size()) + " " +
                     format::Hex64(format::Hash64(payload.data(), payload.size())) + "\n";
  testing::WriteFileOrDie(p, head + payload);
  format::Manifest m;
  Status s = format::DecodeManifest(head + payload, p, UINT64_MAX, &m);
  EXPECT_EQ(s.code(), StatusCode::kVersionMismatch);
  EXPECT_NE(s.message().find("format_version"), std::string::npos);
  expect_fallback("format_version");
}

TEST_F(Corruption, WorldSizeMismatchIsAnErrorNotAFallback) {
  StoreOptions o = SmallOptions(dir_ / "ckpt");
  o.world_size = 2;
  Store other(o);
  RestoreResult r;
  Status s = other.restore({}, {}, &r);
  EXPECT_EQ(s.code(), StatusCode::kMismatch);
  EXPECT_NE(s.message().find("world_size 2"), std::string::npos) << s.message();
}

TEST(Store, NothingToRestore) {
  TempDir dir;
  Store store(SmallOptions(dir / "none"));
  RestoreResult r;
  EXPECT_EQ(store.restore({}, {}, &r).code(), StatusCode::kNotFound);
}

// ---- out of space ---------------------------------------------------------------------------

TEST(Store, EnospcKeepsPreviousAndCleansUp) {
  TempDir dir;
  testing::FaultInjectingFileSystem fs;
  StoreOptions o = SmallOptions(dir / "ckpt");
  o.fs = &fs;
  Store store(o);
  Fixture a = MakeRequest(1, o.chunk_bytes);
  ASSERT_TRUE(store.save(a.req).ok());
  fs.space_left = 100000;  // mid-way through the next data file
  Fixture b = MakeRequest(2, o.chunk_bytes);
  Status s = store.save(b.req);
  ASSERT_EQ(s.code(), StatusCode::kNoSpace) << s.to_string();
  EXPECT_NE(s.message().find("step-00000002.tmp/rank-00000.bin"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/step-00000002"));
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/step-00000002.tmp/rank-00000.bin"));
  ExpectRestores(store, 1, a);
  fs.space_left = -1;
  Fixture c = MakeRequest(3, o.chunk_bytes);
  ASSERT_TRUE(store.save(c.req).ok());
  ExpectRestores(store, 3, c);
}

TEST(Store, EioOnWriteAndSync) {
  TempDir dir;
  testing::FaultInjectingFileSystem fs;
  StoreOptions o = SmallOptions(dir / "ckpt");
  o.fs = &fs;
  Store store(o);
  Fixture a = MakeRequest(1, o.chunk_bytes);
  ASSERT_TRUE(store.save(a.req).ok());
  fs.fail_nth_write = fs.writes.load() + 3;
  Fixture b = MakeRequest(2, o.chunk_bytes);
  Status s = store.save(b.req);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
  fs.fail_nth_write = 0;
  fs.fail_sync = true;
  s = store.save(b.req);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.to_string();
  EXPECT_NE(s.message().find("sync"), std::string::npos);
  fs.fail_sync = false;
  ExpectRestores(store, 1, a);
}

TEST(Store, ShortWritesAreCompleted) {
  TempDir dir;
  testing::FaultInjectingFileSystem fs;
  fs.max_write_piece = 4096;  // O_DIRECT: pieces stay aligned
  StoreOptions o = SmallOptions(dir / "ckpt");
  o.fs = &fs;
  Store store(o);
  Fixture a = MakeRequest(1, o.chunk_bytes);
  ASSERT_TRUE(store.save(a.req).ok());
  ExpectRestores(store, 1, a);
}

// Power loss after every possible number of operations of a save: whatever was not made durable
// is undone, and restore must find either the previous or the new checkpoint, complete.
TEST(Store, PowerLossAtEveryOperation) {
  int64_t total_ops = 0;
  {
    TempDir dir;
    testing::FaultInjectingFileSystem fs;
    StoreOptions o = SmallOptions(dir / "ckpt");
    o.fs = &fs;
    Store store(o);
    ASSERT_TRUE(store.save(MakeRequest(1, o.chunk_bytes).req).ok());
    int64_t before = fs.ops.load();
    ASSERT_TRUE(store.save(MakeRequest(2, o.chunk_bytes).req).ok());
    total_ops = fs.ops.load() - before;
  }
  ASSERT_GT(total_ops, 5);
  int saw_old = 0, saw_new = 0;
  for (int64_t n = 0; n <= total_ops; ++n) {
    TempDir dir;
    testing::FaultInjectingFileSystem fs;
    StoreOptions o = SmallOptions(dir / "ckpt");
    o.fs = &fs;
    Fixture a = MakeRequest(1, o.chunk_bytes), b = MakeRequest(2, o.chunk_bytes);
    {
      Store store(o);
      ASSERT_TRUE(store.save(a.req).ok());
      fs.fail_after_ops = fs.ops.load() + n;
      (void)store.save(b.req);
    }
    fs.simulate_power_loss();
    Store after(SmallOptions(dir / "ckpt"));  // the real file system, as after a reboot
    RestoreResult r;
    RestoreOptions ro;
    ro.strict = false;
    Status s = after.restore({}, ro, &r);
    ASSERT_TRUE(s.ok()) << "power loss after op " << n << ": " << s.to_string();
    const Fixture& want = r.step == 2 ? b : a;
    (r.step == 2 ? saw_new : saw_old)++;
    for (size_t i = 0; i < want.data.size(); ++i) {
      const auto& got = r.owned.at(want.req.items[i].name);
      ASSERT_EQ(got.size(), want.data[i].size());
      if (got.size() > 0) {
        ASSERT_EQ(0, std::memcmp(got.data(), want.data[i].data(), got.size())) << "op " << n << " item " << i;
      }
    }
  }
  EXPECT_GT(saw_old, 0);
  EXPECT_GT(saw_new, 0);  // the full save (n = total_ops) survives
}

// EFBIG through a real file-size limit, on the real io_uring path, in a child process.
TEST(Store, FileSizeLimitInChild) {
  TempDir dir;
  StoreOptions o = SmallOptions(dir / "ckpt");
  Fixture a = MakeRequest(1, o.chunk_bytes);
  {
    Store store(o);
    ASSERT_TRUE(store.save(a.req).ok());
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {128 << 10, 128 << 10};
    setrlimit(RLIMIT_FSIZE, &rl);
    Store store(o);
    Fixture b = MakeRequest(2, o.chunk_bytes);
    Status s = store.save(b.req);
    _exit(s.code() == StatusCode::kNoSpace ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child did not see EFBIG as NoSpace";
  Store store(o);
  ExpectRestores(store, 1, a);
  Fixture c = MakeRequest(3, o.chunk_bytes);
  ASSERT_TRUE(store.save(c.req).ok());  // the next save cleans the .tmp left behind
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/step-00000002.tmp"));
}

// io_uring refused by a seccomp filter (as in many containers): kAuto falls back, kUring fails.
TEST(Store, IoUringRefusedBySeccompFallsBack) {
  TempDir dir;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof(filter) / sizeof(filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) _exit(3);
    StoreOptions o = SmallOptions(dir / "ckpt");
    o.io_backend = IoBackend::kUring;
    Fixture a = MakeRequest(1, o.chunk_bytes);
    {
      Store strict(o);
      Status s = strict.save(a.req);
      if (s.ok()) _exit(4);
    }
    o.io_backend = IoBackend::kAuto;
    Store store(o);
    auto h = store.save_async(a.req);
    if (!h->wait().ok()) _exit(5);
    if (h->stats().backend.find("posix") == std::string::npos) _exit(6);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Rank 0 waiting for a rank that never writes its manifest can be cancelled (no 600 s hang).
TEST(Store, CancelWhileWaitingForOtherRanks) {
  TempDir dir;
  StoreOptions o = SmallOptions(dir / "ckpt");
  o.world_size = 2;
  Store store(o);
  Fixture f = MakeRequest(4, o.chunk_bytes);
  auto h = store.save_async(f.req);
  EXPECT_EQ(h->wait(Deadline::InSeconds(0.3)).code(), StatusCode::kDeadlineExceeded);
  h->cancel();
  Status s = h->wait(Deadline::InSeconds(10));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.to_string();
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/step-00000004"));
}

// Two ranks (threads here; processes in the runtime tests) commit one checkpoint together.
TEST(Store, TwoRanksOneCommit) {
  TempDir dir;
  std::vector<Fixture> fx;  // moved in, not copied: items point into each fixture's buffers
  fx.reserve(2);
  fx.push_back(MakeRequest(7, 64 << 10));
  fx.push_back(MakeRequest(8, 64 << 10));
  fx[0].req.step = fx[1].req.step = 7;
  std::vector<Status> st(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      StoreOptions o = SmallOptions(dir / "ckpt");
      o.rank = r;
      o.world_size = 2;
      Store store(o);
      st[r] = store.save(fx[r].req);
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_TRUE(st[0].ok()) << st[0].to_string();
  ASSERT_TRUE(st[1].ok()) << st[1].to_string();
  for (int r = 0; r < 2; ++r) {
    StoreOptions o = SmallOptions(dir / "ckpt");
    o.rank = r;
    o.world_size = 2;
    Store store(o);
    std::vector<std::vector<uint8_t>> got;
    auto targets = TargetsFor(fx[r], &got);
    RestoreResult res;
    ASSERT_TRUE(store.restore(targets, {}, &res).ok());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], fx[r].data[i]);
  }
  VerifyResult v;
  ASSERT_TRUE(Store::Verify(dir / "ckpt/step-00000007", &v).ok());
  EXPECT_TRUE(v.ok);
}

}  // namespace
}  // namespace preempt
