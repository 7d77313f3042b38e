// bench_store — save and restore bandwidth of preempt::Store against a plain memcpy of the same
// bytes, for checkpoints of a realistic tensor mix (a few large tensors plus many small ones).
//
//   bench_store [--sizes 1,4] [--dir DIR] [--json PATH] [--quick] [--backend auto|uring|posix]
//               [--chunk-mib 4] [--depth 8] [--reps N] [--mix-out PATH] [--mix-only]
//
// For each size (GiB; --quick: one 64 MiB size):
//   memcpy   : the same bytes copied item by item into pre-allocated, pre-faulted memory (best of 3)
//   save     : Store::save_async → durable commit (SaveStats::total_s: data fsynced, manifest,
//              COMMIT, rename, directory fsync), sources pre-allocated and pre-faulted
//   restore  : Store::restore into pre-allocated targets, cold: after drop_caches (--cold drop,
//              root only) or after evicting the checkpoint's file pages (--cold evict); reported
//              as "warm" when neither is allowed
// Bandwidths are payload bytes / seconds in GB/s (1 GB = 1e9 bytes), like fio's bw_bytes.
// The restored bytes are compared with the sources (outside the timed region).
//
//   frozen   : unchanged chunks not rewritten: the same mix where only the small tensors at its end
//              (~10 % of the bytes, as with a frozen model and trained heads/adapters) change
//              between saves; a full save (nothing to reference), the first save after it, then
//              the steady state (median of the next --reps + 2 saves): persist time, written
//              fraction of the bytes, and the full save's time over the steady one's
//
// --mix-out writes the tensor sizes of each checkpoint as JSON ({"1gib": [nbytes, ...], ...}) so
// benchmarks/torch_baseline.py saves exactly the same mix; --mix-only stops there.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "preempt/buffer.h"
#include "preempt/log.h"
#include "preempt/store.h"
#include "disk_read.h"

namespace {

using preempt_bench::MakeCold;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "bench_store: %s\n", msg.c_str());
  std::exit(1);
}

void Check(const preempt::Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.to_string());
}

// "1gib", "4gib", "64mib", "1536mib".
std::string SizeLabel(uint64_t bytes) {
  if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + "gib";
  return std::to_string(bytes / kMiB) + "mib";
}

// The tensor mix of a checkpoint of `total` bytes (float32 tensors, sizes multiples of 4 bytes):
//   70 % in 4 large tensors (embedding / big projection weights and their optimizer moments),
//   20 % in 64 medium tensors (layer weights),
//   10 % in many small tensors of 2 KiB .. 1 MiB (biases, norms, small layers), cycling through
//        a fixed list of sizes, the last one taking the remainder.
// Deterministic, so the torch baseline can be handed exactly the same sizes.
std::vector<uint64_t> TensorMix(uint64_t total) {
  total &= ~uint64_t{3};
  std::vector<uint64_t> sizes;
  uint64_t used = 0;
  auto add = [&](uint64_t n) {
    n &= ~uint64_t{3};
    if (n == 0 || used + n > total) return;
    sizes.push_back(n);
    used += n;
  };
  // Not multiples of 4 KiB on purpose: real tensors rarely are (e.g. 50257 x 768 floats).
  for (double f : {0.25, 0.20, 0.15, 0.10}) add(static_cast<uint64_t>(total * f) - 4 * 1001);
  const uint64_t medium_each = static_cast<uint64_t>(total * 0.20 / 64);
  for (int i = 0; i < 64; ++i) add(medium_each - 4 * (i % 7));
  static const uint64_t kSmallFloats[] = {512, 768, 1024, 2048, 3072, 4096, 768, 1024, 16384, 65536, 262144};
  for (size_t i = 0;; ++i) {
    const uint64_t n = 4 * kSmallFloats[i % (sizeof(kSmallFloats) / sizeof(kSmallFloats[0]))];
    if (total - used <= n + 4 * 512) {
      add(total - used);
      break;
    }
    add(n);
  }
  return sizes;
}

// Fills `n` bytes with non-constant data (so nothing is special-cased as zeros): one 64 KiB
// xorshift block, copied, each 64 KiB stamped with its own position and seed. Fast to generate.
void Fill(uint8_t* p, size_t n, uint64_t seed) {
  static std::vector<uint8_t> block = [] {
    std::vector<uint8_t> b(64 << 10);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i + 8 <= b.size(); i += 8) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::memcpy(&b[i], &x, 8);
    }
    return b;
  }();
  for (size_t off = 0; off < n; off += block.size()) {
    const size_t len = std::min(block.size(), n - off);
    std::memcpy(p + off, block.data(), len);
    const uint64_t stamp = seed * 0x100000001B3ull ^ off;
    std::memcpy(p + off, &stamp, std::min<size_t>(8, len));
  }
}

// Process CPU seconds (user + system, every thread, io_uring's io-wq workers included).
double CpuSeconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// A pre-faulted, 4 KiB-aligned buffer of the benchmark's own (sources and restore targets).
// Faulted in with MADV_POPULATE_WRITE where the kernel has it (5.14+): on some VMs a page fault
// costs ~50 us, and touching GiBs page by page would dominate the benchmark's run time. Ordinary
// 4 KiB pages (no huge pages), like tensors from a default allocator.
class HostBuffer {
 public:
  explicit HostBuffer(size_t n) : n_(std::max<size_t>(n, 1)) {
    const size_t cap = (n_ + 4095) / 4096 * 4096;
    void* p = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    p_ = static_cast<uint8_t*>(p);
    cap_ = cap;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    if (::madvise(p_, cap_, MADV_POPULATE_WRITE) != 0) std::memset(p_, 0, cap_);
  }
  ~HostBuffer() {
    if (p_) ::munmap(p_, cap_);
  }
  HostBuffer(HostBuffer&& o) noexcept : p_(o.p_), n_(o.n_), cap_(o.cap_) { o.p_ = nullptr; }
  HostBuffer(const HostBuffer&) = delete;
  uint8_t* data() { return p_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

struct Options {
  std::vector<double> sizes_gib = {1, 4};
  std::string dir = "/tmp/preempt-bench";
  std::string json;
  std::string mix_out;
  bool mix_only = false;
  bool quick = false;
  preempt::IoBackend backend = preempt::IoBackend::kAuto;
  std::string backend_name = "auto";
  std::string cold = "drop";  // drop | evict (see MakeCold)
  size_t chunk_bytes = 4 * kMiB;
  int depth = 8;
  int reps = 1;
};

void Usage() {
  std::fprintf(stderr,
               "usage: bench_store [--sizes 1,4] [--dir DIR] [--json PATH] [--quick] [--backend auto|uring|posix]\n"
               "                   [--chunk-mib 4] [--depth 8] [--reps N] [--cold drop|evict] [--mix-out PATH] [--mix-only]\n");
}

Options Parse(int argc, char** argv) {
  Options o;
  bool reps_set = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        Usage();
        Die("missing value after " + a);
      }
      return argv[++i];
    };
    if (a == "--sizes") {
      o.sizes_gib.clear();
      std::stringstream ss(next());
      std::string tok;
      while (std::getline(ss, tok, ',')) {
        char* end = nullptr;
        double v = std::strtod(tok.c_str(), &end);
        if (end == tok.c_str() || *end || !(v > 0) || v > 1024) Die("bad --sizes entry '" + tok + "' (GiB, e.g. 1,4 or 0.25)");
        o.sizes_gib.push_back(v);
      }
      if (o.sizes_gib.empty()) Die("--sizes is empty");
    } else if (a == "--dir") {
      o.dir = next();
    } else if (a == "--json") {
      o.json = next();
    } else if (a == "--mix-out") {
      o.mix_out = next();
    } else if (a == "--mix-only") {
      o.mix_only = true;
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--backend") {
      o.backend_name = next();
      if (o.backend_name == "uring") o.backend = preempt::IoBackend::kUring;
      else if (o.backend_name == "posix") o.backend = preempt::IoBackend::kPosix;
      else if (o.backend_name == "auto") o.backend = preempt::IoBackend::kAuto;
      else Die("bad --backend '" + o.backend_name + "' (auto|uring|posix)");
    } else if (a == "--cold") {
      o.cold = next();
      if (o.cold != "drop" && o.cold != "evict") Die("bad --cold '" + o.cold + "' (drop|evict)");
    } else if (a == "--chunk-mib") {
      const std::string v = next();
      char* end = nullptr;
      const double mib = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end || !(mib >= 1.0 / 256) || mib > 256) Die("bad --chunk-mib '" + v + "' (1/256 .. 256)");
      o.chunk_bytes = std::max<size_t>(4096, static_cast<size_t>(mib * kMiB) / 4096 * 4096);
    } else if (a == "--depth") {
      const std::string v = next();
      char* end = nullptr;
      const long d = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || d < 1 || d > 256) Die("bad --depth '" + v + "' (1 .. 256)");
      o.depth = static_cast<int>(d);
    } else if (a == "--reps") {
      const std::string v = next();
      char* end = nullptr;
      const long r = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end || r < 1 || r > 1000) Die("bad --reps '" + v + "' (1 .. 1000)");
      o.reps = static_cast<int>(r);
      reps_set = true;
    } else if (a == "-h" || a == "--help") {
      Usage();
      std::exit(0);
    } else {
      Usage();
      Die("unknown argument " + a);
    }
  }
  if (o.quick) {
    o.sizes_gib = {64.0 / 1024};
    if (!reps_set) o.reps = 3;
  }
  return o;
}

uint64_t SizeBytes(double gib) { return static_cast<uint64_t>(std::llround(gib * 1024)) * kMiB; }

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o;
}

// Ordered JSON object of numbers and strings, written flat.
struct JsonOut {
  std::vector<std::pair<std::string, std::string>> kv;
  void num(const std::string& k, double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    kv.emplace_back(k, b);
  }
  void str(const std::string& k, const std::string& v) { kv.emplace_back(k, "\"" + JsonEscape(v) + "\""); }
  std::string text() const {
    std::string o = "{\n";
    for (size_t i = 0; i < kv.size(); ++i) o += "  \"" + kv[i].first + "\": " + kv[i].second + (i + 1 < kv.size() ? ",\n" : "\n");
    return o + "}\n";
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string ItemName(size_t i) {
  char b[48];
  std::snprintf(b, sizeof b, "model:layer%04zu.weight", i);
  return b;
}

preempt::SaveRequest MixRequest(int64_t step, const std::vector<uint64_t>& mix, std::vector<HostBuffer>& src) {
  preempt::SaveRequest req;
  req.step = step;
  for (size_t i = 0; i < mix.size(); ++i) {
    preempt::SaveItem it;
    it.name = ItemName(i);
    it.dtype = preempt::DType::kFloat32;
    it.shape = {static_cast<int64_t>(mix[i] / 4)};
    it.data = src[i].data();
    it.nbytes = mix[i];
    req.items.push_back(std::move(it));
  }
  return req;
}

struct FrozenFigures {
  double trained_frac = 0;      // bytes that change between saves / all bytes
  double full_s = 0;            // a save with nothing to reference
  double first_s = 0;           // the save right after it (unchanged chunks found by copy + hash)
  double steady_s = 0;          // later saves (chunks unchanged last time hashed in place first)
  double first_written_frac = 0;
  double steady_written_frac = 0;
  preempt::SaveStats steady_stats;  // of the last steady save
};

// Unchanged chunks not rewritten (see the header). The sources are modified (trained tensors).
FrozenFigures RunFrozen(const Options& opt, const std::string& label, uint64_t total, const std::vector<uint64_t>& mix,
                        std::vector<HostBuffer>& src) {
  FrozenFigures f;
  std::error_code ec;
  const std::string root = opt.dir + "/frozen-" + label;
  std::filesystem::remove_all(root, ec);
  preempt::StoreOptions so;
  so.root = root;
  so.chunk_bytes = opt.chunk_bytes;
  so.queue_depth = opt.depth;
  so.io_backend = opt.backend;
  so.keep_last = 1000;  // no retention work inside the timed saves
  preempt::Store store(so);
  {  // engine setup outside the timed saves; the step is removed so the full save references nothing
    preempt::AlignedBuffer tiny(4096, true);
    preempt::SaveRequest warm;
    warm.step = 1;
    warm.items.push_back({"warmup", preempt::DType::kBytes, {}, tiny.data(), 4096});
    Check(store.save(std::move(warm)), "warm-up save");
    std::filesystem::remove_all(root + "/" + preempt::StepDirName(1), ec);
  }
  // The trained part: the small tensors at the end of the mix, up to 10 % of the bytes.
  size_t first_trained = mix.size();
  uint64_t trained = 0;
  while (first_trained > 0 && trained + mix[first_trained - 1] <= total / 10) trained += mix[--first_trained];
  f.trained_frac = static_cast<double>(trained) / total;
  preempt::SaveStats last;
  auto save = [&](int64_t step, double* written_frac) {
    for (size_t i = first_trained; i < mix.size(); ++i) Fill(src[i].data(), mix[i], 1000 * step + i);
    ::sync();
    auto h = store.save_async(MixRequest(step, mix, src));
    Check(h->wait(), "frozen save");
    const preempt::SaveStats st = h->stats();
    last = st;
    if (written_frac) *written_frac = static_cast<double>(st.written_bytes) / st.bytes;
    return st.total_s;
  };
  double full_frac = 0;
  f.full_s = save(100, &full_frac);
  if (full_frac < 0.999) Die("the full save referenced data");
  f.first_s = save(101, &f.first_written_frac);
  std::vector<double> steady_s, steady_frac;
  for (int rep = 0; rep < opt.reps + 2; ++rep) {
    double frac = 0;
    steady_s.push_back(save(102 + rep, &frac));
    steady_frac.push_back(frac);
  }
  f.steady_s = Median(steady_s);
  f.steady_stats = last;
  f.steady_written_frac = Median(steady_frac);
  // The last checkpoint reads back, references included, with every checksum checked.
  preempt::VerifyResult v;
  Check(preempt::Store::Verify(root + "/" + preempt::StepDirName(102 + opt.reps + 1), &v), "verify");
  if (!v.ok) Die("frozen checkpoint does not verify: " + v.problems[0]);
  std::filesystem::remove_all(root, ec);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = Parse(argc, argv);
  if (!std::getenv("PREEMPT_LOG_LEVEL")) preempt::SetLogLevel(preempt::LogLevel::kWarn);

  std::vector<uint64_t> totals;
  for (double g : opt.sizes_gib) totals.push_back(SizeBytes(g));

  if (!opt.mix_out.empty()) {
    std::ofstream f(opt.mix_out);
    f << "{";
    for (size_t s = 0; s < totals.size(); ++s) {
      f << (s ? ",\n" : "\n") << "  \"" << SizeLabel(totals[s]) << "\": [";
      auto mix = TensorMix(totals[s]);
      for (size_t i = 0; i < mix.size(); ++i) f << (i ? "," : "") << mix[i];
      f << "]";
    }
    f << "\n}\n";
    if (!f) Die("cannot write " + opt.mix_out);
    if (opt.mix_only) return 0;
  }

  std::error_code ec;
  std::filesystem::create_directories(opt.dir, ec);
  if (ec) Die("cannot create " + opt.dir + ": " + ec.message());

  JsonOut out;
  out.str("bench", "store");
  out.str("dir", opt.dir);
  out.str("backend_requested", opt.backend_name);
  out.num("chunk_bytes", static_cast<double>(opt.chunk_bytes));
  out.num("queue_depth", opt.depth);
  out.num("reps", opt.reps);
  std::string sizes_list;
  std::string cache_state = "cold";

  std::printf("%-8s %6s %10s %10s %10s %10s   %s\n", "size", "tensors", "memcpy", "save", "restore", "", "(GB/s; save = submit→durable COMMIT)");
  for (uint64_t total : totals) {
    const std::string label = SizeLabel(total);
    sizes_list += (sizes_list.empty() ? "" : ",") + label;
    const std::vector<uint64_t> mix = TensorMix(total);

    // Sources and restore targets: pre-allocated, pre-faulted, outside every timed region.
    std::vector<HostBuffer> src, dst;
    src.reserve(mix.size());
    dst.reserve(mix.size());
    for (size_t i = 0; i < mix.size(); ++i) {
      src.emplace_back(mix[i]);
      dst.emplace_back(mix[i]);
      Fill(src.back().data(), mix[i], i + 1);
    }
    auto name_of = [](size_t i) { return ItemName(i); };

    // Reference: a plain copy of the same bytes into pre-allocated memory.
    std::vector<double> copy_s;
    for (int r = 0; r < 3; ++r) {
      auto t0 = Clock::now();
      for (size_t i = 0; i < mix.size(); ++i) std::memcpy(dst[i].data(), src[i].data(), mix[i]);
      copy_s.push_back(Since(t0));
    }
    const double memcpy_s = *std::min_element(copy_s.begin(), copy_s.end());

    std::vector<double> save_s, save_write_s, save_sync_s, save_commit_s, restore_s;
    std::string backend, restore_backend;
    // One long-lived Store, as in a trainer. Its first save also sets up the I/O engine (staging
    // slots pre-faulted, io_uring created, buffers registered): done once here, untimed in the
    // save figure and reported as setup_s.
    const std::string root = opt.dir + "/store-" + label;
    std::filesystem::remove_all(root, ec);
    preempt::StoreOptions so;
    so.root = root;
    so.chunk_bytes = opt.chunk_bytes;
    so.queue_depth = opt.depth;
    so.io_backend = opt.backend;
    so.keep_last = 1000;  // no retention work inside the timed saves; old steps removed untimed
    preempt::Store store(so);
    double setup_s = 0;
    {
      preempt::AlignedBuffer tiny(4096, true);
      preempt::SaveRequest warm;
      warm.step = 1;
      warm.items.push_back({"warmup", preempt::DType::kBytes, {}, tiny.data(), 4096});
      auto t0 = Clock::now();
      Check(store.save(std::move(warm)), "warm-up save");
      setup_s = Since(t0);
      std::filesystem::remove_all(root + "/" + preempt::StepDirName(1), ec);
    }
    std::vector<double> queued_s, save_cpu_s, restore_cpu_s;
    for (int rep = 0; rep < opt.reps; ++rep) {
      if (rep > 0) std::filesystem::remove_all(root + "/" + preempt::StepDirName(100 + rep - 1), ec);
      ::sync();
      preempt::SaveRequest req = MixRequest(100 + rep, mix, src);
      const double cpu0 = CpuSeconds();
      auto t0 = Clock::now();
      auto h = store.save_async(std::move(req));
      Check(h->wait(), "save");
      const double wall = Since(t0);
      save_cpu_s.push_back(CpuSeconds() - cpu0);
      const preempt::SaveStats st = h->stats();
      save_s.push_back(std::max(wall, st.total_s));
      save_write_s.push_back(st.write_s);
      save_sync_s.push_back(st.sync_s);
      save_commit_s.push_back(st.commit_s);
      queued_s.push_back(st.queued_s);
      backend = st.backend;

      // Cold restore into the pre-allocated targets (scrubbed first so a no-op cannot pass).
      for (size_t i = 0; i < mix.size(); ++i) std::memset(dst[i].data(), 0, mix[i]);
      std::string why;
      if (!MakeCold(opt.cold, root, &why) && cache_state == "cold") {
        cache_state = "warm";
        std::fprintf(stderr, "bench_store: cannot make the cache cold (%s); restore figures are warm-cache\n", why.c_str());
      }
      std::vector<preempt::RestoreTarget> targets;
      for (size_t i = 0; i < mix.size(); ++i) {
        preempt::RestoreTarget t;
        t.name = name_of(i);
        t.data = dst[i].data();
        t.nbytes = mix[i];
        t.dtype = preempt::DType::kFloat32;
        t.shape = {static_cast<int64_t>(mix[i] / 4)};
        targets.push_back(std::move(t));
      }
      preempt::RestoreOptions ro;
      preempt::RestoreResult rr;
      const double cpu1 = CpuSeconds();
      auto t1 = Clock::now();
      Check(store.restore(targets, ro, &rr), "restore");
      restore_s.push_back(Since(t1));
      restore_cpu_s.push_back(CpuSeconds() - cpu1);
      restore_backend = rr.backend;
      for (size_t i = 0; i < mix.size(); ++i) {
        if (std::memcmp(dst[i].data(), src[i].data(), mix[i]) != 0) Die("restored bytes differ from the saved ones in " + name_of(i));
      }
    }
    std::filesystem::remove_all(root, ec);

    const double bytes = static_cast<double>(total);
    const double sv = Median(save_s), rs = Median(restore_s);
    out.num("bytes_" + label, bytes);
    out.num("tensors_" + label, static_cast<double>(mix.size()));
    out.num("memcpy_s_" + label, memcpy_s);
    out.num("memcpy_gbps_" + label, bytes / memcpy_s / 1e9);
    out.num("save_s_" + label, sv);
    out.num("save_gbps_" + label, bytes / sv / 1e9);
    out.num("save_write_s_" + label, Median(save_write_s));
    out.num("save_sync_s_" + label, Median(save_sync_s));
    out.num("save_commit_s_" + label, Median(save_commit_s));
    out.num("save_queued_s_" + label, Median(queued_s));
    out.num("setup_s_" + label, setup_s);
    out.num("save_cpu_s_" + label, Median(save_cpu_s));
    out.num("restore_s_" + label, rs);
    out.num("restore_cpu_s_" + label, Median(restore_cpu_s));
    out.num("restore_gbps_" + label, bytes / rs / 1e9);
    out.str("save_backend_" + label, backend);
    out.str("restore_backend_" + label, restore_backend);
    std::printf("%-8s %6zu %10.2f %10.2f %10.2f   save: write %.3f s, sync %.3f s, commit %.3f s, cpu %.3f s; %s; restore cpu %.3f s, %s (%s cache)\n",
                label.c_str(), mix.size(), bytes / memcpy_s / 1e9, bytes / sv / 1e9, bytes / rs / 1e9, Median(save_write_s),
                Median(save_sync_s), Median(save_commit_s), Median(save_cpu_s), backend.c_str(), Median(restore_cpu_s),
                restore_backend.c_str(), cache_state.c_str());
    std::fflush(stdout);

    const FrozenFigures fz = RunFrozen(opt, label, total, mix, src);
    out.num("frozen_trained_frac_" + label, fz.trained_frac);
    out.num("frozen_full_s_" + label, fz.full_s);
    out.num("frozen_first_s_" + label, fz.first_s);
    out.num("frozen_save_s_" + label, fz.steady_s);
    out.num("frozen_first_written_frac_" + label, fz.first_written_frac);
    out.num("frozen_written_frac_" + label, fz.steady_written_frac);
    out.num("frozen_speedup_" + label, fz.full_s / fz.steady_s);
    std::printf("%-8s frozen %.0f %%: full save %.3f s; unchanged chunks referenced: %.3f s (%.1f %% written, %.1fx faster), "
                "first after the full one %.3f s (%.1f %% written); steady: write %.3f s, sync %.3f s, commit %.3f s\n",
                label.c_str(), 100 * (1 - fz.trained_frac), fz.full_s, fz.steady_s, 100 * fz.steady_written_frac,
                fz.full_s / fz.steady_s, fz.first_s, 100 * fz.first_written_frac, fz.steady_stats.write_s,
                fz.steady_stats.sync_s, fz.steady_stats.commit_s);
    std::fflush(stdout);
  }
  out.str("sizes", sizes_list);
  out.str("restore_cache", cache_state == "cold" ? (opt.cold == "drop" ? "cold (drop_caches)" : "cold (files evicted)") : "warm");

  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    f << out.text();
    if (!f) Die("cannot write " + opt.json);
  }
  return 0;
}
