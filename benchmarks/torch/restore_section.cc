// bench_torch's restore section. A shared disk's speed drifts by 2-3x within minutes, so every
// repetition reads the same state five ways, cold, in a rotated order, and the figures are
// per-repetition ratios (medians and ranges) rather than ratios of numbers taken minutes apart:
//   restore      TrainingState::restore into the live tensors (preempt through the torch layer)
//   store        Store::restore of the same checkpoint into pre-faulted buffers (its own speed)
//   torch_load   torch::load(model) + torch::load(optimizer) from torch::save files of the state
//   direct_read  the checkpoint's files read with O_DIRECT, 4 MiB reads, as many in flight as
//                the store's restore keeps (StoreOptions::read_queue_depth; fio's way)
//   buffered_read  the torch::save files read through the page cache, one 4 MiB read at a time
// torch::load cannot read faster than buffered_read and restore not faster than direct_read, so
// torch_load / restore is bounded by torch_load / direct_read (the "ceiling" printed with it).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "disk_read.h"
#include "sections.h"

namespace bench_torch {
namespace {

namespace fs = std::filesystem;

void FsyncFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

[[noreturn]] void Die(const std::string& m) {
  std::fprintf(stderr, "bench_torch: %s\n", m.c_str());
  std::exit(1);
}

// Pre-faulted buffers for every entry of the newest checkpoint, as restore targets.
struct StoreTargets {
  std::vector<preempt::AlignedBuffer> bufs;
  std::vector<preempt::RestoreTarget> targets;
  std::string dir;  // the checkpoint directory
};

StoreTargets TargetsFor(preempt::Store& store) {
  std::vector<preempt::CheckpointInfo> cps;
  preempt::ThrowIfError(store.list(&cps));
  if (cps.empty()) Die("nothing to restore");
  preempt::CheckpointManifest man;
  preempt::ThrowIfError(preempt::Store::ReadManifest(cps.front().path, 0, &man));
  StoreTargets st;
  st.dir = cps.front().path;
  for (const auto& t : man.tensors) {
    st.bufs.emplace_back(t.nbytes, /*prefault=*/true);
    preempt::RestoreTarget rt;
    rt.name = t.name;
    rt.dtype = t.dtype;
    rt.shape = t.shape;
    rt.data = st.bufs.back().data();
    rt.nbytes = t.nbytes;
    st.targets.push_back(rt);
  }
  return st;
}

struct Way {
  std::string name;
  std::function<void()> run;
  std::vector<double> secs;
};

double PlainRead(const std::vector<std::string>& files, bool direct, int depth) {
  preempt_bench::PlainReadOptions po;
  po.direct = direct;
  po.depth = depth;
  uint64_t bytes = 0;
  std::string why;
  const auto t0 = Clock::now();
  if (!preempt_bench::ReadFiles(files, po, &bytes, &why)) Die(why);
  return Since(t0);
}

// Per-repetition ratios a[i] / b[i].
std::vector<double> Ratios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  return r;
}

void Summarize(const Options& opt, const SizeCase& c, const std::vector<Way>& ways, const std::string& cache,
               Report* out) {
  const std::string& L = c.label;
  for (const auto& w : ways) {
    out->json.num(L + "." + w.name + "_s", Median(w.secs));
    out->json.list(L + "." + w.name + "_s_reps", w.secs);
    std::printf("  %-14s (%s) median %7.3f s  (%.2f GB/s; %.3f .. %.3f s)\n", w.name.c_str(), cache.c_str(),
                Median(w.secs), c.bytes / Median(w.secs) / 1e9, Min(w.secs), Max(w.secs));
  }
  out->json.str(L + ".restore_cache", cache);
  out->json.num(L + ".restore_gbps", c.bytes / Median(ways[0].secs) / 1e9);
  auto ratio = [&](const std::string& key, const std::string& what, size_t a, size_t b) {
    const std::vector<double> r = Ratios(ways[a].secs, ways[b].secs);
    out->json.num(L + "." + key, Median(r));
    out->json.list(L + "." + key + "_reps", r);
    std::printf("  %-44s %6.2f  (per rep %.2f .. %.2f)\n", what.c_str(), Median(r), Min(r), Max(r));
    return Median(r);
  };
  const double vs_store = ratio("restore_over_store", "restore bandwidth / store's", 1, 0);
  const double vs_disk = ratio("restore_over_direct_read", "restore bandwidth / plain O_DIRECT read's", 2, 0);
  ratio("store_over_direct_read", "store restore bandwidth / plain O_DIRECT read's", 2, 1);
  out->targets.push_back({L + " restore bandwidth / store's", vs_store, ">= 0.9", vs_store >= 0.9});
  out->targets.push_back({L + " restore bandwidth / O_DIRECT read's", vs_disk, ">= 0.8", vs_disk >= 0.8});
  if (!opt.torch_save) return;
  const double vs_load = ratio("restore_vs_torch_load", "torch::load time / restore time", 3, 0);
  const double ceiling = ratio("torch_load_over_direct_read", "  ceiling: torch::load time / O_DIRECT read time", 3, 2);
  ratio("buffered_over_direct_read", "  buffered read time / O_DIRECT read time", 4, 2);
  out->targets.push_back({L + " torch::load / restore (ceiling " + std::to_string(ceiling).substr(0, 4) + ")", vs_load,
                          ">= 5", vs_load >= 5});
}

}  // namespace

void RunRestoreSection(const Options& opt, SizeCase& c, double stall_s, Report* out) {
  const std::string& L = c.label;
  const std::string mpath = opt.dir + "/torch-model-" + L + ".pt", opath = opt.dir + "/torch-optim-" + L + ".pt";
  if (opt.torch_save) {
    const auto t0 = Clock::now();
    torch::save(c.model, mpath);
    torch::save(*c.adam, opath);
    const double save_s = Since(t0);
    FsyncFile(mpath);
    FsyncFile(opath);
    out->json.num(L + ".torch_save_s", save_s);
    out->json.num(L + ".torch_save_fsync_s", Since(t0));
    out->json.num(L + ".stall_vs_torch_save", save_s / stall_s);
    std::printf("  torch::save         %8.3f s  (+fsync %.3f s) -> the snapshot stall is %.1f x lower\n", save_s,
                Since(t0), save_s / stall_s);
    out->targets.push_back({L + " torch::save / stall", save_s / stall_s, ">= 20", save_s / stall_s >= 20});
  }
  StoreTargets st = TargetsFor(*c.store);
  const std::vector<std::string> ckpt_files = preempt_bench::FilesUnder(st.dir);
  std::vector<Way> ways;
  ways.push_back({"restore", [&] {
                    if (!c.state->restore(*c.store)) Die("restore found nothing");
                  }, {}});
  ways.push_back({"store_restore", [&] {
                    preempt::RestoreResult rr;
                    preempt::ThrowIfError(c.store->restore(st.targets, preempt::RestoreOptions(), &rr));
                  }, {}});
  const int depth = c.store->options().read_queue_depth;
  ways.push_back({"direct_read", [&] { PlainRead(ckpt_files, true, depth); }, {}});
  if (opt.torch_save) {
    ways.push_back({"torch_load", [&] {
                      torch::load(c.model, mpath);
                      torch::load(*c.adam, opath);
                    }, {}});
    ways.push_back({"buffered_read", [&] { PlainRead({mpath, opath}, false, 1); }, {}});
  }
  std::string cache = "cold";
  for (int r = 0; r < opt.reps; ++r) {
    for (size_t k = 0; k < ways.size(); ++k) {
      Way& w = ways[(k + r) % ways.size()];
      std::string why;
      if (!preempt_bench::MakeCold(opt.cold, opt.dir, &why)) cache = "warm";
      const auto t0 = Clock::now();
      w.run();
      w.secs.push_back(Since(t0));
    }
  }
  Summarize(opt, c, ways, cache, out);
  fs::remove(mpath);
  fs::remove(opath);
  std::fflush(stdout);
}

}  // namespace bench_torch
