// bench_torch's restore section. A shared disk's speed drifts by 2-3x within minutes, so every
// repetition reads the same state five ways, cold, in a rotated order, and the figures are
// per-repetition ratios (medians and ranges) rather than ratios of numbers taken minutes apart:
//   restore      TrainingState::restore into the live tensors (preempt through the torch layer)
//   store        Store::restore of the same checkpoint into the same tensors (its own speed)
//   torch_load   torch::load(model) + torch::load(optimizer) from torch::save files of the state
//   direct_read  the checkpoint's files read with O_DIRECT, 4 MiB reads, as many in flight as
//                the store's restore keeps (StoreOptions::read_queue_depth; fio's way)
//   buffered_read  the torch::save files read through the page cache, one 4 MiB read at a time
// No reader gets the bytes off the disk faster than the fastest of these, so torch_load / restore
// is bounded by torch_load / the fastest read of the repetition (the "ceiling" printed with it).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

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

// The live tensors of a size case by checkpoint entry name ("model:<parameter>",
// "optim:state.<i>.<key>", the names TrackedModule and TrackedOptimizer give them).
std::map<std::string, at::Tensor> LiveTensors(const SizeCase& c) {
  std::map<std::string, at::Tensor> m;
  for (const auto& kv : c.model->named_parameters()) m["model:" + kv.key()] = kv.value();
  size_t i = 0;
  for (const auto& g : c.adam->param_groups()) {
    for (const auto& p : g.params()) {
      auto it = c.adam->state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (it != c.adam->state().end()) {
        auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
        m["optim:state." + std::to_string(i) + ".exp_avg"] = s.exp_avg();
        m["optim:state." + std::to_string(i) + ".exp_avg_sq"] = s.exp_avg_sq();
      }
      ++i;
    }
  }
  return m;
}

// Every entry of checkpoint manifest `man` as a restore target: the live tensor of the same name
// (the memory TrainingState::restore writes, so both restores write the same pages and no third
// copy of the state is held), an owned buffer for the small rest (optimizer records, blobs).
// Made again before each restore: TrainingState::restore may replace the optimizer's tensors.
std::vector<preempt::RestoreTarget> TargetsFor(const SizeCase& c, const preempt::CheckpointManifest& man) {
  const std::map<std::string, at::Tensor> live = LiveTensors(c);
  std::vector<preempt::RestoreTarget> targets;
  for (const auto& t : man.tensors) {
    preempt::RestoreTarget rt;
    rt.name = t.name;
    rt.dtype = t.dtype;
    rt.shape = t.shape;
    rt.nbytes = t.nbytes;
    auto it = live.find(t.name);
    if (it != live.end() && static_cast<uint64_t>(it->second.numel() * it->second.element_size()) == t.nbytes) {
      rt.data = it->second.data_ptr();
    } else {
      rt.owned = true;
    }
    targets.push_back(rt);
  }
  return targets;
}

struct Way {
  std::string name;
  std::function<void()> run;  // timed
  std::vector<double> secs;
  std::function<void()> prepare = [] {};  // before the cache is made cold; not timed
};

// Reads `files` start to end; returns the bytes read.
uint64_t PlainRead(const std::vector<std::string>& files, bool direct, int depth) {
  preempt_bench::PlainReadOptions po;
  po.direct = direct;
  po.depth = depth;
  uint64_t bytes = 0;
  std::string why;
  if (!preempt_bench::ReadFiles(files, po, &bytes, &why)) Die(why);
  return bytes;
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
  ratio("buffered_over_direct_read", "  buffered read time / O_DIRECT read time", 4, 2);
  // The ceiling of torch::load / restore: torch::load's time over the fastest cold read of the
  // same bytes in the same repetition (restore, the store's, plain O_DIRECT or buffered).
  std::vector<double> fastest(ways[0].secs.size());
  for (size_t r = 0; r < fastest.size(); ++r) {
    fastest[r] = std::min({ways[0].secs[r], ways[1].secs[r], ways[2].secs[r], ways[4].secs[r]});
  }
  const std::vector<double> ceiling = Ratios(ways[3].secs, fastest);
  out->json.num(L + ".torch_load_ceiling", Median(ceiling));
  out->json.list(L + ".torch_load_ceiling_reps", ceiling);
  std::printf("  %-44s %6.2f  (per rep %.2f .. %.2f)\n", "  ceiling: torch::load time / fastest read's", Median(ceiling),
              Min(ceiling), Max(ceiling));
  char name[96];
  std::snprintf(name, sizeof name, "%s torch::load / restore (ceiling %.2f)", L.c_str(), Median(ceiling));
  out->targets.push_back({name, vs_load, ">= 5", vs_load >= 5});
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
  std::vector<preempt::CheckpointInfo> cps;
  preempt::ThrowIfError(c.store->list(&cps));
  if (cps.empty()) Die("nothing to restore");
  preempt::CheckpointManifest man;
  preempt::ThrowIfError(preempt::Store::ReadManifest(cps.front().path, 0, &man));
  // Every file under the root: the newest checkpoint's and those of older steps whose chunks it
  // references (retention keeps only those), the bytes a restore reads.
  const std::vector<std::string> ckpt_files = preempt_bench::FilesUnder(c.store->options().root);
  std::vector<preempt::RestoreTarget> targets;
  std::vector<Way> ways;
  ways.push_back({"restore", [&] {
                    if (!c.state->restore(*c.store)) Die("restore found nothing");
                  }, {}});
  ways.push_back({"store_restore", [&] {
                    preempt::RestoreResult rr;
                    preempt::ThrowIfError(c.store->restore(targets, preempt::RestoreOptions(), &rr));
                  }, {}, [&] { targets = TargetsFor(c, man); }});
  const int depth = c.store->options().read_queue_depth;
  uint64_t direct_bytes = 0;
  ways.push_back({"direct_read", [&] { direct_bytes = PlainRead(ckpt_files, true, depth); }, {}});
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
      w.prepare();
      std::string why;
      if (!preempt_bench::MakeCold(opt.cold, opt.dir, &why)) cache = "warm";
      const auto t0 = Clock::now();
      w.run();
      w.secs.push_back(Since(t0));
    }
  }
  out->json.num(L + ".direct_read_bytes", static_cast<double>(direct_bytes));
  std::printf("  direct_read: %.1f MiB in %zu files under the store root, %d reads in flight\n",
              direct_bytes / 1048576.0, ckpt_files.size(), depth);
  Summarize(opt, c, ways, cache, out);
  fs::remove(mpath);
  fs::remove(opath);
  std::fflush(stdout);
}

}  // namespace bench_torch
