// Test helpers shared by every test area: temporary directories and paths of built binaries.
#pragma once

#include <cstdint>
#include <string>

namespace preempt::testing {

// A fresh directory under $TMPDIR (default /tmp), removed with its contents on destruction
// unless PREEMPT_KEEP_TEST_DIRS is set.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "preempt-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The CMake binary directory (PREEMPT_TEST_BINARY_DIR set by ctest), for locating helper programs.
std::string BinaryDir();

// Reads / writes a whole file (test convenience; aborts the test on failure via ADD_FAILURE).
std::string ReadFileOrDie(const std::string& path);
void WriteFileOrDie(const std::string& path, const std::string& data);
// Flips one bit of the byte at `offset` (a second call undoes it): on-disk damage for corruption tests.
void FlipByte(const std::string& path, uint64_t offset);

}  // namespace preempt::testing
