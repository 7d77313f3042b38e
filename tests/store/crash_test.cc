// A writer process is SIGKILLed at random instants while saving (and retiring old steps); after
// every kill the newest valid checkpoint restores completely and checksum-valid, never a partial
// one, and every committed checkpoint is valid. The second test's writer keeps most of its state
// unchanged, so its checkpoints reference older steps' data.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstring>
#include <random>
#include <thread>

#include "preempt/store.h"
#include "support/test_util.h"

namespace preempt {
namespace {

// `frozen`: the writer's entry "a" never changes (see crash_writer.cc). *referencing: how many
// restored checkpoints referenced older steps' data.
void KillAndRestore(int iterations, bool frozen, int* referencing) {
  testing::TempDir dir;
  const std::string root = dir / "ckpt";
  const std::string writer = testing::BinaryDir() + "/tests/store/store_crash_writer";
  ASSERT_TRUE(std::filesystem::exists(writer)) << writer;
  const size_t bytes = (1 << 20) + 12345;
  std::mt19937 rng(12345);
  int64_t next_step = 1, last_restored = 0, kills = 0, restores_ok = 0;
  *referencing = 0;
  for (int i = 0; i < iterations; ++i) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      dup2(out[1], 1);
      dup2(devnull, 2);
      close(out[0]);
      std::string first = std::to_string(next_step);
      std::string b = std::to_string(bytes);
      execl(writer.c_str(), writer.c_str(), root.c_str(), first.c_str(), b.c_str(), frozen ? "frozen" : nullptr, nullptr);
      _exit(127);
    }
    close(out[1]);
    // Wait for the writer's first commit so that every kill lands after progress was made,
    // then kill it at a random instant of a later save.
    FILE* lines = fdopen(out[0], "r");
    long reported = -1;
    ASSERT_EQ(fscanf(lines, "%ld", &reported), 1) << "writer made no progress";
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 60000)(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited on its own with " << WEXITSTATUS(status);
    long more;
    while (fscanf(lines, "%ld", &more) == 1) reported = more;  // commits reported before it died
    fclose(lines);
    ++kills;

    StoreOptions o;
    o.root = root;
    Store store(o);
    RestoreResult r;
    RestoreOptions ro;
    ro.strict = false;
    Status s = store.restore({}, ro, &r);
    ASSERT_TRUE(s.ok()) << "iteration " << i << ": " << s.to_string();
    EXPECT_TRUE(r.rejected.empty()) << r.rejected[0];  // committed checkpoints are never partial
    ASSERT_GE(r.step, last_restored) << "went backwards";
    ASSERT_GE(r.step, reported) << "a commit the writer reported as durable was not restored";
    std::mt19937_64 gen(frozen ? 0 : r.step);
    const auto& a = r.owned.at("a");
    const auto& b = r.owned.at("b");
    ASSERT_EQ(a.size(), bytes);
    bool same = true;
    for (const auto* v : {&a, &b}) {
      if (frozen && v == &b) gen.seed(r.step);
      for (size_t k = 0; k < v->size() && same; k += 8) {
        uint64_t w = gen();
        same = std::memcmp(v->data() + k, &w, std::min<size_t>(8, v->size() - k)) == 0;
      }
    }
    ASSERT_TRUE(same) << "content of step " << r.step << " differs";
    // Retention retires a step in one rename: a kill never leaves a committed-looking directory
    // that is invalid (what preempt-ckpt list/verify would report as corrupt).
    std::vector<CheckpointInfo> all;
    ASSERT_TRUE(Store::ListCheckpoints(root, &all).ok());
    for (const auto& c : all) {
      if (!c.committed) continue;
      ASSERT_TRUE(c.valid) << "iteration " << i << ": " << c.path << ": " << c.problem;
    }
    CheckpointManifest m;
    ASSERT_TRUE(Store::ReadManifest(r.path, 0, &m).ok());
    if (m.referenced_chunks > 0) ++*referencing;
    last_restored = r.step;
    next_step = r.step + 1;
    ++restores_ok;
  }
  EXPECT_EQ(kills, iterations);
  EXPECT_EQ(restores_ok, kills);
  ::testing::Test::RecordProperty("kills", static_cast<int>(kills));
  ::testing::Test::RecordProperty("restores", static_cast<int>(restores_ok));
  std::printf("kills=%lld restores=%lld last_step=%lld referencing=%d\n", (long long)kills, (long long)restores_ok,
              (long long)last_restored, *referencing);
}

TEST(StoreCrash, SigkillAtRandomInstants) {
  const int iterations = getenv("PREEMPT_CRASH_ITERATIONS") ? atoi(getenv("PREEMPT_CRASH_ITERATIONS")) : 120;
  int referencing = 0;
  KillAndRestore(iterations, false, &referencing);
  EXPECT_EQ(referencing, 0) << "every step's content differs";
}

// Kills land in deduplicated saves and in the retention that must keep the referenced steps.
TEST(StoreCrash, SigkillDuringDeduplicatedSaves) {
  const int iterations = getenv("PREEMPT_CRASH_ITERATIONS") ? atoi(getenv("PREEMPT_CRASH_ITERATIONS")) / 3 : 40;
  int referencing = 0;
  KillAndRestore(iterations, true, &referencing);
  EXPECT_GT(referencing, iterations / 2);
}

}  // namespace
}  // namespace preempt
