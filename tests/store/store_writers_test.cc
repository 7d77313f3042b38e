// Who may write a checkpoint root, and what a save handle promises on each rank: a second process
// saving as the same rank is refused naming the holder (the first keeps saving, readers keep
// reading), the lock dies with its process, and wait() on a rank other than 0 means committed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

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

struct Saved {
  std::vector<uint8_t> bytes;
  SaveRequest req;
};
Saved Request(int64_t step, size_t n = 100000) {
  Saved s;
  s.bytes.assign(n, static_cast<uint8_t>(step));
  s.req.step = step;
  s.req.items.push_back({"w", DType::kUInt8, {static_cast<int64_t>(n)}, s.bytes.data(), n});
  return s;
}

// store_crash_writer saving steps first_step, first_step+1, ... on `root` in its own process.
struct Writer {
  pid_t pid = -1;
  FILE* out = nullptr;  // its stdout and stderr
};
Writer StartWriter(const std::string& root, int64_t first_step) {
  const std::string bin = testing::BinaryDir() + "/tests/store/store_crash_writer";
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  Writer w;
  w.pid = fork();
  if (w.pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    const std::string first = std::to_string(first_step);
    execl(bin.c_str(), bin.c_str(), root.c_str(), first.c_str(), "20000", nullptr);
    _exit(127);
  }
  close(fds[1]);
  w.out = fdopen(fds[0], "r");
  return w;
}
// Reads the writer's first line; a number means it committed a checkpoint.
std::string FirstLine(const Writer& w) {
  char line[4096] = {0};
  if (!fgets(line, sizeof line, w.out)) return "";
  return line;
}
int Finish(Writer* w, bool kill_it) {
  if (kill_it) kill(w->pid, SIGKILL);
  int status = 0;
  waitpid(w->pid, &status, 0);
  fclose(w->out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

TEST(WriterLock, SecondProcessIsRefusedNamingTheHolder) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  testing::FaultInjectingFileSystem fs;
  StoreOptions o = Options(root);
  o.fs = &fs;
  {
    Store store(o);
    Saved first = Request(1);
    ASSERT_TRUE(store.save(first.req).ok());
    // A slow save in progress while another process tries to save on the same root.
    fs.max_write_piece = 4096;
    Saved big = Request(2, 16 << 20);
    auto h = store.save_async(big.req);
    Writer other = StartWriter(root, 100);
    const std::string line = FirstLine(other);
    const bool committed = !line.empty() && isdigit(static_cast<unsigned char>(line[0]));
    EXPECT_FALSE(committed) << "the second writer committed step " << line;
    EXPECT_NE(line.find("held by pid " + std::to_string(getpid())), std::string::npos) << line;
    EXPECT_NE(line.find(".lock.rank-00000"), std::string::npos) << line;
    EXPECT_EQ(Finish(&other, committed), committed ? -SIGKILL : 1);
    // The first writer's save was not disturbed; readers need no lock.
    ASSERT_TRUE(h->wait().ok()) << h->status().to_string();
    Store reader(Options(root));
    RestoreResult r;
    RestoreOptions ro;
    ro.strict = false;
    ASSERT_TRUE(reader.restore({}, ro, &r).ok());
    EXPECT_EQ(r.step, 2);
    EXPECT_FALSE(fsys::exists(root + "/step-00000100"));
  }
  // The first Store is gone: the other process may write now, and its lock dies with it.
  Writer next = StartWriter(root, 100);
  EXPECT_EQ(FirstLine(next), "100\n");
  Finish(&next, true);
  Store after(Options(root));
  Saved s = Request(500);
  EXPECT_TRUE(after.save(s.req).ok()) << "lock of a killed process still held";
}

TEST(WriterLock, RanksOfOneJobShareARoot) {
  TempDir dir;
  std::vector<Saved> parts;
  parts.push_back(Request(3));
  parts.push_back(Request(3));
  std::vector<Status> st(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      StoreOptions o = Options(dir / "ckpt");
      o.rank = r;
      o.world_size = 2;
      Store store(o);
      st[r] = store.save(parts[r].req);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_TRUE(st[0].ok()) << st[0].to_string();
  EXPECT_TRUE(st[1].ok()) << st[1].to_string();
  EXPECT_TRUE(fsys::exists(dir / "ckpt/.lock.rank-00001"));
}

bool WaitUntil(const std::function<bool()>& cond) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Two Store instances as ranks 0 and 1 of one job on one root.
TEST(MultiRank, WaitOnOtherRanksMeansCommitted) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  StoreOptions o1 = Options(root);
  o1.rank = 1;
  o1.world_size = 2;
  Store rank1(o1);
  testing::FaultInjectingFileSystem fs0;
  StoreOptions o0 = o1;
  o0.rank = 0;
  o0.fs = &fs0;
  Store rank0(o0);

  Saved a1 = Request(7), a0 = Request(7);
  auto h1 = rank1.save_async(a1.req);
  ASSERT_TRUE(WaitUntil([&] { return h1->durable(); }));
  // Rank 1's part is durable, but rank 0 has not committed: not OK yet.
  EXPECT_EQ(h1->wait(Deadline::InSeconds(0.3)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(h1->done());
  EXPECT_FALSE(fsys::exists(root + "/step-00000007/COMMIT"));
  auto h0 = rank0.save_async(a0.req);
  ASSERT_TRUE(h1->wait().ok()) << h1->status().to_string();
  EXPECT_TRUE(fsys::exists(root + "/step-00000007/COMMIT")) << "rank 1 returned OK before COMMIT existed";
  ASSERT_TRUE(h0->wait().ok()) << h0->status().to_string();

  // Rank 0 gives step 8 up (its disk is full): rank 1 learns it instead of reporting OK.
  Saved b1 = Request(8), b0 = Request(8);
  h1 = rank1.save_async(b1.req);
  ASSERT_TRUE(WaitUntil([&] { return h1->durable(); }));
  fs0.space_left = 1000;
  h0 = rank0.save_async(b0.req);
  EXPECT_EQ(h0->wait().code(), StatusCode::kNoSpace);
  Status s1 = h1->wait(Deadline::InSeconds(60));
  EXPECT_EQ(s1.code(), StatusCode::kAborted) << s1.to_string();
  EXPECT_NE(s1.message().find("rank 0"), std::string::npos) << s1.message();
  EXPECT_FALSE(fsys::exists(root + "/step-00000008"));

  // Both go on with the next step.
  fs0.space_left = -1;
  Saved c1 = Request(9), c0 = Request(9);
  h1 = rank1.save_async(c1.req);
  h0 = rank0.save_async(c0.req);
  EXPECT_TRUE(h0->wait().ok()) << h0->status().to_string();
  EXPECT_TRUE(h1->wait().ok()) << h1->status().to_string();
}

}  // namespace

// A rank other than 0 that gives up after its part is durable (the runtime cancels a stop save
// at its deadline) must leave its files: rank 0 may commit them after all, and a committed step
// must hold every rank's part.
TEST(MultiRank, CancelAfterDurableKeepsTheRanksPartForALateCommit) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  StoreOptions o1 = Options(root);
  o1.rank = 1;
  o1.world_size = 2;
  Store rank1(o1);
  StoreOptions o0 = o1;
  o0.rank = 0;
  Store rank0(o0);

  Saved a1 = Request(7), a0 = Request(7);
  auto h1 = rank1.save_async(a1.req);
  ASSERT_TRUE(WaitUntil([&] { return h1->durable(); }));
  h1->cancel();
  EXPECT_EQ(h1->wait().code(), StatusCode::kAborted);
  EXPECT_TRUE(fsys::exists(root + "/step-00000007.tmp/rank-00001.manifest"));
  auto h0 = rank0.save_async(a0.req);  // the late commit
  ASSERT_TRUE(h0->wait().ok()) << h0->status().to_string();
  std::vector<CheckpointInfo> infos;
  ASSERT_TRUE(rank1.list(&infos).ok());
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_TRUE(infos[0].valid) << infos[0].problem;
}

// The writer lock belongs to the process that took it: a child it forked (a DataLoader worker)
// that outlives it must not keep the root locked for the relaunched job.
TEST(WriterLock, AForkedChildDoesNotKeepADeadWritersLock) {
  TempDir dir;
  const std::string root = dir / "ckpt";
  pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    {
      Store s(Options(root));
      Saved a = Request(1);
      if (!s.save_async(a.req)->wait().ok()) _exit(2);
      if (fork() == 0) {  // the worker: sleeps on with the lock file's descriptor inherited
        sleep(3);
        _exit(0);
      }
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(holder, &status, 0), holder);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  Store next(Options(root));
  Saved b = Request(2);
  Status s = next.save_async(b.req)->wait();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

}  // namespace preempt
