// consumer — a program outside the repository using preempt the way a user does, built by the two
// projects next to this file (find_package against an installed prefix, and add_subdirectory).
//
//   consumer <dir>
// preempt::core: saves a buffer with a Store under <dir>/store, restores it, compares the bytes.
// preempt::runtime (when built with PREEMPT_CONSUMER_TORCH): the README's loop over a small model
// for 3 steps with checkpoints under <dir>/runtime, then a second Runtime that restores them.
// Exit 0 when everything round-trips; 1 with a message otherwise.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "preempt/store.h"

#ifdef PREEMPT_CONSUMER_TORCH
#include <torch/torch.h>

#include "preempt/runtime.h"
#endif

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "consumer: %s\n", what.c_str());
  return 1;
}

int StoreRoundTrip(const std::string& dir) {
  std::vector<float> saved(1024);
  for (size_t i = 0; i < saved.size(); ++i) saved[i] = static_cast<float>(i) * 0.5f;
  preempt::StoreOptions options;
  options.root = dir + "/store";
  preempt::Store store(options);

  preempt::SaveItem item;
  item.name = "weights";
  item.dtype = preempt::DType::kFloat32;
  item.shape = {static_cast<int64_t>(saved.size())};
  item.data = saved.data();
  item.nbytes = saved.size() * sizeof(float);
  preempt::SaveRequest request;
  request.step = 7;
  request.items.push_back(item);
  preempt::Status st = store.save(request);
  if (!st.ok()) return Fail("save: " + st.to_string());

  std::vector<float> restored(saved.size());
  preempt::RestoreTarget target;
  target.name = "weights";
  target.data = restored.data();
  target.nbytes = restored.size() * sizeof(float);
  target.dtype = preempt::DType::kFloat32;
  target.shape = item.shape;
  preempt::RestoreResult result;
  st = store.restore({target}, preempt::RestoreOptions(), &result);
  if (!st.ok()) return Fail("restore: " + st.to_string());
  if (result.step != 7) return Fail("restored step " + std::to_string(result.step) + ", expected 7");
  if (std::memcmp(saved.data(), restored.data(), item.nbytes) != 0) return Fail("restored bytes differ");
  std::printf("store: step %lld saved and restored (%zu bytes)\n", static_cast<long long>(result.step),
              item.nbytes);
  return 0;
}

#ifdef PREEMPT_CONSUMER_TORCH
// Trains `steps` steps from wherever the checkpoints under `dir` say; returns the first step run.
int64_t Train(const std::string& dir, int64_t steps, int* exit_code) {
  torch::manual_seed(0);
  torch::nn::Linear model(4, 2);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  preempt::RuntimeOptions options;
  options.dir = dir;
  options.every_steps = 1;
  preempt::Runtime rt(options);
  rt.track("model", model);
  rt.track("optim", optimizer);
  int64_t first = rt.restore();
  for (int64_t step = first; step < steps; ++step) {
    optimizer.zero_grad();
    torch::Tensor loss = model(torch::ones({8, 4})).pow(2).mean();
    loss.backward();
    optimizer.step();
    if (rt.step_end(step) == preempt::Action::kStop) break;
  }
  *exit_code = rt.exit_code();
  return first;
}

int RuntimeRoundTrip(const std::string& dir) {
  int code = -1;
  int64_t first = Train(dir + "/runtime", 3, &code);
  if (first != 0 || code != 0) {
    return Fail("first run started at " + std::to_string(first) + ", exit " + std::to_string(code));
  }
  first = Train(dir + "/runtime", 5, &code);
  if (first != 3 || code != 0) {
    return Fail("second run started at " + std::to_string(first) + " (expected 3), exit " +
                std::to_string(code));
  }
  std::printf("runtime: 3 steps, then resumed at step %lld\n", static_cast<long long>(first));
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer <dir>\n");
    return 2;
  }
  if (int rc = StoreRoundTrip(argv[1])) return rc;
#ifdef PREEMPT_CONSUMER_TORCH
  if (int rc = RuntimeRoundTrip(argv[1])) return rc;
#endif
  std::printf("consumer: ok\n");
  return 0;
}
