// Unchanged chunks referenced instead of rewritten: what is written, restore and verify through
// references, retention of referenced steps, damaged and hostile references, power loss.
#include <gtest/gtest.h>

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
namespace fsys = std::filesystem;

constexpr size_t kChunk = 64 << 10;

std::vector<uint8_t> Pattern(uint64_t seed, size_t n) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

// A state whose "frozen" entry (8 chunks + a bit) never changes and whose "trained" entry
// changes at every step unless `trained_seed` is fixed.
struct State {
  std::vector<uint8_t> frozen = Pattern(1, 8 * kChunk + 100);
  std::vector<uint8_t> trained;
  SaveRequest request(int64_t step, uint64_t trained_seed) {
    trained = Pattern(trained_seed, 2 * kChunk - 50);
    SaveRequest req;
    req.step = step;
    req.items.push_back({"model:frozen", DType::kUInt8, {static_cast<int64_t>(frozen.size())}, frozen.data(), frozen.size()});
    req.items.push_back({"model:trained", DType::kUInt8, {static_cast<int64_t>(trained.size())}, trained.data(), trained.size()});
    req.metadata["step"] = std::to_string(step);
    return req;
  }
};

StoreOptions Options(const std::string& root) {
  StoreOptions o;
  o.root = root;
  o.chunk_bytes = kChunk;
  o.queue_depth = 4;
  o.keep_last = 2;
  return o;
}

// Restores `step` (or the newest) with owned buffers and checks both entries.
void ExpectRestores(Store& store, std::optional<int64_t> step, const std::vector<uint8_t>& frozen,
                    const std::vector<uint8_t>& trained, int64_t want_step) {
  RestoreOptions ro;
  ro.strict = false;
  ro.step = step;
  RestoreResult r;
  Status s = store.restore({}, ro, &r);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(r.step, want_step);
  const auto& f = r.owned.at("model:frozen");
  const auto& t = r.owned.at("model:trained");
  ASSERT_EQ(f.size(), frozen.size());
  ASSERT_EQ(t.size(), trained.size());
  EXPECT_EQ(0, std::memcmp(f.data(), frozen.data(), f.size()));
  EXPECT_EQ(0, std::memcmp(t.data(), trained.data(), t.size()));
}

std::string StepDir(const std::string& root, int64_t step) { return root + "/" + StepDirName(step); }

TEST(Dedup, UnchangedChunksAreReferencedAtTheirOriginalLocation) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  Store store(Options(root));
  State st;
  for (int64_t step : {1, 2, 3}) {
    auto h = store.save_async(st.request(step, 100 + step));
    ASSERT_TRUE(h->wait().ok()) << h->status().to_string();
    const SaveStats stats = h->stats();
    EXPECT_EQ(h->bytes_written(), h->bytes_total());
    EXPECT_EQ(stats.written_bytes + stats.referenced_bytes, stats.bytes);
    if (step == 1) {
      EXPECT_EQ(stats.referenced_bytes, 0u);
    } else {
      // The 8 whole chunks of the frozen entry; the chunk it shares with the trained one changes.
      EXPECT_EQ(stats.referenced_bytes, 8 * kChunk) << "step " << step;
    }
  }
  for (int64_t step : {2, 3}) {
    CheckpointManifest m;
    ASSERT_TRUE(Store::ReadManifest(StepDir(root, step), 0, &m).ok());
    EXPECT_EQ(m.format_version, format::kFormatVersion);
    EXPECT_EQ(m.referenced_chunks, 8u);
    EXPECT_EQ(m.referenced_bytes, 8 * kChunk);
    // Step 3 references step 1, where the bytes are, not step 2's reference.
    EXPECT_EQ(m.referenced_steps, std::vector<int64_t>{1}) << "step " << step;
    // The chunks holding trained bytes: two whole ones and a 14-byte tail padded to 4 KiB.
    EXPECT_EQ(m.file_bytes, 2 * kChunk + 4096);
    EXPECT_EQ(fsys::file_size(StepDir(root, step) + "/rank-00000.bin"), 2 * kChunk + 4096);
  }
  ExpectRestores(store, std::nullopt, st.frozen, Pattern(103, 2 * kChunk - 50), 3);
  ExpectRestores(store, 2, st.frozen, Pattern(102, 2 * kChunk - 50), 2);
  for (int64_t step : {2, 3}) {
    VerifyResult v;
    ASSERT_TRUE(Store::Verify(StepDir(root, step), &v).ok());
    EXPECT_TRUE(v.ok) << (v.problems.empty() ? "" : v.problems[0]);
    // Logical bytes, the alignment gap included ("trained" is >= 64 KiB: it starts on 4 KiB).
    EXPECT_EQ(v.bytes_checked, AlignUp(st.frozen.size(), 4096) + st.trained.size());
  }
  // A state where nothing changed writes no data at all.
  auto h = store.save_async(st.request(4, 103));
  ASSERT_TRUE(h->wait().ok());
  EXPECT_EQ(h->stats().written_bytes, 0u);
  EXPECT_EQ(fsys::file_size(StepDir(root, 4) + "/rank-00000.bin"), 0u);
  ExpectRestores(store, std::nullopt, st.frozen, Pattern(103, 2 * kChunk - 50), 4);
}

TEST(Dedup, OffWritesEveryChunk) {
  TempDir dir;
  StoreOptions o = Options(dir / "ckpt");
  o.dedup = false;
  Store store(o);
  State st;
  for (int64_t step : {1, 2}) {
    auto h = store.save_async(st.request(step, 7));
    ASSERT_TRUE(h->wait().ok());
    EXPECT_EQ(h->stats().referenced_bytes, 0u);
    EXPECT_EQ(h->stats().written_bytes, h->stats().bytes);
  }
  CheckpointManifest m;
  ASSERT_TRUE(Store::ReadManifest(dir / "ckpt/step-00000002", 0, &m).ok());
  EXPECT_EQ(m.referenced_chunks, 0u);
}

TEST(Dedup, RetentionKeepsAStepWhileAKeptCheckpointReferencesIt) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  Store store(Options(root));  // keep_last = 2
  State st;
  for (int64_t step = 1; step <= 5; ++step) ASSERT_TRUE(store.save(st.request(step, 100 + step)).ok());
  // 4 and 5 are the last two; both reference step 1, which stays whole (2 and 3 are retired).
  EXPECT_TRUE(fsys::exists(StepDir(root, 1)));
  EXPECT_FALSE(fsys::exists(StepDir(root, 2)));
  EXPECT_FALSE(fsys::exists(StepDir(root, 3)));
  std::vector<CheckpointInfo> list;
  ASSERT_TRUE(store.list(&list).ok());
  ASSERT_EQ(list.size(), 3u);
  for (const auto& c : list) EXPECT_TRUE(c.valid) << c.path << ": " << c.problem;
  ExpectRestores(store, 1, st.frozen, Pattern(101, 2 * kChunk - 50), 1);
  ExpectRestores(store, std::nullopt, st.frozen, Pattern(105, 2 * kChunk - 50), 5);

  // Once the frozen part changes, the new checkpoints reference nothing older: when the last
  // checkpoint referencing step 1 leaves the kept window, step 1 goes too.
  st.frozen = Pattern(2, st.frozen.size());
  ASSERT_TRUE(store.save(st.request(6, 106)).ok());
  EXPECT_TRUE(fsys::exists(StepDir(root, 1))) << "step 5, kept, still references it";
  ASSERT_TRUE(store.save(st.request(7, 107)).ok());
  EXPECT_FALSE(fsys::exists(StepDir(root, 1)));
  EXPECT_FALSE(fsys::exists(StepDir(root, 5)));
  ExpectRestores(store, std::nullopt, st.frozen, Pattern(107, 2 * kChunk - 50), 7);
}

// Damage to the step holding shared chunks is found when the newer checkpoint is read, naming
// the file that holds the bytes; restore falls back to an independent older checkpoint.
class SharedChunkDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o = Options(root_);
    o.keep_last = 5;
    store_ = std::make_unique<Store>(o);
    State other;
    other.frozen = Pattern(9, other.frozen.size());
    ASSERT_TRUE(store_->save(other.request(1, 201)).ok());  // shares nothing with what follows
    old_frozen_ = other.frozen;
    ASSERT_TRUE(store_->save(st_.request(2, 202)).ok());
    ASSERT_TRUE(store_->save(st_.request(3, 203)).ok());  // references step 2's frozen chunks
  }
  // Restore skips `rejected` checkpoints, the newest for `must_mention`, and reads `want_step`.
  void expect_fallback(const std::string& must_mention, int64_t want_step, size_t rejected) {
    RestoreOptions ro;
    ro.strict = false;
    RestoreResult r;
    Status s = store_->restore({}, ro, &r);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(r.step, want_step);
    ASSERT_EQ(r.rejected.size(), rejected);
    EXPECT_NE(r.rejected[0].find(must_mention), std::string::npos) << r.rejected[0];
    const auto& frozen = want_step == 1 ? old_frozen_ : st_.frozen;
    EXPECT_EQ(0, std::memcmp(r.owned.at("model:frozen").data(), frozen.data(), frozen.size()));
  }
  TempDir dir_;
  const std::string root_ = dir_ / "ckpt";
  std::unique_ptr<Store> store_;
  State st_;
  std::vector<uint8_t> old_frozen_;
};

TEST_F(SharedChunkDamage, FlippedByteIsDetectedNamingTheFileHoldingIt) {
  const std::string shared = StepDir(root_, 2) + "/rank-00000.bin";
  preempt::testing::FlipByte(shared, 3 * kChunk + 5);  // chunk 3: frozen, referenced by step 3
  // Steps 3 and 2 both hold the damaged chunk.
  expect_fallback(shared + ": chunk 3 of step 3 (at offset " + std::to_string(3 * kChunk) + ")", 1, 2);
  VerifyResult v;
  ASSERT_TRUE(Store::Verify(StepDir(root_, 3), &v).ok());
  ASSERT_FALSE(v.ok);
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].find(shared), std::string::npos) << v.problems[0];
  EXPECT_NE(v.problems[0].find("model:frozen"), std::string::npos) << v.problems[0];
}

TEST_F(SharedChunkDamage, TruncatedReferencedFileMakesTheNewerCheckpointInvalid) {
  const std::string shared = StepDir(root_, 2) + "/rank-00000.bin";
  fsys::resize_file(shared, 4 * kChunk);
  std::vector<CheckpointInfo> list;
  ASSERT_TRUE(store_->list(&list).ok());
  ASSERT_EQ(list.size(), 3u);
  EXPECT_FALSE(list[0].valid);
  EXPECT_NE(list[0].problem.find("step-00000003/rank-00000.manifest: field chunk_offset["), std::string::npos) << list[0].problem;
  EXPECT_NE(list[0].problem.find(shared), std::string::npos) << list[0].problem;
  expect_fallback("truncated", 1, 2);
}

TEST_F(SharedChunkDamage, DeletedReferencedStepMakesTheNewerCheckpointInvalid) {
  fsys::remove_all(StepDir(root_, 2));
  expect_fallback("step-00000003/rank-00000.manifest: field chunk_step[0] references step 2, which is not a committed checkpoint", 1, 1);
}

// Manifests rewritten by a hostile writer (checksums and COMMIT made consistent again): every
// reference is checked against the root before any byte is read.
class HostileReference : public SharedChunkDamage {
 protected:
  // Rewrites step 3's manifest with `edit` applied, and its COMMIT to match (optionally edited).
  void Rewrite(const std::function<void(format::Manifest*)>& edit,
               const std::function<void(format::CommitRecord*)>& edit_commit = nullptr) {
    const std::string dir = StepDir(root_, 3);
    format::Manifest m;
    ASSERT_TRUE(format::DecodeManifest(testing::ReadFileOrDie(dir + "/rank-00000.manifest"), "m", UINT64_MAX, &m).ok());
    edit(&m);
    const std::string text = format::EncodeManifest(m);
    testing::WriteFileOrDie(dir + "/rank-00000.manifest", text);
    format::CommitRecord c;
    ASSERT_TRUE(format::DecodeCommit(testing::ReadFileOrDie(dir + "/COMMIT"), "COMMIT", &c).ok());
    c.manifest_xxh3[0] = format::Hash64(text.data(), text.size());
    if (edit_commit) edit_commit(&c);
    testing::WriteFileOrDie(dir + "/COMMIT", format::EncodeCommit(c));
  }
  void expect_invalid(const std::string& field) {
    std::vector<CheckpointInfo> list;
    ASSERT_TRUE(store_->list(&list).ok());
    ASSERT_FALSE(list[0].valid);
    EXPECT_NE(list[0].problem.find("step-00000003/rank-00000.manifest: field " + field), std::string::npos) << list[0].problem;
    VerifyResult v;
    ASSERT_TRUE(Store::Verify(StepDir(root_, 3), &v).ok());
    EXPECT_FALSE(v.ok);
    expect_fallback("field " + field, 2, 1);
  }
};

TEST_F(HostileReference, StepNotOlder) {
  Rewrite([](format::Manifest* m) { m->chunk_step[0] = 4; });
  expect_invalid("chunk_step[0]");
}

TEST_F(HostileReference, NegativeStep) {
  Rewrite([](format::Manifest* m) { m->chunk_step[0] = -1; });
  expect_invalid("chunk_step[0]");
}

TEST_F(HostileReference, StepNotInCommit) {
  Rewrite([](format::Manifest* m) {}, [](format::CommitRecord* c) { c->referenced_steps.clear(); });
  expect_invalid("chunk_step[0] references step 2, which COMMIT's referenced_steps does not list");
}

TEST_F(HostileReference, StepThatDoesNotExist) {
  Rewrite([](format::Manifest* m) { m->chunk_step[0] = 0; }, [](format::CommitRecord* c) { c->referenced_steps = {0, 2}; });
  expect_invalid("chunk_step[0] references step 0, which is not a committed checkpoint");
}

TEST_F(HostileReference, OffsetBeyondTheFile) {
  Rewrite([](format::Manifest* m) { m->chunk_offset[7] = 1ull << 40; });
  expect_invalid("chunk_offset[7] needs");
}

TEST_F(HostileReference, OffsetThatOverflows) {
  Rewrite([](format::Manifest* m) { m->chunk_offset[7] = UINT64_MAX - 4095; });
  expect_invalid("chunk_offset[7]");
}

TEST_F(HostileReference, UnalignedOffset) {
  Rewrite([](format::Manifest* m) { m->chunk_offset[2] = 100; });
  expect_invalid("chunk_offset[2]");
}

TEST_F(HostileReference, OwnChunkOutOfPlace) {
  Rewrite([](format::Manifest* m) { m->chunk_offset[8] = kChunk; });
  expect_invalid("chunk_offset[8]");
}

TEST_F(HostileReference, ReferenceToTheWrongChunkFailsItsChecksum) {
  // A well-formed reference to other bytes of the referenced file: found by the checksum.
  Rewrite([](format::Manifest* m) { m->chunk_offset[2] = 4 * kChunk; });
  VerifyResult v;
  ASSERT_TRUE(Store::Verify(StepDir(root_, 3), &v).ok());
  EXPECT_FALSE(v.ok);
  expect_fallback("chunk 2 of step 3", 2, 1);
}

TEST(Dedup, RewindAndResaveNeverReferenceWhatTheyReplace) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  StoreOptions o = Options(root);
  o.keep_last = 5;
  Store store(o);
  State st;
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(store.save(st.request(step, 300 + step)).ok());
  SaveRequest rewind = st.request(2, 999);
  rewind.rewind = true;  // retires 3, replaces 2: references only step 1
  ASSERT_TRUE(store.save(rewind).ok());
  EXPECT_FALSE(fsys::exists(StepDir(root, 3)));
  CheckpointManifest m;
  ASSERT_TRUE(Store::ReadManifest(StepDir(root, 2), 0, &m).ok());
  EXPECT_EQ(m.referenced_steps, std::vector<int64_t>{1});
  ExpectRestores(store, std::nullopt, st.frozen, Pattern(999, 2 * kChunk - 50), 2);
  ASSERT_TRUE(store.save(st.request(2, 998)).ok());  // the same step again
  ExpectRestores(store, std::nullopt, st.frozen, Pattern(998, 2 * kChunk - 50), 2);
}

TEST(Dedup, VersionOneCheckpointsStillRestoreAndServeAsBase) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  State st;
  {
    StoreOptions o = Options(root);
    o.dedup = false;
    Store store(o);
    ASSERT_TRUE(store.save(st.request(1, 401)).ok());
  }
  // Rewrite step 1 as the previous format wrote it: version 1, no chunk locations.
  const std::string dir1 = StepDir(root, 1);
  format::Manifest m;
  ASSERT_TRUE(format::DecodeManifest(testing::ReadFileOrDie(dir1 + "/rank-00000.manifest"), "m", UINT64_MAX, &m).ok());
  std::string text = format::EncodeManifest(m);
  std::string payload = text.substr(text.find('\n') + 1);
  payload = payload.substr(0, payload.find("\"chunk_step\"")) + payload.substr(payload.find("\"metadata\""));
  payload.replace(payload.find("\"format_version\": 2"), 19, "\"format_version\": 1");
  text = "preempt-manifest 1 " + std::to_string(payload.size()) + " " + format::Hex64(format::Hash64(payload.data(), payload.size())) + "\n" + payload;
  testing::WriteFileOrDie(dir1 + "/rank-00000.manifest", text);
  format::CommitRecord c;
  ASSERT_TRUE(format::DecodeCommit(testing::ReadFileOrDie(dir1 + "/COMMIT"), "COMMIT", &c).ok());
  std::string cp = "{\"schema\":\"preempt.commit/1\",\"format_version\":1,\"step\":1,\"world_size\":1,\"created_unix_ms\":0,"
                   "\"manifest_xxh3\":[" + std::to_string(format::Hash64(text.data(), text.size())) + "]}";
  testing::WriteFileOrDie(dir1 + "/COMMIT", "preempt-commit 1 " + std::to_string(cp.size()) + " " + format::Hex64(format::Hash64(cp.data(), cp.size())) + "\n" + cp);

  Store store(Options(root));
  CheckpointManifest read;
  ASSERT_TRUE(Store::ReadManifest(dir1, 0, &read).ok());
  EXPECT_EQ(read.format_version, 1u);
  ExpectRestores(store, std::nullopt, st.frozen, Pattern(401, 2 * kChunk - 50), 1);
  auto h = store.save_async(st.request(2, 402));
  ASSERT_TRUE(h->wait().ok()) << h->status().to_string();
  EXPECT_EQ(h->stats().referenced_bytes, 8 * kChunk);
  ExpectRestores(store, std::nullopt, st.frozen, Pattern(402, 2 * kChunk - 50), 2);
}

// Power loss after every operation of a deduplicated save whose retention retires steps: the
// restore finds a complete checkpoint, and no committed checkpoint references missing data.
TEST(Dedup, PowerLossAtEveryOperationOfADeduplicatedSave) {
  auto run = [](int64_t fail_after, int64_t* ops_used) {
    TempDir dir;
    testing::FaultInjectingFileSystem fs;
    StoreOptions o = Options(dir / "ckpt");
    o.fs = &fs;
    o.keep_last = 1;
    State st;
    {
      Store store(o);
      for (int64_t step : {1, 2}) EXPECT_TRUE(store.save(st.request(step, 500 + step)).ok());
      st.frozen[5] ^= 1;  // step 3 writes chunk 0 again; step 2 leaves the window; 1 is still referenced
      const int64_t before = fs.ops.load();
      if (fail_after >= 0) fs.fail_after_ops = before + fail_after;
      (void)store.save(st.request(3, 503));
      if (ops_used) *ops_used = fs.ops.load() - before;
    }
    fs.simulate_power_loss();
    Store after(Options(dir / "ckpt"));
    std::vector<CheckpointInfo> list;
    ASSERT_TRUE(after.list(&list).ok());
    for (const auto& c : list) ASSERT_TRUE(c.valid) << "power loss after op " << fail_after << ": " << c.path << ": " << c.problem;
    RestoreOptions ro;
    ro.strict = false;
    RestoreResult r;
    Status s = after.restore({}, ro, &r);
    ASSERT_TRUE(s.ok()) << "power loss after op " << fail_after << ": " << s.to_string();
    ASSERT_TRUE(r.step == 2 || r.step == 3) << r.step;
    EXPECT_TRUE(r.rejected.empty());
    const auto trained = Pattern(500 + r.step, 2 * kChunk - 50);
    ASSERT_EQ(0, std::memcmp(r.owned.at("model:trained").data(), trained.data(), trained.size())) << fail_after;
    ASSERT_EQ(r.owned.at("model:frozen").data()[5], st.frozen[5] ^ (r.step == 3 ? 0 : 1)) << fail_after;
  };
  int64_t total = 0;
  run(-1, &total);
  ASSERT_GT(total, 5);
  for (int64_t n = 0; n <= total; ++n) run(n, nullptr);
}

// Two ranks reference their own older data; COMMIT lists the union of referenced steps.
TEST(Dedup, EveryRankReferencesItsOwnData) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  std::vector<State> states(2);
  states[1].frozen = Pattern(77, states[1].frozen.size());
  for (int64_t step : {1, 2}) {
    std::vector<Status> st(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        StoreOptions o = Options(root);
        o.rank = r;
        o.world_size = 2;
        Store store(o);
        st[r] = store.save(states[r].request(step, 600 + 10 * r + step));
      });
    }
    for (auto& t : ranks) t.join();
    ASSERT_TRUE(st[0].ok()) << st[0].to_string();
    ASSERT_TRUE(st[1].ok()) << st[1].to_string();
  }
  format::CommitRecord c;
  ASSERT_TRUE(format::DecodeCommit(testing::ReadFileOrDie(StepDir(root, 2) + "/COMMIT"), "COMMIT", &c).ok());
  EXPECT_EQ(c.referenced_steps, std::vector<int64_t>{1});
  for (int r = 0; r < 2; ++r) {
    StoreOptions o = Options(root);
    o.rank = r;
    o.world_size = 2;
    Store store(o);
    ExpectRestores(store, std::nullopt, states[r].frozen, Pattern(600 + 10 * r + 2, 2 * kChunk - 50), 2);
    CheckpointManifest m;
    ASSERT_TRUE(Store::ReadManifest(StepDir(root, 2), r, &m).ok());
    EXPECT_EQ(m.referenced_chunks, 8u) << "rank " << r;
  }
  VerifyResult v;
  ASSERT_TRUE(Store::Verify(StepDir(root, 2), &v).ok());
  EXPECT_TRUE(v.ok) << (v.problems.empty() ? "" : v.problems[0]);
}

}  // namespace
}  // namespace preempt
