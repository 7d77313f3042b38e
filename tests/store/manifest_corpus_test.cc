// The manifest fuzz target's seed inputs (tests/fuzz/corpus) run through the same entry point in
// every build (release and ASan+UBSan, with gcc), not only in the clang libFuzzer stage; the
// enveloped seeds must decode, so the fuzzer starts from inputs that reach every validator.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "format/format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace preempt::format {
namespace {

const std::string kCorpus = PREEMPT_SOURCE_DIR "/tests/fuzz/corpus";

std::string Read(const std::string& name) {
  std::ifstream in(kCorpus + "/" + name, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ManifestFuzzCorpus, EverySeedRunsThroughTheFuzzTarget) {
  DIR* d = opendir(kCorpus.c_str());
  ASSERT_NE(d, nullptr) << kCorpus;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string text = Read(e->d_name);
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(text.data()), text.size()), 0) << e->d_name;
    ++n;
  }
  closedir(d);
  EXPECT_GE(n, 6);
}

TEST(ManifestFuzzCorpus, SeedsDecode) {
  Manifest m;
  Status s = DecodeManifest(Read("manifest"), "manifest", UINT64_MAX, &m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(m.format_version, 1u);
  s = DecodeManifest(Read("manifest-v2-references"), "manifest-v2-references", UINT64_MAX, &m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(m.format_version, 2u);
  EXPECT_EQ(ReferencedSteps(m), std::vector<int64_t>{12});
  CommitRecord c;
  s = DecodeCommit(Read("commit-v2-references"), "commit-v2-references", &c);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(c.referenced_steps, std::vector<int64_t>{12});
  s = DecodeCommit(Read("commit"), "commit", &c);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(c.referenced_steps.empty());
}

}  // namespace
}  // namespace preempt::format
