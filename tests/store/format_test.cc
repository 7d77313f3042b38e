// Hostile and malformed manifests/commits are rejected with the file and field named.
#include <gtest/gtest.h>

#include "format/format.h"

namespace preempt::format {
namespace {

std::string Wrap(const std::string& kind, const std::string& payload, int version = kFormatVersion) {
  return "preempt-" + kind + " " + std::to_string(version) + " " + std::to_string(payload.size()) + " " +
         Hex64(Hash64(payload.data(), payload.size())) + "\n" + payload;
}

Manifest Good() {
  Manifest m;
  m.step = 5;
  m.data_file = RankDataName(0);
  m.chunk_bytes = 4096;
  m.data_bytes = 100;
  m.file_bytes = 4096;
  m.chunk_xxh3 = {1};
  m.chunk_step = {5};
  m.chunk_offset = {0};
  TensorInfo t;
  t.name = "w";
  t.dtype = DType::kFloat32;
  t.shape = {5, 5};
  t.offset = 0;
  t.nbytes = 100;
  m.tensors = {t};
  return m;
}

// Re-encodes a manifest after replacing `from` with `to` in its JSON (hash stays valid: hostile writer).
std::string Tamper(const Manifest& m, std::string from, std::string to) {
  // Patterns are written compactly; cereal puts a space after each colon.
  auto spaced = [](std::string s) {
    for (size_t p = s.find("\":"); p != std::string::npos; p = s.find("\":", p + 3)) s.insert(p + 2, " ");
    return s;
  };
  from = spaced(from);
  to = spaced(to);
  std::string text = EncodeManifest(m);
  std::string payload = text.substr(text.find('\n') + 1);
  auto pos = payload.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) payload.replace(pos, from.size(), to);
  return Wrap("manifest", payload);
}

TEST(Format, RoundTrip) {
  Manifest m = Good();
  m.metadata["k"] = "v";
  Manifest out;
  ASSERT_TRUE(DecodeManifest(EncodeManifest(m), "f", 4096, &out).ok());
  EXPECT_EQ(out.tensors[0].name, "w");
  EXPECT_EQ(out.metadata.at("k"), "v");
  CommitRecord c;
  c.step = 5;
  c.manifest_xxh3 = {7};
  CommitRecord c2;
  ASSERT_TRUE(DecodeCommit(EncodeCommit(c), "COMMIT", &c2).ok());
  EXPECT_EQ(c2.manifest_xxh3[0], 7u);
}

struct Hostile {
  const char* what;
  const char* from;
  const char* to;
  const char* field;  // must appear in the error
};

TEST(Format, HostileManifestsAreRejected) {
  const Hostile cases[] = {
      {"slash in name", "\"name\":\"w\"", "\"name\":\"a/b\"", "tensors[].name"},
      {"dotdot in name", "\"name\":\"w\"", "\"name\":\"..\"", "tensors[].name"},
      {"offset beyond data", "\"offset\":0", "\"offset\":18446744073709551600", "offset"},
      {"nbytes beyond data", "\"nbytes\":100", "\"nbytes\":1000000000000", "tensors[w].shape"},
      {"huge shape", "\"shape\":[\n5,\n5\n]", "\"shape\":[4611686018427387904,4]", "tensors[w].shape"},
      {"negative dim", "\"shape\":[\n5,\n5\n]", "\"shape\":[-5,-5]", "tensors[w].shape"},
      {"absurd chunk count", "\"data_bytes\":100", "\"data_bytes\":1152921504606846976", "chunk_xxh3"},
      {"absurd data size", "\"data_bytes\":100", "\"data_bytes\":18446744073709551000", "data_bytes"},
      {"absurd chunk size", "\"chunk_bytes\":4096", "\"chunk_bytes\":0", "chunk_bytes"},
      {"rank out of range", "\"rank\":0", "\"rank\":7", "rank"},
      {"world size absurd", "\"world_size\":1", "\"world_size\":2000000000", "world_size"},
      {"unknown dtype", "\"dtype\":\"float32\"", "\"dtype\":\"float99\"", "dtype"},
      {"missing field", "\"step\":5,\n", "", "step"},
      {"wrong type", "\"step\":5", "\"step\":\"five\"", "manifest"},
      {"number with an exponent", "\"step\":5", "\"step\":0e56", "exponent"},
      {"data file name", "\"data_file\":\"rank-00000.bin\"", "\"data_file\":\"../../x\"", "data_file"},
  };
  for (const auto& c : cases) {
    Manifest out;
    Status s = DecodeManifest(Tamper(Good(), c.from, c.to), "dir/rank-00000.manifest", 4096, &out);
    EXPECT_FALSE(s.ok()) << c.what;
    EXPECT_NE(s.message().find("dir/rank-00000.manifest"), std::string::npos) << c.what << ": " << s.message();
    EXPECT_NE(s.message().find(c.field), std::string::npos) << c.what << ": " << s.message();
  }
}

TEST(Format, OverlappingTensorsRejected) {
  Manifest m = Good();
  m.data_bytes = 200;
  m.tensors.push_back(m.tensors[0]);
  m.tensors[1].name = "v";
  m.tensors[1].offset = 50;
  Manifest out;
  Status s = DecodeManifest(EncodeManifest(m), "f", 4096, &out);
  EXPECT_NE(s.message().find("overlaps"), std::string::npos) << s.message();
}

TEST(Format, EnvelopeProblems) {
  Manifest out;
  std::string good = EncodeManifest(Good());
  EXPECT_EQ(DecodeManifest("", "f", UINT64_MAX, &out).code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeManifest("garbage\n{}", "f", UINT64_MAX, &out).code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeManifest(good.substr(0, good.size() - 1), "f", UINT64_MAX, &out).code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeManifest(good + "x", "f", UINT64_MAX, &out).code(), StatusCode::kCorruption);
  std::string v9 = good;
  v9.replace(v9.find(" 2 "), 3, " 9 ");
  EXPECT_EQ(DecodeManifest(v9, "f", UINT64_MAX, &out).code(), StatusCode::kVersionMismatch);
  // Data file size disagrees with the manifest (truncation).
  Status s = DecodeManifest(good, "f", 0, &out);
  EXPECT_NE(s.message().find("truncated"), std::string::npos);
  // Deep nesting is refused before the recursive parser sees it.
  std::string deep(100000, '[');
  s = DecodeManifest(Wrap("manifest", deep), "f", UINT64_MAX, &out);
  EXPECT_NE(s.message().find("nested"), std::string::npos) << s.message();
}

TEST(Format, StepDirNames) {
  int64_t step;
  StepDirKind kind;
  EXPECT_TRUE(ParseStepDirName("step-00000012", &step, &kind));
  EXPECT_EQ(step, 12);
  EXPECT_EQ(kind, StepDirKind::kCommitted);
  EXPECT_TRUE(ParseStepDirName("step-00000012.tmp", &step, &kind));
  EXPECT_EQ(kind, StepDirKind::kPartial);
  EXPECT_TRUE(ParseStepDirName("step-00000012.replaced.tmp", &step, &kind));
  EXPECT_EQ(kind, StepDirKind::kReplaced);
  EXPECT_TRUE(ParseStepDirName("step-00000012.retired.tmp", &step, &kind));
  EXPECT_EQ(kind, StepDirKind::kRetired);
  EXPECT_FALSE(ParseStepDirName("step-12", &step, &kind));
  EXPECT_FALSE(ParseStepDirName("step--0000005", &step, &kind));
  EXPECT_FALSE(ParseStepDirName("step-00000012.old", &step, &kind));
  EXPECT_FALSE(ParseStepDirName("step-99999999999999999999999", &step, &kind));
  EXPECT_EQ(StepDirName(12), "step-00000012");
  for (StepDirKind k : {StepDirKind::kCommitted, StepDirKind::kPartial, StepDirKind::kReplaced, StepDirKind::kRetired}) {
    EXPECT_TRUE(ParseStepDirName(StepDirName(7, k), &step, &kind));
    EXPECT_EQ(kind, k);
  }
}

}  // namespace
}  // namespace preempt::format
