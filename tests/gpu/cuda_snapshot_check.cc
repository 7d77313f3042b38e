// cuda_snapshot_check — the torch layer's CUDA paths (preempt/torch/training_state.h) on one GPU.
//
//   cuda_snapshot_check [--device cuda|cpu] [--dir DIR] [--figures MIB|0]
//
// Checks, one line each (exit 0 all passed, 1 a check failed, 77 no usable GPU: ctest skips):
// 1. round trip: a model with buffers and dropout plus Adam on the device, checkpoint_async,
//    restore into a fresh model and optimizer (whose Adam state does not exist yet): every
//    parameter, buffer and optimizer tensor bitwise, restored tensors on the device;
// 2. overlapped, staging cold and prepared: checkpoint_overlapped at step k, then the next step's
//    forward pass (batch-norm statistics change at once), before_update(), the update and a 256 MiB
//    tensor overwritten on the current stream right after the fence: the checkpoint holds the
//    state after step k;
// 3. exact resume: k steps, checkpoint, everything rebuilt and restored (CPU and CUDA generators
//    included: data and dropout), continued to N; final state bitwise equal to an uninterrupted
//    run (deterministic algorithms, CUBLAS_WORKSPACE_CONFIG=:4096:8).
// Then, with --figures MIB (default 1024 on cuda, 0 = none): a training loop whose parameters
// hold MIB MiB (Adam: three times that in the checkpoint) prints the step time, a plain copy of the
// state into pinned host memory, and what checkpoint_async and checkpoint_overlapped add to the
// step that takes them, the first checkpoint's stall, and the save's bandwidth (medians).
// `--device cpu` runs the same code on the CPU (a check of this program where no GPU is).
// scripts/gpu-check.sh builds and runs it.
#include <execinfo.h>
#include <ftw.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "preempt/store.h"
#include "preempt/torch/training_state.h"
#include "torch/optimizer_kinds.h"  // StateKey

namespace pt = preempt::torch;

namespace {

constexpr int kSkip = 77;
int failures = 0;
torch::Device device = torch::kCPU;

bool Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
  return ok;
}

// Runs one check; an exception is a failed check, named.
void Guarded(const std::string& what, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    Check(false, what + ": exception: " + e.what());
  }
}

void Sync() {
  if (device.is_cuda()) torch::cuda::synchronize();
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

bool BitEqual(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor x = a.detach().contiguous().cpu(), y = b.detach().contiguous().cpu();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 64));
    bn = register_module("bn", torch::nn::BatchNorm1d(64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 8));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn(fc1(x)));
    x = torch::dropout(x, 0.2, is_training());
    return fc2(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(Net);

// A model, its optimizer and a large tensor the overlapped check overwrites after the fence.
struct Seeded {
  explicit Seeded(uint64_t seed) { torch::manual_seed(seed); }
};

struct Trainer {
  explicit Trainer(uint64_t seed, int64_t big_numel = 0) : seeded(seed) {
    net->to(device);
    opt = std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-2));
    if (big_numel > 0) {
      big = torch::randn({big_numel}).to(device);
      extra.register_parameter("big", big, /*requires_grad=*/false);
    }
  }
  // Data from the default CPU generator (restored with the checkpoint), moved to the device.
  std::pair<torch::Tensor, torch::Tensor> batch() {
    auto x = torch::randn({64, 32});
    auto y = torch::randn({64, 8});
    return {x.to(device), y.to(device)};
  }
  void forward_backward() {
    auto [x, y] = batch();
    opt->zero_grad();
    torch::mse_loss(net->forward(x), y).backward();
  }
  void step() {
    forward_backward();
    opt->step();
  }
  void track(pt::TrainingState& s) {
    s.track("model", net);
    s.track("optim", *opt);
    if (big.defined()) s.track("extra", extra);
  }
  // Parameters, buffers, the large tensor, and Adam's step and moments per parameter.
  std::vector<at::Tensor> state() {
    std::vector<at::Tensor> out;
    for (auto& t : net->parameters()) out.push_back(t.detach().clone());
    for (auto& t : net->buffers()) out.push_back(t.detach().clone());
    if (big.defined()) out.push_back(big.detach().clone());
    auto& st = opt->state();
    for (auto& p : net->parameters()) {
      auto it = st.find(pt::internal::StateKey<decltype(st)>(p));
      if (it == st.end()) {
        out.push_back(at::Tensor());
        continue;
      }
      auto& a = static_cast<torch::optim::AdamParamState&>(*it->second);
      out.push_back(torch::tensor(a.step()));
      out.push_back(a.exp_avg().detach().clone());
      out.push_back(a.exp_avg_sq().detach().clone());
    }
    return out;
  }
  bool on_device() {
    for (auto& t : net->parameters())
      if (t.device() != device) return false;
    for (auto& [key, s] : opt->state()) {
      (void)key;
      auto& a = static_cast<torch::optim::AdamParamState&>(*s);
      if (a.exp_avg().device() != device || a.exp_avg_sq().device() != device) return false;
    }
    return true;
  }
  Seeded seeded;  // before the model: its initial weights come from the seed
  Net net;
  std::unique_ptr<torch::optim::Adam> opt;
  torch::nn::Module extra;
  torch::Tensor big;
};

std::string dir_root;

preempt::StoreOptions StoreAt(const std::string& name, int keep_last = 2) {
  preempt::StoreOptions o;
  o.root = dir_root + "/" + name;
  o.keep_last = keep_last;
  return o;
}

bool AllBitEqual(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, std::string* first_diff) {
  if (got.size() != want.size()) {
    *first_diff = "sizes " + std::to_string(got.size()) + " != " + std::to_string(want.size());
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (!BitEqual(got[i], want[i])) {
      *first_diff = "tensor " + std::to_string(i);
      return false;
    }
  return true;
}

void RoundTrip() {
  preempt::Store store(StoreAt("roundtrip"));
  Trainer a(11);
  for (int i = 0; i < 3; ++i) a.step();
  pt::TrainingState sa;
  a.track(sa);
  const std::vector<at::Tensor> want = a.state();
  pt::CheckpointResult c = sa.checkpoint_async(store, 3);
  Check(c.handle && c.handle->wait().ok(), "round trip: checkpoint_async commits");
  Trainer b(12);  // fresh: different weights, no Adam state yet
  pt::TrainingState sb;
  b.track(sb);
  auto step = sb.restore(store);
  Check(step && *step == 3, "round trip: restore returns the step");
  std::string diff;
  Check(AllBitEqual(b.state(), want, &diff), "round trip: parameters, buffers, Adam step and moments bitwise " + diff);
  Check(b.on_device(), "round trip: restored parameters and Adam state are on " + device.str());
  b.step();  // the restored optimizer state is usable on the device
  Sync();
  Check(true, "round trip: a step after restore runs");
}

void Overlapped(bool prepared) {
  const std::string what = std::string("overlapped (staging ") + (prepared ? "prepared" : "cold") + "): ";
  preempt::Store store(StoreAt(prepared ? "overlapped-prepared" : "overlapped-cold"));
  Trainer a(21, /*big_numel=*/64 << 20);  // 256 MiB: its copy is still running after the call
  for (int i = 0; i < 3; ++i) a.step();
  pt::TrainingState sa;
  a.track(sa);
  if (prepared) sa.reserve();
  Sync();
  const std::vector<at::Tensor> want = a.state();
  pt::CheckpointResult c = sa.checkpoint_overlapped(store, 3);
  Check(c.handle && c.snapshot.overlapped, what + "checkpoint_overlapped returns an overlapped snapshot");
  std::printf("     stall %.4f s of which alloc %.4f s, %.1f MiB\n", c.snapshot.stall_s, c.snapshot.alloc_s,
              c.snapshot.bytes / 1048576.0);
  a.forward_backward();  // the batch-norm running statistics change now
  sa.before_update();
  a.opt->step();
  {
    torch::NoGradGuard no_grad;
    a.big.fill_(-1);  // queued on the current stream right after the fence
    for (auto& p : a.net->parameters()) p.add_(1000);
  }
  Check(c.handle->wait().ok(), what + "the save commits");
  Trainer b(22, 64 << 20);
  pt::TrainingState sb;
  b.track(sb);
  auto step = sb.restore(store);
  Check(step && *step == 3, what + "restore returns the step");
  std::string diff;
  Check(AllBitEqual(b.state(), want, &diff), what + "the checkpoint holds the state after its step " + diff);
  Check(sa.wait_all().ok(), what + "wait_all");
}

std::vector<at::Tensor> TrainTo(int total, int stop_at, const std::string& store_name) {
  Trainer a(31);
  if (stop_at < 0) {
    for (int i = 0; i < total; ++i) a.step();
    Sync();
    return a.state();
  }
  {
    preempt::Store store(StoreAt(store_name));
    pt::TrainingState sa;
    a.track(sa);
    for (int i = 0; i < stop_at; ++i) a.step();
    pt::CheckpointResult c = sa.checkpoint_in_place(store, stop_at);
    if (!c.handle || !c.handle->wait().ok()) throw std::runtime_error("stop checkpoint failed");
  }
  Trainer b(32);
  {
    torch::NoGradGuard no_grad;
    for (int i = 0; i < 5; ++i) torch::randn({7}).to(device);  // move both generators away
    torch::dropout(torch::ones({64}, torch::TensorOptions().device(device)), 0.5, true);
  }
  preempt::Store store(StoreAt(store_name));
  pt::TrainingState sb;
  b.track(sb);
  auto step = sb.restore(store);
  if (!step || *step != stop_at) throw std::runtime_error("restore did not return the stop step");
  for (int i = stop_at; i < total; ++i) b.step();
  Sync();
  return b.state();
}

void ExactResume() {
  const std::vector<at::Tensor> ref = TrainTo(20, -1, "");
  const std::vector<at::Tensor> again = TrainTo(20, -1, "");
  std::string diff;
  if (!Check(AllBitEqual(again, ref, &diff), "exact resume: two uninterrupted runs agree (determinism) " + diff)) return;
  const std::vector<at::Tensor> resumed = TrainTo(20, 9, "resume");
  Check(AllBitEqual(resumed, ref, &diff), "exact resume: stopped at 9, restored, continued to 20: bitwise " + diff);
}

// ---- figures ----------------------------------------------------------------------------------

struct BigModel {
  explicit BigModel(int64_t param_mib) {
    torch::manual_seed(41);
    if (!device.is_cuda()) batch = 64;  // a check of the code, not a figure
    const int64_t width = 4096, layer_mib = width * width * 4 / 1048576;
    const int64_t layers = std::max<int64_t>(1, param_mib / layer_mib);
    for (int64_t i = 0; i < layers; ++i) {
      seq->push_back(torch::nn::Linear(torch::nn::LinearOptions(width, width).bias(false)));
      seq->push_back(torch::nn::Functional(torch::relu));
    }
    seq->to(device);
    opt = std::make_unique<torch::optim::Adam>(seq->parameters(), torch::optim::AdamOptions(1e-5));
    x = torch::randn({batch, width}).to(device);
  }
  void forward_backward() {
    opt->zero_grad();
    seq->forward(x).square().mean().backward();
  }
  void step() {
    forward_backward();
    opt->step();
  }
  std::vector<at::Tensor> tensors() {
    std::vector<at::Tensor> out;
    for (auto& p : seq->parameters()) out.push_back(p);
    for (auto& [key, s] : opt->state()) {
      (void)key;
      auto& a = static_cast<torch::optim::AdamParamState&>(*s);
      out.push_back(a.exp_avg());
      out.push_back(a.exp_avg_sq());
    }
    return out;
  }
  int64_t batch = 8192;
  torch::nn::Sequential seq;
  std::unique_ptr<torch::optim::Adam> opt;
  torch::Tensor x;
};

void Mark(const char* what) {
  std::printf("     %s\n", what);
  std::fflush(stdout);
}

void Figures(int64_t param_mib) {
  // Held by pointers and released one by one below, each named first: a crash on teardown
  // (seen once on a GPU) shows which object it came from.
  auto model = std::make_unique<BigModel>(param_mib);
  auto store_ptr = std::make_unique<preempt::Store>(StoreAt("figures", 1));
  auto state = std::make_unique<pt::TrainingState>();
  BigModel& m = *model;
  preempt::Store& store = *store_ptr;
  pt::TrainingState& s = *state;
  s.track("model", *m.seq);
  s.track("optim", *m.opt);
  m.step();  // Adam's state exists from here
  Sync();
  const double prepare_at = Now();
  s.prepare_staging();  // what the runtime does after the first step
  const double state_gib = s.state_bytes() / 1073741824.0;

  auto timed_step = [&](const std::function<void()>& before) {
    const double t0 = Now();
    if (before) before();
    m.step();
    Sync();
    return Now() - t0;
  };
  for (int i = 0; i < 2; ++i) timed_step(nullptr);  // warm-up
  // The first checkpoint, once the staging prepared in the background since the first step is
  // ready (the runtime's first periodic checkpoint comes hundreds of steps later).
  s.reserve();
  const double prepare_s = Now() - prepare_at;
  const double first_stall = timed_step([&] {
    pt::CheckpointResult c = s.checkpoint_async(store, 100);
    (void)c;
  });
  if (!s.wait_all().ok()) throw std::runtime_error("first save failed");

  // A plain copy of the state into pinned host memory (what the stall is measured against).
  std::vector<at::Tensor> live = m.tensors(), host;
  for (auto& t : live)
    host.push_back(torch::empty(t.sizes(), torch::TensorOptions().dtype(t.dtype()).pinned_memory(device.is_cuda())));
  std::vector<double> plain, base, sync_ckpt, overlapped, save_s;
  const int reps = 5;
  for (int r = 0; r < reps; ++r) {
    Sync();
    double t0 = Now();
    for (size_t i = 0; i < live.size(); ++i) host[i].copy_(live[i], /*non_blocking=*/true);
    Sync();
    plain.push_back(Now() - t0);
    base.push_back(timed_step(nullptr));
    base.push_back(timed_step(nullptr));
    std::shared_ptr<preempt::SaveHandle> h;
    t0 = Now();
    sync_ckpt.push_back(timed_step([&] { h = s.checkpoint_async(store, 200 + 2 * r).handle; }));
    if (!h || !h->wait().ok()) throw std::runtime_error("checkpoint_async save failed");
    save_s.push_back(Now() - t0);  // from the call to the commit (the save runs beside the step)
    base.push_back(timed_step(nullptr));
    // Overlapped: the call, then the step whose update waits (on the GPU) for the copies.
    const double t1 = Now();
    pt::CheckpointResult c = s.checkpoint_overlapped(store, 201 + 2 * r);
    m.forward_backward();
    s.before_update();
    m.opt->step();
    Sync();
    overlapped.push_back(Now() - t1);
    if (!c.handle || !c.handle->wait().ok()) throw std::runtime_error("overlapped save failed");
  }
  const double step = Median(base), copy = Median(plain);
  const double sync_extra = Median(sync_ckpt) - step, over_extra = Median(overlapped) - step;
  std::printf("figure state %.2f GiB (params %lld MiB + Adam), batch %lld, %s\n", state_gib,
              static_cast<long long>(param_mib), static_cast<long long>(m.batch), device.str().c_str());
  std::printf("figure step_s %.4f (median of %zu; min %.4f max %.4f)\n", step, base.size(),
              *std::min_element(base.begin(), base.end()), *std::max_element(base.begin(), base.end()));
  std::printf("figure plain_copy_s %.4f (%.1f GB/s device to pinned host)\n", copy,
              s.state_bytes() / copy / 1e9);
  std::printf("figure checkpoint_async_extra_s %.4f (%.2fx plain copy)\n", sync_extra, sync_extra / copy);
  std::printf("figure checkpoint_overlapped_extra_s %.4f (%.3fx plain copy; target <= 0.10 when step > copy)\n",
              over_extra, over_extra / copy);
  std::printf("figure staging_prepare_s %.3f (background, from the end of the first step)\n", prepare_s);
  std::printf("figure first_checkpoint_extra_s %.4f (%.2fx plain copy; target <= 1.25)\n", first_stall - step,
              (first_stall - step) / copy);
  std::printf("figure save_s %.3f (call to commit; %.2f GB/s to %s)\n", Median(save_s), s.state_bytes() / Median(save_s) / 1e9,
              dir_root.c_str());
  std::fflush(stdout);
  Check(s.wait_all().ok(), "figures: every save committed");
  Mark("teardown: host copies");
  host.clear();
  live.clear();
  Mark("teardown: TrainingState");
  state.reset();
  Mark("teardown: Store");
  store_ptr.reset();
  Mark("teardown: model and optimizer");
  model.reset();
  Sync();
  Mark("teardown: done");
}

// POSIX, not std::filesystem: PyTorch 2.11's libtorch.so exports its own std::filesystem
// symbols, and on a GPU machine a call of remove_all from here bound to that copy and crashed
// (a call through a null pointer). preempt's libraries do not use std::filesystem.
void RemoveTree(const std::string& root) {
  (void)nftw(
      root.c_str(),
      [](const char* path, const struct stat*, int, struct FTW*) {
        (void)remove(path);  // best effort: keep going
        return 0;
      },
      16,
      FTW_DEPTH | FTW_PHYS);
}

// A crash prints where it happened (a check run once on a machine without a debugger at hand).
// The faulting instruction and the word at the stack pointer (the return address when a call
// went through a bad pointer) are printed too: the unwinder stops at a garbage program counter.
void OnCrash(int sig, siginfo_t* info, void* ctx) {
  char line[256];
  const auto* uc = static_cast<const ucontext_t*>(ctx);
  void* pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
  void* const* sp = reinterpret_cast<void* const*>(uc->uc_mcontext.gregs[REG_RSP]);
  int n = std::snprintf(line, sizeof line,
                        "cuda_snapshot_check: signal %d at address %p, pc %p, thread %ld (main %ld); pc and "
                        "[sp], then the backtrace:\n",
                        sig, info->si_addr, pc, static_cast<long>(syscall(SYS_gettid)), static_cast<long>(getpid()));
  (void)!write(2, line, n);
  void* around[2] = {pc, sp ? sp[0] : nullptr};
  backtrace_symbols_fd(around, 2, 2);
  void* frames[64];
  n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_sigaction = OnCrash;
  sa.sa_flags = SA_SIGINFO;
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGILL}) sigaction(sig, &sa, nullptr);
  std::string dev = "cuda", dir;
  int64_t figures = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--device" || a == "--dir" || a == "--figures") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--device") dev = v;
      else if (a == "--dir") dir = v;
      else {
        char* end = nullptr;
        figures = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end || figures < 0) {
          std::fprintf(stderr, "cuda_snapshot_check: --figures wants MiB >= 0, got '%s'\n", v.c_str());
          return 2;
        }
      }
    } else {
      std::fprintf(stderr, "usage: cuda_snapshot_check [--device cuda|cpu] [--dir DIR] [--figures MIB]\n");
      return 2;
    }
  }
  if (dev != "cuda" && dev != "cpu") {
    std::fprintf(stderr, "cuda_snapshot_check: --device is cuda or cpu, got '%s'\n", dev.c_str());
    return 2;
  }
  if (dev == "cuda") {
    if (!torch::cuda::is_available()) {
      std::printf("skip: LibTorch sees no CUDA device\n");
      return kSkip;
    }
    device = torch::Device(torch::kCUDA, 0);
    if (figures < 0) figures = 1024;
  } else if (figures < 0) {
    figures = 0;
  }
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  const char* tmp = getenv("TMPDIR");
  std::string tmpl = (dir.empty() ? (tmp && *tmp ? tmp : "/tmp") : dir) + std::string("/cuda-snapshot.XXXXXX");
  if (!mkdtemp(tmpl.data())) {
    std::fprintf(stderr, "cuda_snapshot_check: cannot create a directory from %s\n", tmpl.c_str());
    return 2;
  }
  dir_root = tmpl;
  std::printf("cuda_snapshot_check: device %s, checkpoints under %s\n", device.str().c_str(), dir_root.c_str());

  Guarded("round trip", RoundTrip);
  Guarded("overlapped (staging cold)", [] { Overlapped(false); });
  Guarded("overlapped (staging prepared)", [] { Overlapped(true); });
  Guarded("exact resume", ExactResume);
  if (figures > 0) Guarded("figures", [&] { Figures(figures); });
  Mark("removing the checkpoints");
  RemoveTree(dir_root);
  std::printf("%s: %d check(s) failed\n", failures ? "FAILED" : "passed", failures);
  std::fflush(stdout);  // what follows is static destruction: a crash there must not hide this
  return failures ? 1 : 0;
}
