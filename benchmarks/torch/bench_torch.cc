// bench_torch — preempt::torch::TrainingState against the plain references, in one run.
//
//   bench_torch [--sizes 1,4] [--dir DIR] [--json PATH] [--quick] [--reps N] [--no-torch-save]
//               [--train-sizes 1,4] [--train-steps N] [--train-every K] [--train-rounds R] [--train-only]
//
// Each figure is the best of --reps repetitions (torch::save/load: one run each), with the
// median next to it.
//
// For each size (GiB of model + Adam state; --quick: 64 MiB):
//   copy      plain memcpy of the same tensors into pre-allocated, pre-faulted memory (the floor)
//   first     the first snapshot, taken after the plain copies, whose staging was being prepared
//             in the background since the layout was known (prepare_staging)
//   stall     TrainingState::snapshot() with warm staging: the part that blocks training
//   torch_save  torch::save(model) + torch::save(optimizer) to a file, + fsync (C++, pickle/zip)
//   persist   persist_async() submit → durable COMMIT through the Store
//   restore   TrainingState::restore() into the live tensors, and Store::restore of the same
//             checkpoint into pre-faulted buffers (the store's own speed), interleaved, page
//             cache dropped before each when allowed
//   torch_load  torch::load(model) + torch::load(optimizer) from the torch::save file
// Then, for each --train-sizes size, a training loop whose step computes longer than the copy
// (an MLP of 4096-wide layers with Adam; forward, backward, update on one intra-op thread, the
// trainer's loop with the update fence) runs with and without overlapped periodic checkpoints
// (every K steps), interleaved for R rounds: the stall per checkpoint (the copy before
// checkpoint_overlapped returns + before_update's wait) against a plain copy of the same state,
// the first checkpoint's stall, and the throughput overhead (median and spread of the rounds).
// Figures go to stdout and, with --json, to one JSON object with a "targets" list.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "preempt/buffer.h"
#include "preempt/store.h"
#include "preempt/torch/training_state.h"

namespace pt = preempt::torch;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

[[noreturn]] void Die(const std::string& m) {
  fprintf(stderr, "bench_torch: %s\n", m.c_str());
  exit(2);
}

struct Options {
  std::vector<double> sizes_gib{1, 4};
  std::string dir;
  std::string json;
  bool quick = false;
  int reps = 3;
  bool torch_save = true;
  std::vector<double> train_sizes_gib{0.25, 1};
  int train_steps = 12;
  int train_every = 4;
  int train_rounds = 3;
  bool train_only = false;
};

Options Parse(int argc, char** argv) {
  Options o;
  const char* env_dir = getenv("PREEMPT_BENCH_DIR");
  o.dir = std::string(env_dir ? env_dir : "/tmp/preempt-bench") + "/torch";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value after " + a);
      return argv[++i];
    };
    auto sizes = [&](std::vector<double>* out) {
      out->clear();
      std::stringstream ss(next());
      std::string tok;
      while (std::getline(ss, tok, ',')) {
        double v = std::atof(tok.c_str());
        if (!(v > 0) || v > 64) Die("bad " + a + " entry '" + tok + "' (GiB)");
        out->push_back(v);
      }
      if (out->empty()) Die(a + " is empty");
    };
    if (a == "--sizes") {
      sizes(&o.sizes_gib);
    } else if (a == "--train-sizes") {
      sizes(&o.train_sizes_gib);
    } else if (a == "--dir") {
      o.dir = next();
    } else if (a == "--json") {
      o.json = next();
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--train-only") {
      o.train_only = true;
    } else if (a == "--train-rounds") {
      o.train_rounds = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--no-torch-save") {
      o.torch_save = false;
    } else if (a == "--train-steps") {
      o.train_steps = std::max(2, std::atoi(next().c_str()));
      if (o.train_steps > 100000) Die("--train-steps is out of range");
    } else if (a == "--train-every") {
      o.train_every = std::max(1, std::atoi(next().c_str()));
    } else if (a == "-h" || a == "--help") {
      printf("usage: bench_torch [--sizes 1,4] [--dir DIR] [--json PATH] [--quick] [--reps N] [--no-torch-save]\n"
             "                   [--train-sizes 0.25,1] [--train-steps N] [--train-every K] [--train-rounds R]\n"
             "                   [--train-only]\n");
      exit(0);
    } else {
      Die("unknown argument " + a);
    }
  }
  if (o.quick) {
    o.sizes_gib = {1.0 / 16};
    o.reps = std::min(o.reps, 2);
    o.train_sizes_gib = {1.0 / 16};
    o.train_steps = 6;
    o.train_every = 3;
    o.train_rounds = 1;
  }
  return o;
}

std::string Label(double gib) {
  char b[32];
  if (gib >= 1 && gib == static_cast<int>(gib)) snprintf(b, sizeof b, "%dgib", static_cast<int>(gib));
  else snprintf(b, sizeof b, "%dmib", static_cast<int>(gib * 1024 + 0.5));
  return b;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
// Timings of a shared machine only ever get slower than the machine: take the best repetition,
// for preempt and for the references alike.
double Best(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

bool DropCaches() {
  sync();
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return false;
  bool ok = write(fd, "3", 1) == 1;
  close(fd);
  return ok;
}

void FsyncFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

// Parameters of `bytes / 3` (Adam adds exp_avg and exp_avg_sq) in 16 MiB .. 64 MiB tensors
// plus a few small ones (biases), like a transformer's mix.
struct BigModel : torch::nn::Module {
  explicit BigModel(uint64_t param_bytes) {
    const int64_t cols = 4096;
    uint64_t left = param_bytes;
    int i = 0;
    while (left >= 4096 * 4) {
      int64_t rows = std::min<int64_t>((i % 3 == 0 ? 4096 : 1024), static_cast<int64_t>(left / (cols * 4)));
      auto w = register_parameter("layer" + std::to_string(i) + "_weight",
                                  torch::full({rows, cols}, 0.01f * static_cast<float>(i + 1)));
      left -= static_cast<uint64_t>(rows * cols * 4);
      register_parameter("layer" + std::to_string(i) + "_bias", torch::zeros({cols}));
      ++i;
    }
  }
};

// The training loop's model: 4096-wide layers holding `param_bytes` of parameters; with Adam the
// state is three times that.
struct WideMlp : torch::nn::Module {
  explicit WideMlp(uint64_t param_bytes) {
    const int64_t width = 4096;
    const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(param_bytes / (width * width * 4)));
    for (int64_t i = 0; i < n; ++i)
      layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(width, width)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : layers) x = torch::relu(l(x));
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};

// Every tensor of a model and its Adam state (what a snapshot copies).
std::vector<at::Tensor> StateTensors(torch::nn::Module& model, torch::optim::Adam& adam) {
  std::vector<at::Tensor> ts;
  for (auto& p : model.parameters()) ts.push_back(p);
  for (auto& p : model.parameters()) {
    auto it = adam.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == adam.state().end()) continue;
    auto& s = static_cast<torch::optim::AdamParamState&>(*it->second);
    ts.push_back(s.exp_avg());
    ts.push_back(s.exp_avg_sq());
  }
  return ts;
}

// Seconds of one plain memcpy of `ts` into `dst` (pre-faulted, laid out like staging).
double PlainCopy(const std::vector<at::Tensor>& ts, preempt::AlignedBuffer& dst) {
  auto t0 = Clock::now();
  uint64_t off = 0;
  for (auto& t : ts) {
    size_t n = t.numel() * t.element_size();
    off = preempt::AlignUp(off, preempt::kIoAlignment);
    std::memcpy(dst.data() + off, t.data_ptr(), n);
    off += n;
  }
  return Since(t0);
}

struct Json {
  std::vector<std::pair<std::string, std::string>> kv;
  void num(const std::string& k, double v) {
    char b[64];
    snprintf(b, sizeof b, "%.6g", v);
    kv.emplace_back(k, b);
  }
  void str(const std::string& k, const std::string& v) { kv.emplace_back(k, "\"" + v + "\""); }
  void raw(const std::string& k, const std::string& v) { kv.emplace_back(k, v); }
  std::string dump() const {
    std::string s = "{\n";
    for (size_t i = 0; i < kv.size(); ++i)
      s += "  \"" + kv[i].first + "\": " + kv[i].second + (i + 1 < kv.size() ? ",\n" : "\n");
    return s + "}\n";
  }
};

struct Target {
  std::string name;
  double value;
  std::string text;
  bool pass;
};

std::string TargetsJson(const std::vector<Target>& ts) {
  std::string s = "[";
  for (size_t i = 0; i < ts.size(); ++i) {
    char b[512];
    snprintf(b, sizeof b, "%s{\"name\": \"%s\", \"value\": %.4g, \"target\": \"%s\", \"pass\": %s}", i ? ", " : "",
             ts[i].name.c_str(), ts[i].value, ts[i].text.c_str(), ts[i].pass ? "true" : "false");
    s += b;
  }
  return s + "]";
}

struct LoopRun {
  double secs = 0;                 // the timed steps
  std::vector<double> stalls_s;    // per checkpoint: checkpoint_overlapped() + before_update() wait
  int64_t taken = 0, skipped = 0;
  double copy_s = 0;               // a plain copy of the same state (measured once, with checkpoints)
  uint64_t bytes = 0;
};

// One run of the training loop: `steps` timed steps, after a first step that creates Adam's state
// and staging ready (the first snapshot's own cost is measured apart, in the size section).
LoopRun TrainLoop(const Options& opt, uint64_t param_bytes, bool checkpoint, const std::string& root) {
  torch::manual_seed(0);
  auto net = std::make_shared<WideMlp>(param_bytes);
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(1e-4));
  fs::remove_all(root);
  preempt::StoreOptions so;
  so.root = root;
  so.keep_last = 1;
  preempt::Store store(so);
  pt::TrainingStateOptions to;
  to.capture_rng = false;
  pt::TrainingState st(to);
  st.track("model", *net);
  st.track("optim", adam);
  auto x = torch::randn({4, 4096});
  auto step_fn = [&](double* fence_s) {
    adam.zero_grad();
    net->forward(x).pow(2).mean().backward();
    *fence_s = st.before_update();
    adam.step();
  };
  LoopRun r;
  double fence_s = 0;
  step_fn(&fence_s);
  // Staging is prepared in the background once (a one-off per run, amortized over a real run's
  // hours): the timed steps measure the steady state.
  if (checkpoint) st.reserve();
  r.bytes = st.state_bytes();
  double pending = -1;  // the stall of the checkpoint whose copy may still be running
  auto t0 = Clock::now();
  for (int s = 1; s <= opt.train_steps; ++s) {
    step_fn(&fence_s);
    if (pending >= 0) r.stalls_s.push_back(pending + fence_s);
    pending = -1;
    if (checkpoint && s % opt.train_every == 0) {
      auto c0 = Clock::now();
      const pt::CheckpointResult c = st.checkpoint_overlapped(store, s, pt::WhenBusy::kSkip);
      if (c.handle) {
        pending = Since(c0);
        ++r.taken;
      }
    }
  }
  r.secs = Since(t0);
  // A checkpoint at the last step has no next step to overlap with: its stall is not counted.
  (void)st.before_update();
  preempt::ThrowIfError(st.wait_all());
  r.skipped = st.stats().skipped;
  if (checkpoint) {
    const std::vector<at::Tensor> ts = StateTensors(*net, adam);
    preempt::AlignedBuffer dst(r.bytes + ts.size() * preempt::kIoAlignment, true);
    std::vector<double> cs;
    for (int i = 0; i < 3; ++i) cs.push_back(PlainCopy(ts, dst));
    r.copy_s = Median(cs);
  }
  return r;
}

// Interleaved rounds (without, with) cancel slow drift of a shared machine.
void RunTrainingLoop(const Options& opt, double gib, Json* j, std::vector<Target>* targets) {
  const std::string L = "train_" + Label(gib);
  const uint64_t param_bytes = static_cast<uint64_t>(gib * (1ull << 30) / 3);
  printf("== training loop %s: %d steps, overlapped checkpoint every %d, %d rounds\n", L.c_str(), opt.train_steps,
         opt.train_every, opt.train_rounds);
  fflush(stdout);
  const std::string root = opt.dir + "/ckpt-" + L;
  std::vector<double> ratios, stalls, firsts, copies, step_s;
  int64_t taken = 0, skipped = 0;
  uint64_t bytes = 0;
  for (int r = 0; r < opt.train_rounds; ++r) {
    const LoopRun off = TrainLoop(opt, param_bytes, false, root);
    const LoopRun on = TrainLoop(opt, param_bytes, true, root);
    ratios.push_back(off.secs / on.secs);  // throughput with / without
    step_s.push_back(off.secs / opt.train_steps);
    for (size_t i = 0; i < on.stalls_s.size(); ++i) (i == 0 ? firsts : stalls).push_back(on.stalls_s[i]);
    copies.push_back(on.copy_s);
    taken += on.taken;
    skipped += on.skipped;
    bytes = on.bytes;
    printf("  round %d: step %.3f s without / %.3f s with; stalls", r, off.secs / opt.train_steps,
           on.secs / opt.train_steps);
    for (double v : on.stalls_s) printf(" %.4f", v);
    printf(" s; plain copy %.4f s\n", on.copy_s);
    fflush(stdout);
  }
  fs::remove_all(root);
  const double copy = Median(copies), stall = Median(stalls), first = Median(firsts);
  const double overhead = 1.0 - Median(ratios);
  j->num(L + ".state_bytes", static_cast<double>(bytes));
  j->num(L + ".step_s", Median(step_s));
  j->num(L + ".copy_s", copy);
  j->num(L + ".stall_s_per_checkpoint", stall);
  j->num(L + ".stall_over_copy", stall / copy);
  j->num(L + ".first_stall_s", first);
  j->num(L + ".first_over_copy", first / copy);
  j->num(L + ".checkpoints", static_cast<double>(taken));
  j->num(L + ".skipped", static_cast<double>(skipped));
  j->num(L + ".overhead", overhead);
  j->num(L + ".rounds", opt.train_rounds);
  std::string rs = "[";
  for (size_t i = 0; i < ratios.size(); ++i) rs += (i ? ", " : "") + std::to_string(ratios[i]);
  j->raw(L + ".with_over_without", rs + "]");
  const auto mm = std::minmax_element(ratios.begin(), ratios.end());
  printf("  %s: state %.2f GiB, step %.3f s, plain copy %.4f s; stall per checkpoint %.4f s (%.3f x copy, median "
         "of %zu), first %.4f s (%.3f x copy); overhead %.2f %% (median of %d rounds, with/without %.3f..%.3f; "
         "%lld checkpoints, %lld skipped)\n",
         L.c_str(), bytes / 1073741824.0, Median(step_s), copy, stall, stall / copy, stalls.size(), first, first / copy,
         overhead * 100, opt.train_rounds, *mm.first, *mm.second, static_cast<long long>(taken),
         static_cast<long long>(skipped));
  if (!stalls.empty()) targets->push_back({L + " stall per checkpoint / copy", stall / copy, "<= 0.10", stall / copy <= 0.10});
  if (!firsts.empty()) targets->push_back({L + " first checkpoint stall / copy", first / copy, "<= 1.25", first / copy <= 1.25});
  targets->push_back({L + " throughput overhead", overhead, "<= 0.01", overhead <= 0.01});
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = Parse(argc, argv);
  torch::set_num_threads(1);
  fs::create_directories(opt.dir);
  Json j;
  std::vector<Target> targets;
  std::string sizes_str;
  for (double g : opt.sizes_gib) sizes_str += (sizes_str.empty() ? "" : ",") + Label(g);
  j.str("sizes", sizes_str);
  j.num("reps", opt.reps);

  for (double gib : opt.sizes_gib) {
    if (opt.train_only) break;
    const std::string L = Label(gib);
    const uint64_t total = static_cast<uint64_t>(gib * (1ull << 30));
    printf("== %s: model+Adam state %.2f GiB\n", L.c_str(), gib);
    fflush(stdout);

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
    pt::TrainingStateOptions so_state;
    so_state.staging_buffers = 1;  // snapshots and saves here take turns; keeps 4 GiB runs in memory
    pt::TrainingState state(so_state);
    state.track("model", *model);
    state.track("optim", adam);
    const uint64_t bytes = state.state_bytes();
    j.num(L + ".bytes", static_cast<double>(bytes));
    j.num(L + ".entries", static_cast<double>(state.entry_names().size()));

    // 1. + 2. plain copy into pre-allocated, pre-faulted memory (the same tensors, one memcpy
    // each) and the snapshot stall, interleaved so that both see the same machine. Staging is
    // prepared in the background from the moment the layout is known (as the runtime does after
    // the first step); the first snapshot comes after the plain copies and is reported apart.
    state.prepare_staging();
    const auto layout_known_at = Clock::now();
    std::vector<double> copy_s, stall_s;
    const std::vector<at::Tensor> ts = StateTensors(*model, adam);
    preempt::AlignedBuffer dst(bytes + ts.size() * preempt::kIoAlignment, true);  // freed before restore
    const int copy_reps = std::max(opt.reps, 5);
    for (int r = 0; r < copy_reps; ++r) copy_s.push_back(PlainCopy(ts, dst));
    {
      const double after_s = Since(layout_known_at);
      auto t0 = Clock::now();
      const pt::SnapshotResult first = state.snapshot(0);
      const double first_s = Since(t0);
      j.num(L + ".first_snapshot_s", first_s);
      j.num(L + ".first_snapshot_after_s", after_s);
      j.num(L + ".first_snapshot_over_copy", first_s / Median(copy_s));
      j.num(L + ".staging_wait_s", first.alloc_s);
      printf("  first snapshot      %8.3f s  (%.2f x median plain copy; %.1f s after the layout was known, %.3f s "
             "waiting for staging)\n", first_s, first_s / Median(copy_s), after_s, first.alloc_s);
      targets.push_back({L + " first snapshot / plain copy", first_s / Median(copy_s), "<= 1.25",
                         first_s / Median(copy_s) <= 1.25});
    }
    for (int r = 0; r < copy_reps; ++r) {
      copy_s.push_back(PlainCopy(ts, dst));
      auto t1 = Clock::now();
      state.snapshot(r + 1);
      stall_s.push_back(Since(t1));
    }
    dst = preempt::AlignedBuffer();
    const double copy = Best(copy_s);
    j.num(L + ".copy_s", copy);
    j.num(L + ".copy_s_median", Median(copy_s));
    j.num(L + ".stall_s_median", Median(stall_s));
    printf("  plain copy          %8.3f s  (%.2f GB/s; median %.3f s)\n", copy, bytes / copy / 1e9, Median(copy_s));

    // 4. persist: snapshot + submit -> durable COMMIT.
    std::vector<double> persist_s, persist_wall_s;
    std::string backend;
    for (int r = 0; r < opt.reps; ++r) {
      state.snapshot(100 + r);
      auto t1 = Clock::now();
      auto h = state.persist_async(store);
      preempt::ThrowIfError(h->wait());
      persist_wall_s.push_back(Since(t1));
      persist_s.push_back(h->stats().total_s);
      backend = h->stats().backend;
    }
    const double stall = Best(stall_s), persist = Best(persist_wall_s);
    j.num(L + ".stall_s", stall);
    j.num(L + ".stall_over_copy", stall / copy);
    j.num(L + ".persist_s", persist);
    j.num(L + ".persist_gbps", bytes / persist / 1e9);
    j.num(L + ".persist_store_total_s", Best(persist_s));
    j.str(L + ".backend", backend);
    printf("  snapshot stall      %8.3f s  (%.2f x plain copy; median %.3f s)\n", stall, stall / copy,
           Median(stall_s));
    printf("  persist (to COMMIT) %8.3f s  (%.2f GB/s, %s)\n", persist, bytes / persist / 1e9, backend.c_str());
    fflush(stdout);

    // 5. restore into the live tensors, interleaved with the store's own restore of the same
    // checkpoint into pre-faulted buffers.
    std::vector<double> restore_s, store_restore_s, store_plain_s;
    std::string cache = "warm";
    {
      std::vector<preempt::CheckpointInfo> cps;
      preempt::ThrowIfError(store.list(&cps));
      if (cps.empty()) Die("nothing to restore");
      preempt::CheckpointManifest man;
      preempt::ThrowIfError(preempt::Store::ReadManifest(cps.front().path, 0, &man));
      // Huge-page backed (AlignedBuffer) and allocated the way LibTorch's CPU allocator does
      // (64-byte aligned, 4 KiB pages), both pre-faulted.
      std::vector<preempt::AlignedBuffer> bufs;
      std::vector<at::Tensor> plain;
      std::vector<preempt::RestoreTarget> tgs, plain_tgs;
      const bool with_4k = bytes <= (1ull << 30);  // a third copy of the state: small sizes only
      for (const auto& t : man.tensors) {
        bufs.emplace_back(t.nbytes, /*prefault=*/true);
        plain.push_back(at::zeros({with_4k ? static_cast<int64_t>(t.nbytes) : 1}, at::kByte));
        preempt::RestoreTarget rt;
        rt.name = t.name;
        rt.dtype = t.dtype;
        rt.shape = t.shape;
        rt.data = bufs.back().data();
        rt.nbytes = t.nbytes;
        tgs.push_back(rt);
        rt.data = plain.back().data_ptr();
        plain_tgs.push_back(rt);
      }
      for (int r = 0; r < opt.reps; ++r) {
        if (DropCaches()) cache = "cold";
        auto t0 = Clock::now();
        auto step = state.restore(store);
        restore_s.push_back(Since(t0));
        if (!step) Die("restore found nothing");
        DropCaches();
        preempt::RestoreResult rr;
        auto t1 = Clock::now();
        preempt::ThrowIfError(store.restore(tgs, preempt::RestoreOptions(), &rr));
        store_restore_s.push_back(Since(t1));
        if (!with_4k) continue;
        DropCaches();
        auto t2 = Clock::now();
        preempt::ThrowIfError(store.restore(plain_tgs, preempt::RestoreOptions(), &rr));
        store_plain_s.push_back(Since(t2));
      }
    }
    const double restore = Best(restore_s), store_restore = Best(store_restore_s);
    j.num(L + ".restore_s", restore);
    j.num(L + ".restore_s_median", Median(restore_s));
    j.num(L + ".restore_gbps", bytes / restore / 1e9);
    j.num(L + ".store_restore_s", store_restore);
    j.num(L + ".store_restore_s_median", Median(store_restore_s));
    j.num(L + ".restore_over_store", store_restore / restore);
    j.str(L + ".restore_cache", cache);
    printf("  store restore (%s) %7.3f s  (%.2f GB/s; median %.3f s)\n", cache.c_str(), store_restore,
           bytes / store_restore / 1e9, Median(store_restore_s));
    if (!store_plain_s.empty()) {
      j.num(L + ".store_restore_4k_pages_s", Best(store_plain_s));
      printf("  store restore, 4 KiB-page targets %.3f s  (%.2f GB/s; median %.3f s)\n", Best(store_plain_s),
             bytes / Best(store_plain_s) / 1e9, Median(store_plain_s));
    }
    targets.push_back({L + " restore bandwidth / store's", store_restore / restore, ">= 0.9", store_restore / restore >= 0.9});
    printf("  restore (%s)      %8.3f s  (%.2f GB/s; median %.3f s)\n", cache.c_str(), restore, bytes / restore / 1e9,
           Median(restore_s));
    fflush(stdout);

    // 3. + 6. torch::save / torch::load (C++), the baselines.
    if (opt.torch_save) {
      const std::string mpath = opt.dir + "/torch-model-" + L + ".pt", opath = opt.dir + "/torch-optim-" + L + ".pt";
      auto t0 = Clock::now();
      torch::save(model, mpath);
      torch::save(adam, opath);
      const double save_nosync = Since(t0);
      FsyncFile(mpath);
      FsyncFile(opath);
      const double save = Since(t0);
      std::string lcache = DropCaches() ? "cold" : "warm";
      auto t1 = Clock::now();
      torch::load(model, mpath);
      torch::load(adam, opath);
      const double load = Since(t1);
      fs::remove(mpath);
      fs::remove(opath);
      j.num(L + ".torch_save_s", save_nosync);
      j.num(L + ".torch_save_fsync_s", save);
      j.num(L + ".torch_load_s", load);
      j.str(L + ".torch_load_cache", lcache);
      j.num(L + ".stall_vs_torch_save", save_nosync / stall);
      j.num(L + ".restore_vs_torch_load", load / restore);
      printf("  torch::save         %8.3f s  (+fsync %.3f s) -> stall is %.1f x lower\n", save_nosync, save,
             save_nosync / stall);
      printf("  torch::load (%s)  %8.3f s  -> restore is %.1f x faster\n", lcache.c_str(), load, load / restore);
      targets.push_back({L + " stall / plain copy", stall / copy, "<= 1.25", stall / copy <= 1.25});
      targets.push_back({L + " torch::save / stall", save_nosync / stall, ">= 20", save_nosync / stall >= 20});
      targets.push_back({L + " torch::load / restore", load / restore, ">= 5", load / restore >= 5});
    } else {
      targets.push_back({L + " stall / plain copy", stall / copy, "<= 1.25", stall / copy <= 1.25});
    }
    fflush(stdout);
    fs::remove_all(root);
  }

  // 7. the training loop with overlapped periodic checkpoints.
  for (double gib : opt.train_sizes_gib) RunTrainingLoop(opt, gib, &j, &targets);

  j.raw("targets", TargetsJson(targets));
  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    f << j.dump();
    if (!f) Die("cannot write " + opt.json);
  }
  for (const auto& t : targets)
    printf("  %-40s %8.4g  target %-8s %s\n", t.name.c_str(), t.value, t.text.c_str(), t.pass ? "PASS" : "MISS");
  return 0;
}
