// restore_tuning — which read settings make a cold Store::restore fastest on this disk, measured
// so that a disk whose speed drifts cannot decide the answer: every repetition runs every
// configuration once, in a rotated order, and each configuration is compared with the default
// of the same repetition (paired ratios), next to plain reads of the same bytes.
//
//   restore_tuning [--gib 2] [--dir DIR] [--reps 5] [--chunks-mib 4] [--depths 8,16,32,64]
//                  [--buffered] [--cold drop|evict] [--filler-gib 0]
//
// One checkpoint per chunk size (16 tensors of equal size, --gib in all) is saved once; then per
// repetition, each cold (see MakeCold). --filler-gib N writes N GiB to another file through the
// page cache after the saves (as a torch::save or a data loader's cache would): a virtual disk
// may serve the newest writes from its host's cache, and reads must not be measured only there.
// Per repetition:
//   restore  chunk C, depth D, O_DIRECT (and, with --buffered, through the page cache)
//   plain    the 4 MiB-chunk checkpoint's files read with O_DIRECT, 4 MiB x 8 in flight (like
//            fio), and buffered, one 4 MiB read at a time (the kernel's readahead does the rest)
// Reported: median seconds and GB/s per configuration, and the median and range of its per-rep
// speed-up over the default (4 MiB chunks, StoreOptions::read_queue_depth, O_DIRECT). Not run by
// benchmarks/run.sh (minutes).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "disk_read.h"
#include "preempt/buffer.h"
#include "preempt/log.h"
#include "preempt/store.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "restore_tuning: %s\n", msg.c_str());
  std::exit(2);
}

struct Options {
  double gib = 2;
  std::string dir = "/tmp/preempt-bench/restore-tuning";
  int reps = 5;
  std::vector<int> chunks_mib{4};
  std::vector<int> depths{8, 16, 32, 64};
  bool buffered = false;
  std::string cold = "drop";
  int filler_gib = 0;
};

std::vector<int> IntList(const std::string& flag, const std::string& s, int lo, int hi) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    char* end = nullptr;
    const long v = std::strtol(tok.c_str(), &end, 10);
    if (end == tok.c_str() || *end || v < lo || v > hi) {
      Die("bad " + flag + " entry '" + tok + "' (integers " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) Die(flag + " is empty");
  return out;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--gib") {
      const std::string v = next();
      char* end = nullptr;
      o.gib = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end || !(o.gib >= 1.0 / 16) || o.gib > 64) Die("bad --gib '" + v + "' (1/16 .. 64)");
    } else if (a == "--dir") {
      o.dir = next();
    } else if (a == "--reps") {
      o.reps = IntList(a, next(), 1, 1000).front();
    } else if (a == "--chunks-mib") {
      o.chunks_mib = IntList(a, next(), 1, 64);
    } else if (a == "--depths") {
      o.depths = IntList(a, next(), 1, 256);
    } else if (a == "--filler-gib") {
      o.filler_gib = IntList(a, next(), 0, 64).front();
    } else if (a == "--buffered") {
      o.buffered = true;
    } else if (a == "--cold") {
      o.cold = next();
      if (o.cold != "drop" && o.cold != "evict") Die("bad --cold '" + o.cold + "' (drop|evict)");
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: restore_tuning [--gib 2] [--dir DIR] [--reps 5] [--chunks-mib 4] [--depths 8,16,32,64] "
                  "[--buffered] [--cold drop|evict] [--filler-gib 0]\n");
      std::exit(0);
    } else {
      Die("unknown argument " + a);
    }
  }
  if (std::find(o.chunks_mib.begin(), o.chunks_mib.end(), 4) == o.chunks_mib.end()) o.chunks_mib.push_back(4);
  const int default_depth = preempt::StoreOptions().read_queue_depth;
  if (std::find(o.depths.begin(), o.depths.end(), default_depth) == o.depths.end()) o.depths.push_back(default_depth);
  return o;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Config {
  std::string name;
  std::function<double()> run;  // seconds of one cold read
  std::vector<double> secs;
};

std::string RootFor(const Options& o, int chunk_mib) { return o.dir + "/chunk-" + std::to_string(chunk_mib) + "mib"; }

}  // namespace

int main(int argc, char** argv) {
  const Options opt = Parse(argc, argv);
  preempt::SetLogLevel(preempt::LogLevel::kWarn);
  const uint64_t total = static_cast<uint64_t>(opt.gib * 1024) * kMiB;
  const int n = 16;
  const uint64_t each = total / n;
  std::vector<preempt::AlignedBuffer> src, dst;
  for (int i = 0; i < n; ++i) {
    src.emplace_back(each, true);
    for (uint64_t off = 0; off + 16 <= each; off += 4096) {  // every page distinct: a misplaced read shows
      const uint64_t stamp[2] = {off, static_cast<uint64_t>(i)};
      std::memcpy(src.back().data() + off, stamp, sizeof stamp);
    }
    dst.emplace_back(each, true);
  }
  std::vector<preempt::RestoreTarget> targets;
  for (int chunk : opt.chunks_mib) {
    std::filesystem::remove_all(RootFor(opt, chunk));
    preempt::StoreOptions so;
    so.root = RootFor(opt, chunk);
    so.chunk_bytes = static_cast<size_t>(chunk) * kMiB;
    preempt::Store store(so);
    preempt::SaveRequest req;
    req.step = 1;
    for (int i = 0; i < n; ++i) req.items.push_back({"t" + std::to_string(i), preempt::DType::kBytes, {}, src[i].data(), each});
    const preempt::Status s = store.save(std::move(req));
    if (!s.ok()) Die("save: " + s.to_string());
  }
  if (opt.filler_gib > 0) {
    const std::string filler = opt.dir + "/filler";
    FILE* f = std::fopen(filler.c_str(), "wb");
    if (!f) Die("cannot create " + filler);
    for (uint64_t off = 0; off < static_cast<uint64_t>(opt.filler_gib) << 30; off += each) {
      if (std::fwrite(src[0].data(), 1, each, f) != each) Die("cannot write " + filler);
    }
    if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) Die("cannot sync " + filler);
    std::fclose(f);
  }
  for (int i = 0; i < n; ++i) {
    preempt::RestoreTarget t;
    t.name = "t" + std::to_string(i);
    t.data = dst[i].data();
    t.nbytes = each;
    t.check_shape = false;
    targets.push_back(t);
  }

  std::vector<Config> configs;
  auto add_restore = [&](int chunk, int depth, preempt::DirectIo dio) {
    const std::string name = "restore chunk " + std::to_string(chunk) + " MiB depth " + std::to_string(depth) +
                             (dio == preempt::DirectIo::kOff ? " buffered" : " direct");
    configs.push_back({name, [&opt, &targets, &dst, &src, each, chunk, depth, dio, n] {
                         preempt::StoreOptions so;
                         so.root = RootFor(opt, chunk);
                         so.read_queue_depth = depth;
                         so.direct_io = dio;
                         preempt::Store store(so);
                         preempt::RestoreResult rr;
                         const auto t0 = Clock::now();
                         const preempt::Status s = store.restore(targets, preempt::RestoreOptions(), &rr);
                         const double secs = Since(t0);
                         if (!s.ok()) Die("restore: " + s.to_string());
                         for (int i = 0; i < n; ++i) {
                           if (std::memcmp(dst[i].data(), src[i].data(), each) != 0) Die("restored bytes differ");
                         }
                         return secs;
                       }, {}});
  };
  const int default_depth = preempt::StoreOptions().read_queue_depth;
  add_restore(4, default_depth, preempt::DirectIo::kAuto);  // the default, configs[0]
  for (int chunk : opt.chunks_mib) {
    for (int depth : opt.depths) {
      if (chunk != 4 || depth != default_depth) add_restore(chunk, depth, preempt::DirectIo::kAuto);
      if (opt.buffered) add_restore(chunk, depth, preempt::DirectIo::kOff);
    }
  }
  const std::vector<std::string> files = preempt_bench::FilesUnder(RootFor(opt, 4));
  auto add_plain = [&](const std::string& name, bool direct, int depth) {
    configs.push_back({name, [files, direct, depth] {
                         preempt_bench::PlainReadOptions po;
                         po.direct = direct;
                         po.depth = depth;
                         uint64_t got = 0;
                         std::string why;
                         const auto t0 = Clock::now();
                         if (!preempt_bench::ReadFiles(files, po, &got, &why)) Die(why);
                         return Since(t0);
                       }, {}});
  };
  add_plain("plain read O_DIRECT 4 MiB x 8", true, 8);
  add_plain("plain read buffered 4 MiB x 1", false, 1);

  std::printf("restore_tuning: %.2f GiB, %d reps, %zu configurations, cold = %s\n", opt.gib, opt.reps, configs.size(),
              opt.cold.c_str());
  for (int rep = 0; rep < opt.reps; ++rep) {
    for (size_t k = 0; k < configs.size(); ++k) {
      Config& c = configs[(k + rep) % configs.size()];
      std::string why;
      if (!preempt_bench::MakeCold(opt.cold, opt.dir, &why)) Die("cannot make the cache cold: " + why);
      c.secs.push_back(c.run());
    }
    std::printf("  rep %d:", rep);
    for (const auto& c : configs) std::printf(" %.2f", total / c.secs.back() / 1e9);
    std::printf(" GB/s\n");
    std::fflush(stdout);
  }
  std::printf("%-42s %8s %8s %24s\n", "configuration", "median s", "GB/s", "speed-up vs default");
  for (const auto& c : configs) {
    std::vector<double> up;
    for (int r = 0; r < opt.reps; ++r) up.push_back(configs[0].secs[r] / c.secs[r]);
    const auto mm = std::minmax_element(up.begin(), up.end());
    std::printf("%-42s %8.3f %8.2f   %.2fx (%.2f..%.2f)\n", c.name.c_str(), Median(c.secs), total / Median(c.secs) / 1e9,
                Median(up), *mm.first, *mm.second);
  }
  std::filesystem::remove_all(opt.dir);
  return 0;
}
