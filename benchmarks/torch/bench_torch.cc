// bench_torch — preempt::torch::TrainingState against the plain references, in one run.
//
//   bench_torch [--sizes 1,4] [--dir DIR] [--json PATH] [--quick] [--reps N] [--no-torch-save]
//               [--train-steps N] [--train-every K] [--train-rounds R] [--train-only]
//
// Each figure is the best of --reps repetitions (torch::save/load: one run each).
//
// For each size (GiB of model + Adam state; --quick: 64 MiB):
//   copy      plain memcpy of the same tensors into pre-allocated, pre-faulted memory (the floor)
//   stall     TrainingState::snapshot() with warm staging: the part that blocks training
//   torch_save  torch::save(model) + torch::save(optimizer) to a file, + fsync (C++, pickle/zip)
//   persist   persist_async() submit → durable COMMIT through the Store
//   restore   TrainingState::restore() into the live tensors (page cache dropped when allowed)
//   torch_load  torch::load(model) + torch::load(optimizer) from the torch::save file
// Then a training loop (an MLP with Adam, one intra-op thread) runs the same number of steps with
// and without periodic checkpoints (every K steps) and reports the throughput overhead.
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
  int train_steps = 200;
  int train_every = 100;
  int train_rounds = 5;
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
    if (a == "--sizes") {
      o.sizes_gib.clear();
      std::stringstream ss(next());
      std::string tok;
      while (std::getline(ss, tok, ',')) {
        double v = std::atof(tok.c_str());
        if (!(v > 0) || v > 64) Die("bad --sizes entry '" + tok + "' (GiB)");
        o.sizes_gib.push_back(v);
      }
      if (o.sizes_gib.empty()) Die("--sizes is empty");
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
    } else if (a == "--train-every") {
      o.train_every = std::max(1, std::atoi(next().c_str()));
    } else if (a == "-h" || a == "--help") {
      printf("usage: bench_torch [--sizes 1,4] [--dir DIR] [--json PATH] [--quick] [--reps N] [--no-torch-save]\n"
             "                   [--train-steps N] [--train-every K] [--train-rounds R] [--train-only]\n");
      exit(0);
    } else {
      Die("unknown argument " + a);
    }
  }
  if (o.quick) {
    o.sizes_gib = {1.0 / 16};
    o.reps = std::min(o.reps, 2);
    o.train_steps = 60;
    o.train_every = 20;
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

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(256, 512));
    fc2 = register_module("fc2", torch::nn::Linear(512, 512));
    fc3 = register_module("fc3", torch::nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

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
    pt::TrainingState state;  // two staging buffers, capture_rng
    state.track("model", *model);
    state.track("optim", adam);
    const uint64_t bytes = state.state_bytes();
    j.num(L + ".bytes", static_cast<double>(bytes));
    j.num(L + ".entries", static_cast<double>(state.entry_names().size()));

    // 1. + 2. plain copy into pre-allocated, pre-faulted memory (the same tensors, one memcpy
    // each) and the snapshot stall, interleaved so that both see the same machine. The first
    // snapshot allocates staging and is reported apart.
    {
      auto t0 = Clock::now();
      const pt::SnapshotResult first = state.snapshot(0);
      j.num(L + ".first_snapshot_s", Since(t0));
      j.num(L + ".staging_alloc_s", first.alloc_s);
    }
    std::vector<double> copy_s, stall_s;
    {
      std::vector<at::Tensor> ts;
      for (auto& p : model->parameters()) ts.push_back(p);
      for (auto& p : model->parameters()) {
        auto& s = static_cast<torch::optim::AdamParamState&>(
            *adam.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
        ts.push_back(s.exp_avg());
        ts.push_back(s.exp_avg_sq());
      }
      preempt::AlignedBuffer dst(bytes + ts.size() * preempt::kIoAlignment, true);
      const int copy_reps = std::max(opt.reps, 5);
      for (int r = 0; r < copy_reps; ++r) {
        auto t0 = Clock::now();
        uint64_t off = 0;
        for (auto& t : ts) {
          size_t n = t.numel() * t.element_size();
          off = preempt::AlignUp(off, preempt::kIoAlignment);
          std::memcpy(dst.data() + off, t.data_ptr(), n);
          off += n;
        }
        copy_s.push_back(Since(t0));
        auto t1 = Clock::now();
        state.snapshot(r + 1);
        stall_s.push_back(Since(t1));
      }
    }
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

    // 5. restore into the live tensors.
    std::vector<double> restore_s;
    std::string cache = "warm";
    for (int r = 0; r < opt.reps; ++r) {
      if (DropCaches()) cache = "cold";
      auto t0 = Clock::now();
      auto step = state.restore(store);
      restore_s.push_back(Since(t0));
      if (!step) Die("restore found nothing");
    }
    const double restore = Best(restore_s);
    j.num(L + ".restore_s", restore);
    j.num(L + ".restore_gbps", bytes / restore / 1e9);
    j.str(L + ".restore_cache", cache);
    printf("  restore (%s)      %8.3f s  (%.2f GB/s)\n", cache.c_str(), restore, bytes / restore / 1e9);
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

  // 7. periodic checkpoint overhead on a training loop.
  {
    printf("== training loop: %d steps, checkpoint every %d\n", opt.train_steps, opt.train_every);
    const std::string root = opt.dir + "/ckpt-train";
    fs::remove_all(root);
    uint64_t train_bytes = 0;
    auto run = [&](bool checkpoint, double* ckpt_stall_total, int64_t* taken, int64_t* skipped) {
      torch::manual_seed(0);
      auto net = std::make_shared<Mlp>();
      torch::optim::Adam o(net->parameters(), torch::optim::AdamOptions(1e-3));
      preempt::StoreOptions so;
      so.root = root;
      so.keep_last = 1;
      preempt::Store store(so);
      pt::TrainingState st;
      st.track("model", *net);
      st.track("optim", o);
      auto x = torch::randn({32, 256});
      auto y = torch::randint(0, 10, {32});
      *ckpt_stall_total = 0;
      *taken = 0;
      auto step_fn = [&] {
        o.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
        loss.backward();
        o.step();
      };
      for (int i = 0; i < 3; ++i) step_fn();  // warm-up (allocations, Adam state)
      if (checkpoint) st.reserve();
      train_bytes = st.state_bytes();
      auto t0 = Clock::now();
      for (int s = 1; s <= opt.train_steps; ++s) {
        step_fn();
        if (checkpoint && s % opt.train_every == 0) {
          const pt::CheckpointResult c = st.checkpoint_async(store, s, pt::WhenBusy::kSkip);
          if (c.handle) {
            *ckpt_stall_total += c.snapshot.stall_s;
            ++*taken;
          }
        }
      }
      double secs = Since(t0);
      preempt::ThrowIfError(st.wait_all());
      *skipped = st.stats().skipped;
      *ckpt_stall_total += 0;
      return opt.train_steps / secs;
    };
    // Interleaved rounds (without, with) cancel slow drift of a shared machine; the overhead is
    // 1 - median(with/without). The deterministic part, the stall, is reported as a fraction too.
    const int rounds = opt.train_rounds;
    std::vector<double> ratios, offs, ons, stall_fracs;
    double stall_total = 0;
    int64_t taken = 0, skipped = 0;
    for (int r = 0; r < rounds; ++r) {
      double off = run(false, &stall_total, &taken, &skipped);
      double on = run(true, &stall_total, &taken, &skipped);
      offs.push_back(off);
      ons.push_back(on);
      ratios.push_back(on / off);
      stall_fracs.push_back(stall_total * on / opt.train_steps);  // stall seconds / run seconds
    }
    const double off = Median(offs), on = Median(ons);
    const double overhead = 1.0 - Median(ratios);
    j.num("train.steps", opt.train_steps);
    j.num("train.every", opt.train_every);
    j.num("train.state_bytes", static_cast<double>(train_bytes));
    j.num("train.steps_per_s_without", off);
    j.num("train.steps_per_s_with", on);
    j.num("train.overhead", overhead);
    j.num("train.checkpoints", static_cast<double>(taken));
    j.num("train.skipped", static_cast<double>(skipped));
    j.num("train.stall_s_per_checkpoint", taken ? stall_total / taken : 0);
    j.num("train.stall_fraction", Median(stall_fracs));
    j.num("train.rounds", rounds);
    std::string rs = "[";
    for (size_t i = 0; i < ratios.size(); ++i) rs += (i ? ", " : "") + std::to_string(ratios[i]);
    j.raw("train.with_over_without", rs + "]");
    printf("  steps/s without %.2f, with %.2f -> overhead %.2f %% (median of %d rounds; %lld checkpoints/run, "
           "%lld skipped; stall %.4f %% of the run)\n", off, on, overhead * 100, rounds, static_cast<long long>(taken),
           static_cast<long long>(skipped), Median(stall_fracs) * 100);
    targets.push_back({"periodic checkpoint throughput overhead", overhead, "<= 0.01", overhead <= 0.01});
    fs::remove_all(root);
  }

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
