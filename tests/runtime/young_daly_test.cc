// In-process checks of the runtime: the adaptive checkpoint interval (Young/Daly:
// sqrt(2 · cost · MTBP), clamped), the update fence of overlapped checkpoints, and checkpoint
// requests that arrive while a save is in flight.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>

#include <torch/torch.h>

#include "preempt/hints.h"
#include "preempt/runtime.h"
#include "support/fault_fs.h"
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

// Holds every file open of the store once armed, until released: a save stays in flight for as
// long as the test needs.
class OpenGate {
 public:
  void attach(testing::FaultInjectingFileSystem* fs) {
    fs->on_open = [this](const std::string&) {
      std::unique_lock<std::mutex> l(mu_);
      if (!armed_) return;
      reached_ = true;
      cv_.notify_all();
      cv_.wait(l, [this] { return !armed_; });
    };
  }
  void arm() {
    std::lock_guard<std::mutex> l(mu_);
    armed_ = true;
    reached_ = false;
  }
  bool wait_reached() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60), [this] { return reached_; });
  }
  void release() {
    std::lock_guard<std::mutex> l(mu_);
    armed_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, reached_ = false;
};

struct RequestJob {
  testing::TempDir dir;
  testing::FaultInjectingFileSystem fs;
  OpenGate gate;
  ::torch::nn::Linear net{16, 16};
  ::torch::optim::SGD opt{net->parameters(), ::torch::optim::SGDOptions(0.1)};
  std::string hints;

  RequestJob() : hints(dir.path() + "/hints.json") { gate.attach(&fs); }
  RuntimeOptions options() {
    RuntimeOptions ro = FenceOptions(dir.path() + "/ck");
    ro.every_steps = 2;
    ro.hints_path = hints;
    ro.store.fs = &fs;
    return ro;
  }
  void request(int64_t id) {
    ASSERT_TRUE(WriteCheckpointRequest(RequestPathFor(hints), CheckpointRequest{id, "checkpoint"}).ok());
    usleep(20000);  // past the channel's 5 ms poll interval
  }
  Hints published() {
    Hints h;
    EXPECT_TRUE(ReadHints(hints, &h).ok());
    return h;
  }
  std::unique_ptr<Runtime> runtime() {
    auto rt = std::make_unique<Runtime>(options());
    rt->track("model", *net);
    rt->track("optim", opt);
    return rt;
  }
  // A fresh job with step 2's save held open at its first file and request 1 written during it.
  void request_during_a_save(Runtime* rt) {
    ASSERT_EQ(rt->restore(), 0);
    EXPECT_EQ(rt->step_end(0), Action::kContinue);
    gate.arm();
    EXPECT_EQ(rt->step_end(1), Action::kCheckpoint);
    ASSERT_TRUE(gate.wait_reached());
    request(1);
    EXPECT_EQ(rt->step_end(2), Action::kContinue);  // no second save queued behind it
    EXPECT_EQ(rt->stats().checkpoints_started, 1);
    EXPECT_EQ(published().request_ack, 0);  // not before the commit
  }
};

// A request that arrives while a periodic save persists is acknowledged by that save's commit;
// no second save is queued behind it. A job resumed from that commit does not redo the request.
TEST(RuntimeRequests, ASaveInFlightAnswersTheRequest) {
  RequestJob job;
  {
    auto rt = job.runtime();
    job.request_during_a_save(rt.get());
    job.gate.release();
    ASSERT_TRUE(rt->wait().ok());
    Hints h = job.published();
    EXPECT_EQ(h.request_ack, 1);
    EXPECT_EQ(h.last_commit.step, 2);
  }
  auto rt = job.runtime();
  ASSERT_EQ(rt->restore(), 2);
  usleep(20000);
  EXPECT_EQ(rt->step_end(2), Action::kContinue);  // request 1 predates the commit resumed from
  EXPECT_EQ(rt->stats().checkpoints_started, 0);
  EXPECT_EQ(job.published().request_ack, 1);
  job.request(2);  // a new request is answered by a new save
  EXPECT_EQ(rt->step_end(4), Action::kCheckpoint);
  ASSERT_TRUE(rt->wait().ok());
  EXPECT_EQ(job.published().request_ack, 2);
}

// When the save that was answering a request fails, the request gets a new checkpoint.
TEST(RuntimeRequests, AFailedSaveInFlightLeavesTheRequestOpen) {
  RequestJob job;
  auto rt = job.runtime();
  job.request_during_a_save(rt.get());
  job.fs.fail_sync = true;
  job.gate.release();
  EXPECT_FALSE(rt->wait().ok());
  EXPECT_EQ(job.published().request_ack, 0);
  job.fs.fail_sync = false;
  EXPECT_EQ(rt->step_end(2), Action::kCheckpoint);  // not a periodic step: the open request
  ASSERT_TRUE(rt->wait().ok());
  EXPECT_EQ(job.published().request_ack, 1);
}

}  // namespace
}  // namespace preempt
