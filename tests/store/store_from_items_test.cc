// Chunks written straight from the items' memory (StoreOptions::write_from_items) and read
// straight into the targets' memory (read_into_targets): which chunks qualify, that the files and
// the restored bytes are the same as with a copy, and that deduplication, checksums, both I/O
// backends and a full disk behave as for copied chunks.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "format/format.h"
#include "preempt/buffer.h"
#include "preempt/store.h"
#include "support/fault_fs.h"
#include "support/test_util.h"

namespace preempt {
namespace {

using testing::TempDir;

constexpr size_t kChunk = 64 << 10;

void Fill(AlignedBuffer& b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= b.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(b.data() + i, &r, 8);
  }
}

// "big": 5 whole chunks (written from memory); "small": 100 bytes; "odd": 3 chunks + 1000 bytes,
// starting at the 4 KiB offset after "small" (a tensor of >= 64 KiB), so chunk 5 holds the end of
// "small", a gap and the start of "odd" (copied), chunks 6 and 7 lie inside "odd" (written from
// memory) and chunk 8 is its short tail (copied). All buffers are page-aligned.
struct State {
  AlignedBuffer big{5 * kChunk, true};
  AlignedBuffer small{100, true};
  AlignedBuffer odd{3 * kChunk + 1000, true};
  explicit State(uint64_t seed) { Reseed(seed); }
  void Reseed(uint64_t seed) {
    Fill(big, seed);
    Fill(small, seed + 1);
    Fill(odd, seed + 2);
  }
  SaveRequest Request(int64_t step) const {
    SaveRequest r;
    r.step = step;
    r.items.push_back({"big", DType::kUInt8, {static_cast<int64_t>(big.size())}, big.data(), big.size()});
    r.items.push_back({"small", DType::kUInt8, {static_cast<int64_t>(small.size())}, small.data(), small.size()});
    r.items.push_back({"odd", DType::kUInt8, {static_cast<int64_t>(odd.size())}, odd.data(), odd.size()});
    return r;
  }
};

StoreOptions Options(const std::string& root, bool from_items, IoBackend backend = IoBackend::kAuto) {
  StoreOptions o;
  o.root = root;
  o.chunk_bytes = kChunk;
  o.queue_depth = 4;
  o.keep_last = 3;
  o.write_from_items = from_items;
  o.io_backend = backend;
  return o;
}

SaveStats SaveOrDie(Store& store, const State& st, int64_t step) {
  auto h = store.save_async(st.Request(step));
  const Status s = h->wait();
  EXPECT_TRUE(s.ok()) << s.to_string();
  return h->stats();
}

void ExpectRestores(Store& store, const State& st, int64_t step) {
  RestoreOptions ro;
  ro.strict = false;
  ro.step = step;
  RestoreResult r;
  const Status s = store.restore({}, ro, &r);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (const auto* item : {&st.big, &st.small, &st.odd}) {
    const std::string name = item == &st.big ? "big" : item == &st.small ? "small" : "odd";
    const auto& got = r.owned.at(name);
    ASSERT_EQ(got.size(), item->size()) << name;
    EXPECT_EQ(0, std::memcmp(got.data(), item->data(), got.size())) << name;
  }
}

std::string DataFile(const std::string& root, int64_t step) {
  return root + "/" + StepDirName(step) + "/" + format::RankDataName(0);
}

TEST(WriteFromItems, WholePagesOfOneItemAreWrittenWithoutACopyAndTheFileIsTheSame) {
  TempDir dir;
  const State st(7);
  Store direct(Options(dir.path() + "/direct", true));
  Store copied(Options(dir.path() + "/copied", false));
  const SaveStats d = SaveOrDie(direct, st, 1);
  const SaveStats c = SaveOrDie(copied, st, 1);
  EXPECT_EQ(d.from_items_bytes, st.big.size() + 2 * kChunk);  // chunks 0-4 and 6-7
  EXPECT_EQ(c.from_items_bytes, 0u);
  EXPECT_EQ(d.written_bytes, c.written_bytes);
  EXPECT_EQ(testing::ReadFileOrDie(DataFile(dir.path() + "/direct", 1)),
            testing::ReadFileOrDie(DataFile(dir.path() + "/copied", 1)));
  ExpectRestores(direct, st, 1);
  VerifyResult v;
  const Status vs = Store::Verify(dir.path() + "/direct/" + StepDirName(1), &v);
  EXPECT_TRUE(vs.ok()) << vs.to_string();
  EXPECT_TRUE(v.ok) << (v.problems.empty() ? "" : v.problems[0]);
}

TEST(WriteFromItems, ThePosixBackendWritesFromTheItemsToo) {
  TempDir dir;
  const State st(8);
  Store store(Options(dir.path(), true, IoBackend::kPosix));
  const SaveStats s = SaveOrDie(store, st, 1);
  EXPECT_EQ(s.backend.rfind("posix", 0), 0u) << s.backend;
  EXPECT_EQ(s.from_items_bytes, st.big.size() + 2 * kChunk);
  ExpectRestores(store, st, 1);
}

TEST(WriteFromItems, UnchangedChunksAreStillReferenced) {
  TempDir dir;
  State st(9);
  Store store(Options(dir.path(), true));
  SaveOrDie(store, st, 1);
  Fill(st.odd, 99);  // "big" unchanged, "odd" changed
  const SaveStats s = SaveOrDie(store, st, 2);
  EXPECT_EQ(s.referenced_bytes, st.big.size());
  EXPECT_EQ(s.from_items_bytes, 2 * kChunk);
  ExpectRestores(store, st, 2);
  st.Reseed(10);  // everything changed: "big" is written from memory again
  const SaveStats s3 = SaveOrDie(store, st, 3);
  EXPECT_EQ(s3.from_items_bytes, st.big.size() + 2 * kChunk);
  EXPECT_EQ(s3.referenced_bytes, 0u);
  ExpectRestores(store, st, 3);
}

// The newest checkpoint, alone (no fallback), fails as corrupt, naming its data file.
void ExpectCorruptionNamingTheDataFile(Store& store) {
  RestoreOptions ro;
  ro.strict = false;
  ro.fallback = false;
  RestoreResult r;
  const Status s = store.restore({}, ro, &r);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.to_string();
  EXPECT_NE(s.message().find(format::RankDataName(0)), std::string::npos) << s.message();
}

TEST(WriteFromItems, AFlippedByteInAChunkWrittenFromMemoryIsDetected) {
  TempDir dir;
  const State st(11);
  Store store(Options(dir.path(), true));
  SaveOrDie(store, st, 1);
  testing::FlipByte(DataFile(dir.path(), 1), 2 * kChunk + 17);  // inside "big"
  ExpectCorruptionNamingTheDataFile(store);
}

TEST(WriteFromItems, AFullDiskFailsTheSaveAndThePreviousCheckpointRestores) {
  TempDir dir;
  testing::FaultInjectingFileSystem fs;
  StoreOptions o = Options(dir.path(), true);
  o.fs = &fs;
  State st(12);
  Store store(o);
  SaveOrDie(store, st, 1);
  const State first(12);
  st.Reseed(13);
  fs.space_left = static_cast<int64_t>(2 * kChunk);  // runs out inside "big", the first item
  const Status s = store.save_async(st.Request(2))->wait();
  EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.to_string();
  fs.space_left = -1;
  ExpectRestores(store, first, 1);
}

std::vector<RestoreTarget> TargetsOf(State& got) {
  std::vector<RestoreTarget> targets;
  for (auto [name, buf] : {std::pair<const char*, AlignedBuffer*>{"big", &got.big}, {"small", &got.small}, {"odd", &got.odd}}) {
    RestoreTarget t;
    t.name = name;
    t.dtype = DType::kUInt8;
    t.shape = {static_cast<int64_t>(buf->size())};
    t.data = buf->data();
    t.nbytes = buf->size();
    targets.push_back(t);
  }
  return targets;
}

TEST(ReadIntoTargets, WholePagesOfOneTargetAreReadInPlaceAndVerifiedThere) {
  TempDir dir;
  const State st(14);
  {
    Store writer(Options(dir.path(), true));
    SaveOrDie(writer, st, 1);
  }
  for (bool in_place : {true, false}) {
    for (IoBackend backend : {IoBackend::kAuto, IoBackend::kPosix}) {
      StoreOptions o = Options(dir.path(), true, backend);
      o.read_into_targets = in_place;
      Store store(o);
      State got(99);  // page-aligned targets of the same sizes, other bytes
      RestoreResult r;
      const Status s = store.restore(TargetsOf(got), RestoreOptions(), &r);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(r.in_place_bytes, in_place ? st.big.size() + 2 * kChunk : 0u);
      EXPECT_EQ(0, std::memcmp(got.big.data(), st.big.data(), st.big.size()));
      EXPECT_EQ(0, std::memcmp(got.small.data(), st.small.data(), st.small.size()));
      EXPECT_EQ(0, std::memcmp(got.odd.data(), st.odd.data(), st.odd.size()));
    }
  }
}

// A chunk read in place that fails its checksum has already overwritten the target: the restore
// must fail naming the file, and the fallback must overwrite every target with the older step.
TEST(ReadIntoTargets, AFlippedByteReadInPlaceFailsAndTheFallbackRestoresTheOlderStep) {
  TempDir dir;
  State st(16);
  StoreOptions o = Options(dir.path(), true);
  o.dedup = false;  // step 2's chunks are its own
  Store store(o);
  SaveOrDie(store, st, 1);
  const State first(16);
  st.Reseed(17);
  SaveOrDie(store, st, 2);
  testing::FlipByte(DataFile(dir.path(), 2), 3 * kChunk + 5);  // inside "big", read in place
  for (bool fallback : {false, true}) {
    State got(99);
    RestoreOptions ro;
    ro.fallback = fallback;
    RestoreResult r;
    const Status s = store.restore(TargetsOf(got), ro, &r);
    if (!fallback) {
      EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.to_string();
      EXPECT_NE(s.message().find("step-00000002/" + format::RankDataName(0)), std::string::npos) << s.message();
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(r.step, 1);
    EXPECT_GT(r.in_place_bytes, 0u);
    EXPECT_EQ(0, std::memcmp(got.big.data(), first.big.data(), first.big.size()));
    EXPECT_EQ(0, std::memcmp(got.small.data(), first.small.data(), first.small.size()));
    EXPECT_EQ(0, std::memcmp(got.odd.data(), first.odd.data(), first.odd.size()));
  }
}

TEST(ReadIntoTargets, ATruncatedFileIsReportedNotReadPastItsEnd) {
  TempDir dir;
  const State st(15);
  Store store(Options(dir.path(), true));
  SaveOrDie(store, st, 1);
  std::filesystem::resize_file(DataFile(dir.path(), 1), 3 * kChunk + 100);  // inside "big"
  ExpectCorruptionNamingTheDataFile(store);
}

}  // namespace
}  // namespace preempt
