// preempt-store-demo — saves a multi-GiB synthetic checkpoint asynchronously, restores it into
// fresh buffers as a relaunched job would, checks every byte, and reports how fast each part was.
//   preempt-store-demo [--dir D] [--gib N] [--keep]
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "preempt/store.h"

using namespace preempt;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dir = "/tmp/preempt-demo";
  double gib = 2.0;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--gib" && i + 1 < argc) gib = atof(argv[++i]);
    else if (a == "--keep") keep = true;
    else {
      fprintf(stderr, "usage: %s [--dir D] [--gib N] [--keep]\n", argv[0]);
      return 2;
    }
  }
  const uint64_t total = static_cast<uint64_t>(gib * (1ull << 30));
  // A model-like mix: a few big matrices, many small vectors (biases, norms).
  std::vector<uint64_t> sizes;
  uint64_t acc = 0;
  for (int i = 0; acc < total; ++i) {
    uint64_t s = (i % 10 == 0) ? std::min<uint64_t>(total - acc, 256ull << 20) : std::min<uint64_t>(total - acc, 4096 * (1 + i % 7));
    sizes.push_back(s);
    acc += s;
  }
  printf("demo: %zu tensors, %.2f GiB of float32 state, checkpoint root %s\n", sizes.size(), acc / 1073741824.0, dir.c_str());
  std::vector<AlignedBuffer> state;
  std::mt19937_64 rng(7);
  for (uint64_t s : sizes) {
    state.emplace_back(s, true);
    for (uint64_t k = 0; k + 8 <= s; k += 4096) {  // sparse random fill, cheap but distinguishable
      uint64_t v = rng();
      std::memcpy(state.back().data() + k, &v, 8);
    }
  }
  (void)FileSystem::Default()->remove_tree(dir);
  StoreOptions o;
  o.root = dir;
  Store store(o);
  SaveRequest req;
  req.step = 1200;
  for (size_t i = 0; i < sizes.size(); ++i) {
    req.items.push_back({"model:layer" + std::to_string(i) + ".weight", DType::kFloat32,
                         {static_cast<int64_t>(sizes[i] / 4)}, state[i].data(), sizes[i]});
  }
  req.metadata["demo"] = "preempt-store-demo";
  auto t0 = Clock::now();
  auto h = store.save_async(req);
  double submit_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  printf("save: submitted in %.2f ms; training could continue while it persists\n", submit_ms);
  while (!h->done()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    printf("save: %6.1f / %.1f MiB written\n", h->bytes_written() / 1048576.0, h->bytes_total() / 1048576.0);
  }
  Status s = h->wait();
  if (!s.ok()) {
    fprintf(stderr, "save failed: %s\n", s.to_string().c_str());
    return 1;
  }
  SaveStats st = h->stats();
  printf("save: committed %s: %.2f GiB in %.3f s = %.2f GB/s (%s)\n", h->path().c_str(), st.bytes / 1073741824.0,
         st.total_s, st.bytes / st.total_s / 1e9, st.backend.c_str());

  // What a relaunched job does: fresh buffers, restore the newest valid checkpoint into them.
  std::vector<AlignedBuffer> fresh;
  std::vector<RestoreTarget> targets;
  for (size_t i = 0; i < sizes.size(); ++i) {
    fresh.emplace_back(sizes[i], true);
    targets.push_back({req.items[i].name, DType::kFloat32, req.items[i].shape, fresh.back().data(), sizes[i]});
  }
  Store relaunched(o);
  RestoreResult r;
  auto t1 = Clock::now();
  s = relaunched.restore(targets, RestoreOptions{}, &r);
  double restore_s = std::chrono::duration<double>(Clock::now() - t1).count();
  if (!s.ok()) {
    fprintf(stderr, "restore failed: %s\n", s.to_string().c_str());
    return 1;
  }
  size_t mismatched = 0;
  for (size_t i = 0; i < sizes.size(); ++i) mismatched += std::memcmp(fresh[i].data(), state[i].data(), sizes[i]) != 0;
  printf("restore: step %" PRId64 " from %s: %.2f GiB in %.3f s = %.2f GB/s (%s), every chunk checksum-verified\n",
         r.step, r.path.c_str(), r.bytes / 1073741824.0, restore_s, r.bytes / restore_s / 1e9, r.backend.c_str());
  printf("restore: %zu of %zu tensors differ from what was saved\n", mismatched, sizes.size());
  if (!keep) (void)FileSystem::Default()->remove_tree(dir);
  return mismatched == 0 ? 0 : 1;
}
