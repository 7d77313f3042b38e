// bench_torch — preempt::torch::TrainingState against the plain references, in one run.
//
//   bench_torch [--sizes 1,4] [--dir DIR] [--json PATH] [--quick] [--reps N] [--no-torch-save]
//               [--cold drop|evict] [--train-sizes 1] [--train-interval-s S] [--train-rounds R]
//               [--train-only]
//
// For each size (GiB of model + Adam state; --quick: 64 MiB):
//   copy, first, stall, persist   the snapshot section (snapshot_section.cc): a plain memcpy of
//                                 the tensors (the floor), the first snapshot, the warm snapshot
//                                 stall (best of --reps), persist to a durable COMMIT (median)
//   torch::save                   the pickle/zip baseline of the stall, + fsync
//   restore section               (restore_section.cc) cold reads interleaved per repetition:
//                                 TrainingState::restore, Store::restore, torch::load, and plain
//                                 O_DIRECT / buffered reads of the same files; medians and
//                                 per-repetition ratios, with the ceiling the disk sets
// Then, for each --train-sizes size, the training loop with and without periodic overlapped
// checkpoints, and with a plain write of the same bytes (training_loop.cc): stall per
// checkpoint, and the throughput and CPU-time overhead per round (median and spread).
// Figures go to stdout and, with --json, to one JSON object with a "targets" list. With the
// defaults and --sizes 1,4 a run takes about 10 minutes.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "sections.h"

namespace bench_torch {
namespace {

namespace fs = std::filesystem;

void RunSize(const Options& opt, double gib, Report* out) {
  const std::string L = Label(gib);
  const uint64_t total = static_cast<uint64_t>(gib * (1ull << 30));
  std::printf("== %s: model+Adam state %.2f GiB\n", L.c_str(), gib);
  std::fflush(stdout);
  auto model = std::make_shared<BigModel>(total / 3);
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(1e-3));
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  adam.step();  // creates exp_avg / exp_avg_sq
  const std::string root = opt.dir + "/ckpt-" + L;
  fs::remove_all(root);
  preempt::StoreOptions so;
  so.root = root;
  so.keep_last = 1;
  preempt::Store store(so);
  preempt::torch::TrainingStateOptions to;
  to.staging_buffers = 1;  // snapshots and saves here take turns; keeps 4 GiB runs in memory
  preempt::torch::TrainingState state(to);
  state.track("model", *model);
  state.track("optim", adam);
  SizeCase c{L, state.state_bytes(), model, &adam, &store, &state};
  out->json.num(L + ".bytes", static_cast<double>(c.bytes));
  out->json.num(L + ".entries", static_cast<double>(state.entry_names().size()));
  const double stall_s = RunSnapshotSection(opt, c, out);
  RunRestoreSection(opt, c, stall_s, out);
  fs::remove_all(root);
}

}  // namespace
}  // namespace bench_torch

int main(int argc, char** argv) {
  using namespace bench_torch;
  const Options opt = Parse(argc, argv);
  torch::set_num_threads(1);
  std::filesystem::create_directories(opt.dir);
  Report out;
  std::string sizes;
  for (double g : opt.sizes_gib) sizes += (sizes.empty() ? "" : ",") + Label(g);
  out.json.str("sizes", sizes);
  out.json.num("reps", opt.reps);
  if (!opt.train_only) {
    for (double gib : opt.sizes_gib) RunSize(opt, gib, &out);
  }
  for (double gib : opt.train_sizes_gib) RunTrainingLoop(opt, gib, &out);
  out.json.raw("targets", TargetsJson(out.targets));
  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    f << out.json.dump();
    if (!f) {
      std::fprintf(stderr, "bench_torch: cannot write %s\n", opt.json.c_str());
      return 1;
    }
  }
  PrintTargets(out.targets);
  return 0;
}
