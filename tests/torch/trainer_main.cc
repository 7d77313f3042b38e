// A small LibTorch trainer for the exact-resume test: an MLP with dropout, Adam, a multiplicative
// LR schedule (cereal extra) and a shuffled sampler, checkpointed periodically through
// preempt::torch::TrainingState. It can SIGKILL itself right after a given step.
//
//   preempt_torch_trainer --dir D --steps N --every K [--die-at S] [--step-delay-ms MS]
//                         --losses FILE --final FILE
//
// --losses gets one line per executed step (and <losses>.starts the step each launch resumed at): "<step> <loss bits as hex>" (appended, flushed).
// --final gets the raw bytes of every parameter, Adam's state, the lr and the CPU RNG state,
// written without preempt so that the test does not trust the code it tests.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "preempt/store.h"
#include "preempt/torch/training_state.h"

namespace pt = preempt::torch;

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::dropout(torch::relu(fc1(x)), 0.2, is_training());
    return fc2(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

// LR schedule state, kept as a cereal extra: lr *= gamma every step_size steps.
struct StepSchedule {
  int64_t step_size = 25;
  double gamma = 0.7;
  int64_t applied = 0;
  template <class A>
  void serialize(A& ar) { ar(step_size, gamma, applied); }
};

void WriteTensor(FILE* f, const at::Tensor& t) {
  at::Tensor c = t.detach().contiguous();
  int64_t n = c.numel() * c.element_size();
  fwrite(&n, sizeof n, 1, f);
  if (n) fwrite(c.data_ptr(), 1, static_cast<size_t>(n), f);
}

std::string Arg(int argc, char** argv, const std::string& key, const std::string& dflt = "") {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == key) return argv[i + 1];
  return dflt;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = Arg(argc, argv, "--dir");
  const int64_t total = std::stoll(Arg(argc, argv, "--steps", "200"));
  const int64_t every = std::stoll(Arg(argc, argv, "--every", "10"));
  const int64_t die_at = std::stoll(Arg(argc, argv, "--die-at", "-1"));
  const int delay_ms = std::stoi(Arg(argc, argv, "--step-delay-ms", "0"));
  const std::string losses_path = Arg(argc, argv, "--losses");
  const std::string final_path = Arg(argc, argv, "--final");
  if (dir.empty() || losses_path.empty() || final_path.empty()) {
    fprintf(stderr, "usage: %s --dir D --steps N --every K --losses F --final F [--die-at S]\n", argv[0]);
    return 2;
  }
  torch::set_num_threads(1);  // one intra-op thread: reductions in a fixed order

  // Data: fixed by its own generator, independent of the training RNG.
  auto data_gen = at::detail::createCPUGenerator(42);
  const int64_t n = 512;
  auto X = at::randn({n, 16}, data_gen);
  auto W = at::randn({16, 4}, data_gen);
  auto Y = at::argmax(at::matmul(X, W), 1);

  torch::manual_seed(1234);
  Net net;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
  StepSchedule sched;
  pt::ResumableRandomSampler sampler(n);  // permutation from the global generator, like RandomSampler
  pt::DataCursor cursor;

  preempt::StoreOptions so;
  so.root = dir;
  so.keep_last = 2;
  const char* io = getenv("PREEMPT_TEST_IO");
  so.io_backend = io && std::string(io) == "posix" ? preempt::IoBackend::kPosix : preempt::IoBackend::kAuto;
  preempt::Store store(so);
  pt::TrainingState state;
  state.track("model", net);
  state.track("optim", opt);
  state.track("sampler", sampler);
  state.track("cursor", cursor);
  state.track_extra("sched", sched);

  int64_t step = 0;
  try {
    step = state.restore(store).value_or(0);
  } catch (const preempt::Error& e) {
    fprintf(stderr, "trainer: restore failed: %s\n", e.what());
    return 3;
  }
  if (step == 0) sampler.reset();
  fprintf(stderr, "trainer: starting at step %lld\n", static_cast<long long>(step));
  if (FILE* starts = fopen((losses_path + ".starts").c_str(), "a")) {
    fprintf(starts, "%lld\n", static_cast<long long>(step));
    fclose(starts);
  }

  FILE* losses = fopen(losses_path.c_str(), "a");
  if (!losses) return 4;
  const int64_t batch_size = 32;
  while (step < total) {
    auto batch = sampler.next(batch_size);
    if (!batch) {
      cursor.epoch++;
      cursor.batch_index = 0;
      sampler.reset();
      continue;
    }
    std::vector<int64_t> idx(batch->begin(), batch->end());
    auto index = torch::tensor(idx, torch::kLong);
    auto x = X.index_select(0, index), y = Y.index_select(0, index);
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    opt.step();
    cursor.batch_index++;
    cursor.samples_seen += static_cast<int64_t>(idx.size());
    ++step;
    if (step % sched.step_size == 0) {
      auto& o = opt.param_groups()[0].options();
      o.set_lr(o.get_lr() * sched.gamma);
      sched.applied++;
    }
    float lv = loss.item<float>();
    uint32_t bits;
    std::memcpy(&bits, &lv, sizeof bits);
    fprintf(losses, "%lld %08x\n", static_cast<long long>(step), bits);
    fflush(losses);
    try {
      // Wait for the older save rather than skipping: every checkpoint is taken, so a kill lands
      // after a known amount of progress (kSkip is exercised by the unit tests).
      if (every > 0 && step % every == 0) state.checkpoint_async(store, step, pt::WhenBusy::kWait);
    } catch (const preempt::Error& e) {
      fprintf(stderr, "trainer: checkpoint failed: %s\n", e.what());
      return 5;
    }
    if (die_at >= 0 && step >= die_at) raise(SIGKILL);
    if (delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  }
  fclose(losses);
  preempt::Status ws = state.wait_all();
  if (!ws.ok()) {
    fprintf(stderr, "trainer: save failed: %s\n", ws.to_string().c_str());
    return 6;
  }

  FILE* f = fopen(final_path.c_str(), "wb");
  if (!f) return 7;
  for (const auto& p : net->parameters()) {
    WriteTensor(f, p);
    auto& s = static_cast<torch::optim::AdamParamState&>(*opt.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
    int64_t st = s.step();
    fwrite(&st, sizeof st, 1, f);
    WriteTensor(f, s.exp_avg());
    WriteTensor(f, s.exp_avg_sq());
  }
  double lr = opt.param_groups()[0].options().get_lr();
  fwrite(&lr, sizeof lr, 1, f);
  WriteTensor(f, at::detail::getDefaultCPUGenerator().get_state());
  fwrite(&cursor, sizeof cursor, 1, f);
  fclose(f);
  fprintf(stderr, "trainer: done at step %lld (epoch %lld)\n", static_cast<long long>(step),
          static_cast<long long>(cursor.epoch));
  return 0;
}
