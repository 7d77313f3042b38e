// The trainer the runtime tests, the scheduler's end-to-end test, bench_runtime and
// scripts/demo-preempt.sh launch: examples/ddp_trainer.cc's loop plus knobs that make failures
// happen on purpose.
//
//   preempt_trainer_worker --rank 0 --world 2 --rendezvous /tmp/job.store --dir /tmp/ckpt --steps 200
//
// Every rank trains an MLP with dropout (so the random stream matters) and Adam (so optimizer
// moments matter) on its own shard of a synthetic regression set; gradients are averaged with
// asynchronous gloo all_reduce handles registered with the runtime. Rank 0 appends
// "step <i> loss <hex float> <decimal>" to --loss-log; every rank prints "final <hex>" (sum of
// all parameters) when training completes, so two runs can be compared bit for bit. After each
// step, <dir>/.rank<R>.progress holds the number of completed steps.
//
// Output lines the tests read (step numbers count completed steps, as everywhere in preempt):
//   "rank R start step S"                    after restore()
//   "rank R checkpoint at step S"            step_end returned kCheckpoint
//   "rank R stopped at step S committed=C"   step_end returned kStop
//   "rank R restore failed: <status>"        restore() threw (exit 3)
//
// Knobs:
//   --sleep-ms N            per step                --sleep-before-ms N  after restore, before step 0
//   --compute-ms N          per step, between backward and the update fence (stands in for a
//                           longer forward and backward: what an overlapped snapshot hides behind)
//   --extra-mib N           an extra tracked buffer, changed every step (bigger checkpoints)
//   --extra-param 1         hold it as a parameter instead (no gradient, changed after the
//                           update): copied while the next step runs, like model weights
//   --hidden N              width of the hidden layer (default 64; another value = a config change)
//   --stuck-rank R --stuck-step S   that rank sleeps 600 s before its gradient all_reduce of step S
//   --slow-step S --slow-ms N0,N1,...   step S takes Nr ms longer on rank r, before its step_end
//                           (the last value applies to the remaining ranks; 0: not slow)
//   --linger-ms N           sleep after the training loop, before exit (a trainer's clean-up)
//   --early-handlers 1      install the signal handlers first thing in main (before the process
//                           group and the Runtime); then --startup-sleep-ms N sleeps before the
//                           Runtime exists (writes <dir>/.rank<R>.starting first) and
//                           --after-ms N sleeps after it was destroyed (writes .rank<R>.finished)
//   --slow-commit-ms N      the store's rename of step-N.tmp to step-N takes N ms longer
//   --every, --check-every, --pipelined 0|1, --staging-buffers, --hints   runtime options
//   --fence 0|1             call rt.before_update() before the optimizer step (default 1)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include "preempt/runtime.h"
#include "support/fault_fs.h"

namespace {

struct Args {
  int rank = 0, world = 1;
  std::string rendezvous, dir, loss_log, hints;
  int64_t steps = 100, every = 0, check_every = 1;
  int sleep_ms = 0, sleep_before_ms = 0, compute_ms = 0, extra_mib = 0, staging_buffers = 2, hidden = 64;
  bool extra_param = false;
  bool pipelined = false, early_handlers = false, fence = true;
  int stuck_rank = -1, slow_ms = 0;
  int64_t stuck_step = -1, slow_step = -1;
  int linger_ms = 0, startup_sleep_ms = 0, after_ms = 0, slow_commit_ms = 0;
};

Args Parse(int argc, char** argv) {
  Args a;
  std::string slow_list;
  if (argc % 2 != 1) {
    std::fprintf(stderr, "flags come in pairs: --name value\n");
    std::exit(2);
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--rank") a.rank = std::stoi(v);
    else if (k == "--world") a.world = std::stoi(v);
    else if (k == "--rendezvous") a.rendezvous = v;
    else if (k == "--dir") a.dir = v;
    else if (k == "--loss-log") a.loss_log = v;
    else if (k == "--hints") a.hints = v;
    else if (k == "--steps") a.steps = std::stoll(v);
    else if (k == "--every") a.every = std::stoll(v);
    else if (k == "--check-every") a.check_every = std::stoll(v);
    else if (k == "--sleep-ms") a.sleep_ms = std::stoi(v);
    else if (k == "--compute-ms") a.compute_ms = std::stoi(v);
    else if (k == "--sleep-before-ms") a.sleep_before_ms = std::stoi(v);
    else if (k == "--extra-mib") a.extra_mib = std::stoi(v);
    else if (k == "--extra-param") a.extra_param = v == "1";
    else if (k == "--hidden") a.hidden = std::stoi(v);
    else if (k == "--staging-buffers") a.staging_buffers = std::stoi(v);
    else if (k == "--pipelined") a.pipelined = v == "1";
    else if (k == "--fence") a.fence = v == "1";
    else if (k == "--stuck-rank") a.stuck_rank = std::stoi(v);
    else if (k == "--stuck-step") a.stuck_step = std::stoll(v);
    else if (k == "--slow-step") a.slow_step = std::stoll(v);
    else if (k == "--slow-ms") slow_list = v;
    else if (k == "--linger-ms") a.linger_ms = std::stoi(v);
    else if (k == "--early-handlers") a.early_handlers = v == "1";
    else if (k == "--startup-sleep-ms") a.startup_sleep_ms = std::stoi(v);
    else if (k == "--after-ms") a.after_ms = std::stoi(v);
    else if (k == "--slow-commit-ms") a.slow_commit_ms = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  for (int r = 0, pos = 0; !slow_list.empty() && r <= a.rank; ++r) {
    size_t comma = slow_list.find(',', pos);
    a.slow_ms = std::stoi(slow_list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = static_cast<int>(comma) + 1;
  }
  return a;
}

struct Net : torch::nn::Module {
  explicit Net(int hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(32, hidden));
    drop = register_module("drop", torch::nn::Dropout(0.1));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

// The real file system, except that committing a step (renaming step-N.tmp to step-N) is slow.
class SlowCommitFileSystem : public preempt::testing::FaultInjectingFileSystem {
 public:
  explicit SlowCommitFileSystem(int delay_ms) : delay_ms_(delay_ms) { native_fds = true; }
  preempt::Status rename(const std::string& a, const std::string& b) override {
    const std::string base = b.substr(b.rfind('/') + 1);
    if (a.size() > 4 && a.compare(a.size() - 4, 4, ".tmp") == 0 && base.rfind("step-", 0) == 0 &&
        base.find(".tmp") == std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    }
    return FaultInjectingFileSystem::rename(a, b);
  }

 private:
  int delay_ms_;
};

std::string Hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a", v);
  return buf;
}

void Touch(const std::string& path) { std::ofstream(path) << "1\n"; }

int Train(const Args& a) {
  torch::manual_seed(1234 + a.rank);  // per-rank dropout stream; restored from the checkpoint
  torch::set_num_threads(1);

  // The data: a fixed synthetic regression set, sharded by rank.
  torch::Generator data_gen = at::detail::createCPUGenerator(42);
  torch::Tensor X = torch::randn({2048, 32}, data_gen);
  torch::Tensor w_true = torch::randn({32, 1}, data_gen);
  torch::Tensor Y = torch::matmul(X, w_true) + 0.1 * torch::randn({2048, 1}, data_gen);
  int64_t shard = 2048 / a.world;
  torch::Tensor Xs = X.narrow(0, a.rank * shard, shard), Ys = Y.narrow(0, a.rank * shard, shard);

  auto model = std::make_shared<Net>(a.hidden);
  {
    // Identical initial weights on every rank.
    torch::NoGradGuard ng;
    torch::manual_seed(7);
    for (auto& p : model->parameters()) p.copy_(torch::randn(p.sizes()) * 0.1);
    torch::manual_seed(1234 + a.rank);
  }
  torch::optim::Adam optim(model->parameters(), torch::optim::AdamOptions(1e-2));
  preempt::torch::ResumableRandomSampler sampler(shard, /*seed=*/100 + a.rank);
  preempt::torch::DataCursor cursor;
  torch::Tensor extra = torch::zeros({int64_t(a.extra_mib) * 1024 * 1024 / 4});
  auto extra_holder = std::make_shared<torch::nn::Module>();
  if (a.extra_param) extra_holder->register_parameter("blob", extra, /*requires_grad=*/false);
  else extra_holder->register_buffer("blob", extra);
  std::unique_ptr<SlowCommitFileSystem> slow_fs;
  if (a.slow_commit_ms > 0) slow_fs = std::make_unique<SlowCommitFileSystem>(a.slow_commit_ms);

  preempt::RuntimeOptions ro;
  ro.dir = a.dir;
  ro.every_steps = a.every;
  ro.hints_path = a.hints;
  ro.coord.check_every = a.check_every;
  ro.coord.pipelined = a.pipelined;
  ro.state.staging_buffers = a.staging_buffers;
  ro.store.fs = slow_fs.get();
  preempt::Runtime rt(ro);
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  if (a.world > 1) {
    pg = preempt::MakeGlooGroup(a.rendezvous, a.rank, a.world, 60);
    rt.use_process_group(pg);
  }
  rt.track("model", *model);
  rt.track("optim", optim);
  rt.track("sampler", sampler);
  rt.track("cursor", cursor);
  int extra_mib = a.extra_mib;
  if (a.extra_mib > 0) {
    rt.track_extra("extra_meta", extra_mib);
    rt.track("extra", *extra_holder);
  }
  int64_t step = 0;
  try {
    step = rt.restore();
  } catch (const preempt::Error& e) {
    std::printf("rank %d restore failed: %s\n", a.rank, e.status().to_string().c_str());
    std::fflush(stdout);
    return 3;
  }
  std::printf("rank %d start step %lld\n", a.rank, static_cast<long long>(step));
  std::fflush(stdout);
  const std::string me = a.dir + "/.rank" + std::to_string(a.rank);
  if (a.sleep_before_ms > 0) {
    Touch(me + ".ready");
    std::this_thread::sleep_for(std::chrono::milliseconds(a.sleep_before_ms));
  }
  FILE* loss_log = nullptr;
  if (a.rank == 0 && !a.loss_log.empty()) loss_log = std::fopen(a.loss_log.c_str(), "a");

  double step_end_s = 0;
  int64_t step_ends = 0;
  for (; step < a.steps; ++step) {
    auto idx = sampler.next(32);
    if (!idx || idx->size() < 32) {
      sampler.reset();
      cursor.epoch++;
      cursor.batch_index = 0;
      idx = sampler.next(32);
    }
    torch::Tensor ix = torch::tensor(std::vector<int64_t>(idx->begin(), idx->end()), torch::kInt64);
    cursor.batch_index++;
    cursor.samples_seen += 32;
    model->train();
    optim.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(Xs.index_select(0, ix)), Ys.index_select(0, ix));
    loss.backward();
    if (a.rank == a.stuck_rank && step == a.stuck_step) {
      std::printf("rank %d stuck before the gradient all_reduce of step %lld\n", a.rank, static_cast<long long>(step));
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(600));
    }
    if (pg) {
      for (auto& p : model->parameters()) {
        std::vector<torch::Tensor> g{p.grad()};
        rt.register_work(pg->allreduce(g), "grad allreduce");
      }
      if (!rt.wait_registered().ok()) break;  // a peer is gone and the grace is spent
      for (auto& p : model->parameters()) p.grad().div_(a.world);
    }
    if (a.compute_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.compute_ms));
    if (a.fence) rt.before_update();  // lets periodic checkpoints overlap with the next step
    optim.step();
    // The extra state changes every step (one value in every 64 KiB), so a checkpoint cannot share
    // its chunks with the previous one: saving it costs what its size says.
    if (a.extra_mib > 0) extra.slice(0, 0, extra.numel(), 16384).add_(1);
    if (loss_log) {
      double l = loss.item<double>();
      std::fprintf(loss_log, "step %lld loss %s %.9g\n", static_cast<long long>(step), Hex(l).c_str(), l);
      std::fflush(loss_log);
    }
    std::ofstream(me + ".progress") << step + 1 << "\n";
    if (a.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.sleep_ms));
    if (a.slow_ms > 0 && step == a.slow_step) {
      std::printf("rank %d slow step %lld begins\n", a.rank, static_cast<long long>(step));
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(a.slow_ms));
    }
    auto se0 = std::chrono::steady_clock::now();
    preempt::Action act = rt.step_end(step);
    step_end_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - se0).count();
    ++step_ends;
    if (act == preempt::Action::kStop) {
      std::printf("rank %d stopped at step %lld committed=%d signal_to_commit_s=%.3f\n", a.rank,
                  static_cast<long long>(rt.stats().stop_step), rt.stats().stop_committed ? 1 : 0,
                  rt.stats().signal_to_commit_s);
      std::fflush(stdout);  // before exit_code(): its `scontrol requeue` ends the job's other processes
      break;
    }
    if (act == preempt::Action::kCheckpoint) {
      std::printf("rank %d checkpoint at step %lld\n", a.rank, static_cast<long long>(step + 1));
      std::fflush(stdout);
    }
  }
  if (loss_log) std::fclose(loss_log);
  if (step >= a.steps) {
    double sum = 0;
    for (auto& p : model->parameters()) sum += p.sum().item<double>();
    std::printf("rank %d final %s\n", a.rank, Hex(sum).c_str());
  }
  const auto& cs = rt.stats().coord;
  std::printf("rank %d step_end_mean_us %.2f coord_checks %lld mean_check_us %.2f max_check_us %.2f\n", a.rank,
              step_ends ? step_end_s / step_ends * 1e6 : 0.0, static_cast<long long>(cs.checks),
              cs.mean_check_s() * 1e6, cs.max_check_s * 1e6);
  int code = rt.exit_code();
  std::printf("rank %d exit %d\n", a.rank, code);
  std::fflush(stdout);
  if (a.linger_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.linger_ms));
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = Parse(argc, argv);
  if (a.dir.empty() || (a.world > 1 && a.rendezvous.empty())) {
    std::fprintf(stderr, "usage: preempt_trainer_worker --dir CKPT [--rank R --world N --rendezvous FILE] [--steps S]\n");
    return 2;
  }
  if (a.early_handlers) {
    // First thing: from here on a stop signal is recorded, never fatal (preempt/signal.h).
    preempt::Status s = preempt::InstallSignalHandlers();
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.to_string().c_str());
      return 2;
    }
  }
  const std::string me = a.dir + "/.rank" + std::to_string(a.rank);
  if (a.startup_sleep_ms > 0) {
    Touch(me + ".starting");
    std::this_thread::sleep_for(std::chrono::milliseconds(a.startup_sleep_ms));
  }
  int code = Train(a);  // the Runtime lives inside
  if (a.after_ms > 0) {
    Touch(me + ".finished");
    std::this_thread::sleep_for(std::chrono::milliseconds(a.after_ms));
    std::printf("rank %d still alive after the runtime, exit %d\n", a.rank, code);
    std::fflush(stdout);
  }
  return code;
}
