// A data-parallel LibTorch trainer (gloo, N ranks) made preemptible with preempt::Runtime.
//
//   ddp_trainer --rank 0 --world 2 --rendezvous /tmp/job.store --dir /tmp/ckpt --steps 200
//
// Every rank trains an MLP with dropout (so the random stream matters) and Adam (so optimizer
// moments matter) on its own shard of a synthetic regression set; gradients are averaged with
// asynchronous gloo all_reduce handles registered with the runtime. Rank 0 appends
// "step <i> loss <hex float> <decimal>" to --loss-log; every rank prints "final <hex>" (sum of
// all parameters) when training completes, so two runs can be compared bit for bit.
//
// Test knobs: --sleep-ms (per step), --sleep-before-ms (before the first step, after restore),
// --extra-mib (an extra tracked buffer to make checkpoints bigger), --stuck-rank/--stuck-step
// (that rank stops before its gradient all_reduce), --every (periodic checkpoint steps).
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

namespace {

struct Args {
  int rank = 0, world = 1;
  std::string rendezvous, dir, loss_log, hints;
  int64_t steps = 100, every = 0, check_every = 1;
  int sleep_ms = 0, sleep_before_ms = 0, extra_mib = 0, staging_buffers = 2;
  bool pipelined = false;
  int stuck_rank = -1;
  int64_t stuck_step = -1;
};

Args Parse(int argc, char** argv) {
  Args a;
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
    else if (k == "--sleep-before-ms") a.sleep_before_ms = std::stoi(v);
    else if (k == "--extra-mib") a.extra_mib = std::stoi(v);
    else if (k == "--staging-buffers") a.staging_buffers = std::stoi(v);
    else if (k == "--pipelined") a.pipelined = v == "1";
    else if (k == "--stuck-rank") a.stuck_rank = std::stoi(v);
    else if (k == "--stuck-step") a.stuck_step = std::stoll(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 64));
    drop = register_module("drop", torch::nn::Dropout(0.1));
    fc2 = register_module("fc2", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

std::string Hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a", v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = Parse(argc, argv);
  if (a.dir.empty() || (a.world > 1 && a.rendezvous.empty())) {
    std::fprintf(stderr, "usage: ddp_trainer --dir CKPT [--rank R --world N --rendezvous FILE] [--steps S]\n");
    return 2;
  }
  torch::manual_seed(1234 + a.rank);  // per-rank dropout stream; restored from the checkpoint
  torch::set_num_threads(1);

  // The data: a fixed synthetic regression set, sharded by rank.
  torch::Generator data_gen = at::detail::createCPUGenerator(42);
  torch::Tensor X = torch::randn({2048, 32}, data_gen);
  torch::Tensor w_true = torch::randn({32, 1}, data_gen);
  torch::Tensor Y = torch::matmul(X, w_true) + 0.1 * torch::randn({2048, 1}, data_gen);
  int64_t shard = 2048 / a.world;
  torch::Tensor Xs = X.narrow(0, a.rank * shard, shard), Ys = Y.narrow(0, a.rank * shard, shard);

  auto model = std::make_shared<Net>();
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

  preempt::RuntimeOptions ro;
  ro.dir = a.dir;
  ro.every_steps = a.every;
  ro.hints_path = a.hints;
  ro.coord.check_every = a.check_every;
  ro.staging_buffers = a.staging_buffers;
  ro.coord.pipelined = a.pipelined;
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
  if (a.extra_mib > 0) {
    rt.track_extra("extra_meta", a.extra_mib);
    auto holder = std::make_shared<torch::nn::Module>();
    holder->register_buffer("blob", extra);
    rt.track("extra", *holder);
    static std::shared_ptr<torch::nn::Module> keep = holder;
  }
  int64_t step = rt.restore();
  std::printf("rank %d start step %lld\n", a.rank, static_cast<long long>(step));
  std::fflush(stdout);
  if (a.sleep_before_ms > 0) {
    std::ofstream(a.dir + "/.rank" + std::to_string(a.rank) + ".ready") << "1\n";
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
    optim.step();
    if (loss_log) {
      double l = loss.item<double>();
      std::fprintf(loss_log, "step %lld loss %s %.9g\n", static_cast<long long>(step), Hex(l).c_str(), l);
      std::fflush(loss_log);
    }
    {
      std::ofstream(a.dir + "/.rank" + std::to_string(a.rank) + ".progress") << step << "\n";
    }
    if (a.sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.sleep_ms));
    auto se0 = std::chrono::steady_clock::now();
    preempt::Action act = rt.step_end(step);
    step_end_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - se0).count();
    ++step_ends;
    if (act == preempt::Action::kStop) {
      std::printf("rank %d stopped after step %lld committed=%d signal_to_commit_s=%.3f\n", a.rank,
                  static_cast<long long>(step), rt.stats().stop_committed ? 1 : 0, rt.stats().signal_to_commit_s);
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
  return code;
}
