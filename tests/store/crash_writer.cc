// Saves checkpoints of deterministic content forever (until killed). Used by store_crash_test:
//   store_crash_writer <root> <first_step> <bytes> [frozen]
// With "frozen", entry "a" is the same at every step (its chunks are referenced, not rewritten).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "preempt/store.h"

// 64-bit words of mt19937_64(seed) (the test does the same).
static void Fill(uint64_t seed, std::vector<uint8_t>* v) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < v->size(); i += 8) {
    uint64_t w = rng();
    std::memcpy(v->data() + i, &w, std::min<size_t>(8, v->size() - i));
  }
}

// Content of step `step`: words of mt19937_64(step), a then b; with `frozen`, a from seed 0.
static void FillPattern(long step, bool frozen, std::vector<uint8_t>* a, std::vector<uint8_t>* b) {
  if (frozen) {
    Fill(0, a);
    Fill(step, b);
    return;
  }
  std::mt19937_64 rng(step);
  for (auto* v : {a, b}) {
    for (size_t i = 0; i < v->size(); i += 8) {
      uint64_t w = rng();
      std::memcpy(v->data() + i, &w, std::min<size_t>(8, v->size() - i));
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "frozen"))) {
    fprintf(stderr, "usage: %s <root> <first_step> <bytes> [frozen]\n", argv[0]);
    return 2;
  }
  const bool frozen = argc == 5;
  preempt::StoreOptions o;
  o.root = argv[1];
  o.chunk_bytes = 256 << 10;
  o.queue_depth = 4;
  o.keep_last = 2;
  preempt::Store store(o);
  const size_t bytes = strtoull(argv[3], nullptr, 10);
  std::vector<uint8_t> a(bytes), b(bytes / 3 + 5);
  for (long step = atol(argv[1 + 1]);; ++step) {
    // The content is a function of the step, so the test can check any restored checkpoint.
    FillPattern(step, frozen, &a, &b);
    preempt::SaveRequest req;
    req.step = step;
    req.items.push_back({"a", preempt::DType::kUInt8, {static_cast<int64_t>(a.size())}, a.data(), a.size()});
    req.items.push_back({"b", preempt::DType::kUInt8, {static_cast<int64_t>(b.size())}, b.data(), b.size()});
    preempt::Status s = store.save(req);
    if (!s.ok()) {
      fprintf(stderr, "save failed: %s\n", s.to_string().c_str());
      return 1;
    }
    printf("%ld\n", step);
    fflush(stdout);
  }
}
