// A data-parallel LibTorch trainer made preemptible with preempt::Runtime: the README's loop,
// and nothing else.
//
//   ddp_trainer --rank 0 --world 2 --rendezvous /tmp/job.store --dir /tmp/ckpt --steps 1000
//
// Send SIGTERM to any rank: every rank stops after the same step, the stop checkpoint commits,
// and the process exits 143. Run the same command again: training resumes where it stopped.
// Grace period: PREEMPT_GRACE_S (default 30 s). See docs/runtime.md.
#include <cstdio>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include "preempt/runtime.h"

int main(int argc, char** argv) {
  int rank = 0, world = 1;
  int64_t total = 1000;
  std::string rendezvous, dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--rank") rank = std::stoi(v);
    else if (k == "--world") world = std::stoi(v);
    else if (k == "--rendezvous") rendezvous = v;
    else if (k == "--dir") dir = v;
    else if (k == "--steps") total = std::stoll(v);
    else return std::fprintf(stderr, "unknown flag %s\n", k.c_str()), 2;
  }
  if (dir.empty() || (world > 1 && rendezvous.empty())) {
    std::fprintf(stderr, "usage: ddp_trainer --dir CKPT [--rank R --world N --rendezvous FILE] [--steps S]\n");
    return 2;
  }
  torch::manual_seed(rank);
  torch::nn::Linear model(32, 1);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  preempt::torch::ResumableRandomSampler sampler(/*size=*/4096, /*seed=*/rank);
  torch::Tensor X = torch::randn({4096, 32}), Y = X.sum(1, /*keepdim=*/true);

  preempt::RuntimeOptions opts;
  opts.dir = dir;
  opts.every_steps = 500;                              // grace: PREEMPT_GRACE_S (default 30 s)
  preempt::Runtime rt(opts);
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  if (world > 1) rt.use_process_group(pg = preempt::MakeGlooGroup(rendezvous, rank, world));
  rt.track("model", model);  rt.track("optim", optimizer);  rt.track("data", sampler);
  auto train_one_step = [&] {
    auto idx = sampler.next(32);
    if (!idx || idx->size() < 32) sampler.reset(), idx = sampler.next(32);
    torch::Tensor ix = torch::tensor(std::vector<int64_t>(idx->begin(), idx->end()));
    optimizer.zero_grad();
    torch::mse_loss(model(X.index({ix})), Y.index({ix})).backward();
    if (pg) {  // data-parallel: average the gradients; registered, so a stop drains them
      for (auto& p : model->parameters()) {
        std::vector<torch::Tensor> grad{p.grad()};
        rt.register_work(pg->allreduce(grad), "grad allreduce");
      }
      if (!rt.wait_registered().ok()) return false;    // a peer is gone: stop (exit_code() says so)
      for (auto& p : model->parameters()) p.grad().div_(world);
    }
    rt.before_update();  // the last checkpoint's copy is done with the parameters
    optimizer.step();
    return true;
  };
  int64_t step = rt.restore();                         // 0 when there is nothing to resume
  for (; step < total; ++step) {
    if (!train_one_step()) break;
    if (rt.step_end(step) == preempt::Action::kStop) break;   // agreed, drained, committed
  }
  return rt.exit_code();                               // 0 done, 143 preempted+committed, 75 not committed
}
