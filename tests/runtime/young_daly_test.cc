// In-process checks of the runtime: the adaptive checkpoint interval (Young/Daly:
// sqrt(2 · cost · MTBP), clamped) and the update fence of overlapped checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <torch/torch.h>

#include "preempt/runtime.h"
#include "support/test_util.h"

namespace preempt {
namespace {

TEST(YoungDaly, Table) {
  struct Row {
    double cost_s, mtbp_s, min_s, max_s, want;
  };
  const Row rows[] = {
      {2.0, 3600.0, 10, 3600, std::sqrt(2.0 * 2.0 * 3600.0)},  // 120 s
      {0.05, 3600.0, 10, 3600, std::sqrt(2.0 * 0.05 * 3600.0)},  // 19 s
      {0.001, 3600.0, 10, 3600, 10},    // clamped up to min
      {100.0, 86400.0, 10, 3600, 3600},  // sqrt(2·100·86400) = 4157 s: clamped down to max
      {0.0, 3600.0, 10, 3600, 3600},    // no cost measured yet: the longest interval
      {2.0, 0.0, 10, 3600, 3600},       // no preemptions expected
      {NAN, 3600.0, 10, 3600, 3600},
  };
  for (const auto& r : rows) {
    EXPECT_NEAR(YoungDalyInterval(r.cost_s, r.mtbp_s, r.min_s, r.max_s), r.want, 1e-9)
        << "cost " << r.cost_s << " mtbp " << r.mtbp_s;
  }
}

TEST(YoungDaly, CheaperCheckpointsOrMorePreemptionsShortenTheInterval) {
  EXPECT_LT(YoungDalyInterval(0.5, 3600, 1, 1e6), YoungDalyInterval(2.0, 3600, 1, 1e6));
  EXPECT_LT(YoungDalyInterval(2.0, 600, 1, 1e6), YoungDalyInterval(2.0, 3600, 1, 1e6));
}

std::vector<at::Tensor> Clones(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

std::vector<at::Tensor> AdamMoments(::torch::optim::Adam& opt, ::torch::nn::Linear& net) {
  std::vector<at::Tensor> out;
  for (auto& p : net->parameters()) {
    auto& s = static_cast<::torch::optim::AdamParamState&>(*opt.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
    out.push_back(s.exp_avg());
    out.push_back(s.exp_avg_sq());
  }
  return out;
}

bool BitEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes() || a[i].scalar_type() != b[i].scalar_type()) return false;
    if (std::memcmp(a[i].data_ptr(), b[i].data_ptr(), a[i].numel() * a[i].element_size()) != 0) return false;
  }
  return true;
}

RuntimeOptions FenceOptions(const std::string& dir) {
  RuntimeOptions ro;
  ro.dir = dir;
  ro.every_steps = 3;
  ro.install_signal_handlers = false;
  ro.state.capture_rng = false;
  return ro;
}

// The README loop with the fence: the checkpoint taken at step_end overlaps with the next step,
// and parameters and optimizer state changed right after the fence are not in it.
TEST(RuntimeFence, ChangesAfterTheFenceAreNotInTheCheckpoint) {
  testing::TempDir dir;
  ::torch::manual_seed(5);
  ::torch::nn::Linear net(512, 1024);  // 2 MiB of parameters, 6 MiB with Adam's moments
  ::torch::optim::Adam opt(net->parameters(), ::torch::optim::AdamOptions(1e-3));
  std::vector<at::Tensor> want_params, want_moments;
  {
    Runtime rt(FenceOptions(dir.path()));
    rt.track("model", *net);
    rt.track("optim", opt);
    ASSERT_EQ(rt.restore(), 0);
    auto x = ::torch::randn({8, 512});
    for (int64_t step = 0;; ++step) {
      opt.zero_grad();
      net->forward(x).pow(2).mean().backward();
      rt.before_update();
      opt.step();
      if (rt.step_end(step) != Action::kCheckpoint) continue;
      ASSERT_EQ(step + 1, 3);
      want_params = Clones(net->parameters());
      want_moments = Clones(AdamMoments(opt, net));
      // The next step: its fence comes right away, then everything tracked changes.
      rt.before_update();
      ::torch::NoGradGuard no_grad;
      for (auto& p : net->parameters()) p.mul_(-3);
      for (auto& m : AdamMoments(opt, net)) m.fill_(7);
      break;
    }
    EXPECT_EQ(rt.stats().checkpoints_overlapped, 1);
    ASSERT_TRUE(rt.wait().ok());
    EXPECT_EQ(rt.stats().checkpoints_committed, 1);
  }
  ::torch::manual_seed(6);
  ::torch::nn::Linear net2(512, 1024);
  ::torch::optim::Adam opt2(net2->parameters(), ::torch::optim::AdamOptions(1e-3));
  Runtime rt2(FenceOptions(dir.path()));
  rt2.track("model", *net2);
  rt2.track("optim", opt2);
  ASSERT_EQ(rt2.restore(), 3);
  EXPECT_TRUE(BitEqual(net2->parameters(), want_params));
  EXPECT_TRUE(BitEqual(AdamMoments(opt2, net2), want_moments));
}

// Without the fence in the step, the runtime copies the whole state at step_end.
TEST(RuntimeFence, NoFenceNoOverlap) {
  testing::TempDir dir;
  ::torch::nn::Linear net(16, 16);
  ::torch::optim::SGD opt(net->parameters(), ::torch::optim::SGDOptions(0.1));
  Runtime rt(FenceOptions(dir.path()));
  rt.track("model", *net);
  rt.track("optim", opt);
  ASSERT_EQ(rt.restore(), 0);
  for (int64_t step = 0; step < 6; ++step) rt.step_end(step);
  ASSERT_TRUE(rt.wait().ok());
  EXPECT_EQ(rt.stats().checkpoints_started, 2);
  EXPECT_EQ(rt.stats().checkpoints_overlapped, 0);
}

}  // namespace
}  // namespace preempt
