// preempt::torch::TrainingState: optimizer/module/RNG/sampler/extras round trips through a real
// Store, strictness, error messages naming the tensor, staging buffer reuse.
#include "preempt/torch/training_state.h"

#include <chrono>
#include <cstring>
#include <thread>

#include <cereal/types/vector.hpp>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "support/test_util.h"

namespace pt = preempt::torch;
using preempt::testing::TempDir;

namespace {

bool BitEqual(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor x = a.contiguous().cpu(), y = b.contiguous().cpu();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

struct NetImpl : torch::nn::Module {
  explicit NetImpl(int hidden = 16) {
    fc1 = register_module("fc1", torch::nn::Linear(8, hidden));
    bn = register_module("bn", torch::nn::BatchNorm1d(hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 4));
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

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const std::string& kind, Net& net) {
  using namespace torch::optim;
  auto params = net->parameters();
  if (kind == "sgd") return std::make_unique<SGD>(params, SGDOptions(0.05).momentum(0.9).nesterov(true));
  if (kind == "adam") return std::make_unique<Adam>(params, AdamOptions(1e-2).amsgrad(true));
  if (kind == "adamw") return std::make_unique<AdamW>(params, AdamWOptions(1e-2));
  if (kind == "rmsprop") return std::make_unique<RMSprop>(params, RMSpropOptions(1e-2).momentum(0.5).centered(true));
  return std::make_unique<Adagrad>(params, AdagradOptions(5e-2).lr_decay(1e-3));
}

void TrainSteps(Net& net, torch::optim::Optimizer& opt, int n) {
  for (int i = 0; i < n; ++i) {
    auto x = torch::randn({16, 8});
    auto y = torch::randn({16, 4});
    opt.zero_grad();
    auto loss = torch::mse_loss(net->forward(x), y);
    loss.backward();
    opt.step();
  }
}

double Lr(torch::optim::Optimizer& opt) { return opt.param_groups()[0].options().get_lr(); }

std::vector<at::Tensor> Snapshot(Net& net, torch::optim::Optimizer& opt) {
  std::vector<at::Tensor> out;
  for (auto& t : net->parameters()) out.push_back(t.detach().clone());
  for (auto& t : net->buffers()) out.push_back(t.detach().clone());
  return out;
}

preempt::StoreOptions StoreAt(const std::string& dir) {
  preempt::StoreOptions o;
  o.root = dir;
  o.keep_last = 5;
  // PREEMPT_TEST_IO=posix forces the pwrite/pread backend (default: io_uring when allowed).
  const char* io = getenv("PREEMPT_TEST_IO");
  o.io_backend = io && std::string(io) == "posix" ? preempt::IoBackend::kPosix : preempt::IoBackend::kAuto;
  return o;
}

pt::TrainingStateOptions OneBufferNoRng() {
  pt::TrainingStateOptions o;
  o.staging_buffers = 1;
  o.capture_rng = false;
  return o;
}

class OptimizerRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(OptimizerRoundTrip, ResumedTrainingIsBitwiseEqual) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  const std::string kind = GetParam();

  torch::manual_seed(1);
  Net net;
  auto opt = MakeOptimizer(kind, net);
  TrainSteps(net, *opt, 3);
  opt->param_groups()[0].options().set_lr(0.0123);  // a schedule changed it
  pt::TrainingState state;
  state.track("model", net);
  state.track("optim", *opt);
  auto h = state.checkpoint_async(store, 3).handle;
  ASSERT_TRUE(h);
  ASSERT_TRUE(h->wait().ok()) << h->status().to_string();
  TrainSteps(net, *opt, 2);
  auto want = Snapshot(net, *opt);

  // A fresh model (other init) and an optimizer that never stepped: state is adopted.
  torch::manual_seed(99);
  Net net2;
  auto opt2 = MakeOptimizer(kind, net2);
  pt::TrainingState state2;
  state2.track("model", net2);
  state2.track("optim", *opt2);
  auto step = state2.restore(store);
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, 3);
  EXPECT_EQ(Lr(*opt2), 0.0123);
  TrainSteps(net2, *opt2, 2);
  auto got = Snapshot(net2, *opt2);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(BitEqual(want[i], got[i])) << kind << " tensor " << i;

  // Restoring into the optimizer that has state already writes into its tensors in place.
  ASSERT_EQ(*state.restore(store), 3);
  EXPECT_EQ(Lr(*opt), 0.0123);
  TrainSteps(net, *opt, 2);
  auto again = Snapshot(net, *opt);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(BitEqual(want[i], again[i])) << kind << " in-place tensor " << i;

  // Both optimizers' state tensors agree after the same steps.
  auto names = state.entry_names();
  auto names2 = state2.entry_names();
  EXPECT_EQ(names, names2);
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerRoundTrip,
                         ::testing::Values("sgd", "adam", "adamw", "rmsprop", "adagrad"));

TEST(TrainingState, OptimizerStateTensorsComeBackExactly) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  torch::manual_seed(3);
  Net net;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  TrainSteps(net, opt, 4);
  pt::TrainingState a;
  a.track("model", net);
  a.track("optim", opt);
  ASSERT_TRUE(a.checkpoint_async(store, 4).handle->wait().ok());

  Net net2;
  torch::optim::Adam opt2(net2->parameters(), torch::optim::AdamOptions(1e-3));
  pt::TrainingState b;
  b.track("model", net2);
  b.track("optim", opt2);
  ASSERT_EQ(*b.restore(store), 4);
  auto p1 = net->parameters(), p2 = net2->parameters();
  for (size_t i = 0; i < p1.size(); ++i) {
    auto& s1 = static_cast<torch::optim::AdamParamState&>(
        *opt.state().at(c10::guts::to_string(p1[i].unsafeGetTensorImpl())));
    auto& s2 = static_cast<torch::optim::AdamParamState&>(
        *opt2.state().at(c10::guts::to_string(p2[i].unsafeGetTensorImpl())));
    EXPECT_EQ(s1.step(), s2.step());
    EXPECT_TRUE(BitEqual(s1.exp_avg(), s2.exp_avg()));
    EXPECT_TRUE(BitEqual(s1.exp_avg_sq(), s2.exp_avg_sq()));
    EXPECT_TRUE(BitEqual(p1[i], p2[i]));
  }
}

// The stop checkpoint writes straight from the live tensors; what comes back is what was there.
TEST(TrainingState, CheckpointInPlaceRoundTrips) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  torch::manual_seed(5);
  Net net;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  TrainSteps(net, opt, 3);
  pt::TrainingState a;
  a.track("model", net);
  a.track("optim", opt);
  pt::CheckpointResult c = a.checkpoint_in_place(store, 3);
  EXPECT_TRUE(c.snapshot.in_place);
  EXPECT_EQ(c.snapshot.bytes, a.state_bytes());
  auto h = c.handle;
  ASSERT_TRUE(h);
  ASSERT_TRUE(h->wait().ok()) << h->status().to_string();
  EXPECT_EQ(a.stats().staging_bytes, 0u) << "no staging was allocated";
  std::vector<at::Tensor> want = Snapshot(net, opt);

  Net net2;
  torch::optim::Adam opt2(net2->parameters(), torch::optim::AdamOptions(1e-3));
  pt::TrainingState b;
  b.track("model", net2);
  b.track("optim", opt2);
  ASSERT_EQ(*b.restore(store), 3);
  std::vector<at::Tensor> got = Snapshot(net2, opt2);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(BitEqual(got[i], want[i])) << i;
}

TEST(TrainingState, ShapeMismatchNamesTheTensor) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  Net net(16);
  pt::TrainingState a;
  a.track("model", net);
  ASSERT_TRUE(a.checkpoint_async(store, 1).handle->wait().ok());

  Net wider(17);
  pt::TrainingState b;
  b.track("model", wider);
  try {
    b.restore(store);
    FAIL() << "restore into another shape succeeded";
  } catch (const preempt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model:fc1.weight"), std::string::npos) << e.what();
  }
}

TEST(TrainingState, StrictAndNonStrict) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  Net net;
  int64_t counter = 41;
  pt::TrainingState a;
  a.track("model", net);
  a.track_extra("counter", counter);
  ASSERT_TRUE(a.checkpoint_async(store, 1).handle->wait().ok());

  // Extra entry in the checkpoint.
  Net net2;
  pt::TrainingState b;
  b.track("model", net2);
  try {
    b.restore(store);
    FAIL() << "strict restore ignored an untracked entry";
  } catch (const preempt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("counter"), std::string::npos) << e.what();
  }
  preempt::RestoreOptions lax;
  lax.strict = false;
  EXPECT_EQ(*b.restore(store, lax), 1);
  for (size_t i = 0; i < net->parameters().size(); ++i)
    EXPECT_TRUE(BitEqual(net->parameters()[i], net2->parameters()[i]));

  // Missing entry.
  int64_t counter3 = 0;
  std::string other = "x";
  Net net3;
  pt::TrainingState c;
  c.track("model", net3);
  c.track_extra("counter", counter3);
  c.track_extra("other", other);
  try {
    c.restore(store);
    FAIL() << "strict restore accepted a missing entry";
  } catch (const preempt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("other"), std::string::npos) << e.what();
  }
  EXPECT_EQ(*c.restore(store, lax), 1);
  EXPECT_EQ(counter3, 41);
  EXPECT_EQ(other, "x");
}

TEST(TrainingState, RngAndDropoutStreamResume) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  torch::manual_seed(7);
  (void)torch::randn({5});
  pt::TrainingState s;
  ASSERT_TRUE(s.checkpoint_async(store, 1).handle->wait().ok());
  auto a = torch::randn({100});
  auto d = torch::dropout(torch::ones({64}), 0.5, true);
  torch::manual_seed(12345);
  ASSERT_EQ(*s.restore(store), 1);
  EXPECT_TRUE(BitEqual(a, torch::randn({100})));
  EXPECT_TRUE(BitEqual(d, torch::dropout(torch::ones({64}), 0.5, true)));
}

template <class S>
std::vector<size_t> Draw(S& s, int batches, size_t bs) {
  std::vector<size_t> out;
  for (int i = 0; i < batches; ++i) {
    auto b = s.next(bs);
    if (!b) {
      s.reset();
      out.push_back(SIZE_MAX);  // epoch boundary marker
      continue;
    }
    out.insert(out.end(), b->begin(), b->end());
  }
  return out;
}

template <class S, class Make>
void CheckSamplerResumes(Make make, bool distributed) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  torch::manual_seed(5);
  S s = make();
  if constexpr (std::is_base_of_v<torch::data::samplers::DistributedSampler<>, S>) s.set_epoch(3);
  s.reset();
  Draw(s, 3, 7);
  pt::TrainingState a;
  a.track("sampler", s);
  ASSERT_TRUE(a.checkpoint_async(store, 3).handle->wait().ok());
  auto want = Draw(s, 25, 7);  // crosses an epoch boundary

  torch::manual_seed(6);
  S s2 = make();
  pt::TrainingState b;
  b.track("sampler", s2);
  ASSERT_EQ(*b.restore(store), 3);
  EXPECT_EQ(want, Draw(s2, 25, 7));
}

TEST(TrainingState, SamplersResumeAtTheNextUnseenSample) {
  namespace ds = torch::data::samplers;
  CheckSamplerResumes<ds::SequentialSampler>([] { return ds::SequentialSampler(100); }, false);
  CheckSamplerResumes<ds::DistributedSequentialSampler>([] { return ds::DistributedSequentialSampler(100, 3, 1); }, true);
  CheckSamplerResumes<ds::DistributedRandomSampler>([] { return ds::DistributedRandomSampler(100, 2, 1); }, true);
  CheckSamplerResumes<pt::ResumableRandomSampler>([] { return pt::ResumableRandomSampler(100); }, false);
  CheckSamplerResumes<pt::ResumableRandomSampler>([] { return pt::ResumableRandomSampler(100, 77); }, false);
}

struct Schedule {
  int64_t last_step = 0;
  double gamma = 0.5;
  std::vector<double> history;
  template <class A>
  void serialize(A& ar) { ar(last_step, gamma, history); }
};

TEST(TrainingState, CerealExtrasAndCursor) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  Schedule sched{17, 0.25, {1.0, 0.5}};
  pt::DataCursor cur{2, 5, 1234};
  pt::TrainingState a;
  a.track_extra("sched", sched);
  a.track("cursor", cur);
  ASSERT_TRUE(a.checkpoint_async(store, 9).handle->wait().ok());
  Schedule s2;
  pt::DataCursor c2;
  pt::TrainingState b;
  b.track_extra("sched", s2);
  b.track("cursor", c2);
  ASSERT_EQ(*b.restore(store), 9);
  EXPECT_EQ(s2.last_step, 17);
  EXPECT_EQ(s2.gamma, 0.25);
  EXPECT_EQ(s2.history, sched.history);
  EXPECT_EQ(c2.epoch, 2);
  EXPECT_EQ(c2.batch_index, 5);
  EXPECT_EQ(c2.samples_seen, 1234);
}

TEST(TrainingState, NothingToRestore) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  Net net;
  pt::TrainingState s;
  s.track("model", net);
  EXPECT_FALSE(s.restore(store).has_value());
}

// The snapshot is the state at snapshot() time, even when training changes it right after and a
// single staging buffer is reused by back-to-back checkpoints.
TEST(TrainingState, StagingIsolatesAndIsReused) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  auto w = torch::zeros({1 << 20});  // 4 MiB
  torch::nn::Module m;
  m.register_buffer("w", w);
  pt::TrainingStateOptions o;
  o.staging_buffers = 1;
  pt::TrainingState s(o);
  s.track("m", m);
  std::vector<std::shared_ptr<preempt::SaveHandle>> hs;
  for (int step = 1; step <= 3; ++step) {
    w.fill_(static_cast<float>(step));
    hs.push_back(s.checkpoint_async(store, step, pt::WhenBusy::kWait).handle);
    w.fill_(-1.0f);  // training goes on while the save persists
  }
  for (auto& h : hs) ASSERT_TRUE(h->wait().ok()) << h->status().to_string();
  EXPECT_EQ(s.stats().snapshots, 3);
  EXPECT_LE(s.stats().staging_bytes, (4u << 20) + 2 * 4096u);
  for (int step = 1; step <= 3; ++step) {
    preempt::RestoreOptions ro;
    ro.step = step;
    ASSERT_EQ(*s.restore(store, ro), step);
    EXPECT_TRUE(torch::all(w == static_cast<float>(step)).item<bool>()) << "step " << step;
  }

  // kSkip never blocks: either a buffer was free or the checkpoint is counted as skipped.
  pt::TrainingStateOptions o2;
  o2.staging_buffers = 1;
  pt::TrainingState s2(o2);
  s2.track("m", m);
  int started = 0;
  for (int step = 10; step < 14; ++step) {
    pt::CheckpointResult c = s2.checkpoint_async(store, step, pt::WhenBusy::kSkip);
    EXPECT_EQ(c.snapshot.skipped, c.handle == nullptr);
    started += c.handle ? 1 : 0;
  }
  ASSERT_TRUE(s2.wait_all().ok());
  EXPECT_EQ(started + s2.stats().skipped, 4);
  EXPECT_GE(started, 1);
}

// A StepLR schedule resumed from a checkpoint decays at the same steps as one never stopped: the
// scheduler's step count comes back with the optimizer's learning rates.
std::vector<double> TrainWithSchedule(Net& net, torch::optim::Optimizer& opt, torch::optim::StepLR& sched, int n) {
  std::vector<double> lrs;
  for (int i = 0; i < n; ++i) {
    TrainSteps(net, opt, 1);
    sched.step();
    lrs.push_back(Lr(opt));
  }
  return lrs;
}

TEST(TrainingState, StepLrScheduleResumesExactly) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  torch::manual_seed(11);
  Net net;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(0.1));
  torch::optim::StepLR sched(opt, /*step_size=*/3, /*gamma=*/0.5);
  pt::TrainingState a;
  a.track("model", net);
  a.track("optim", opt);
  a.track("lr", sched);
  TrainWithSchedule(net, opt, sched, 5);  // lr halved once, at the 3rd step
  ASSERT_TRUE(a.checkpoint_async(store, 5).handle->wait().ok());
  const std::vector<double> want_lrs = TrainWithSchedule(net, opt, sched, 8);
  const std::vector<at::Tensor> want = Snapshot(net, opt);

  auto resume = [&](bool track_scheduler) {
    torch::manual_seed(99);
    Net net2;
    torch::optim::Adam opt2(net2->parameters(), torch::optim::AdamOptions(0.1));
    torch::optim::StepLR sched2(opt2, 3, 0.5);
    pt::TrainingState b;
    b.track("model", net2);
    b.track("optim", opt2);
    if (track_scheduler) b.track("lr", sched2);
    preempt::RestoreOptions lax;
    lax.strict = track_scheduler;  // without the scheduler the "lr" entry is ignored
    EXPECT_EQ(*b.restore(store, lax), 5);
    std::vector<double> lrs = TrainWithSchedule(net2, opt2, sched2, 8);
    return std::make_pair(lrs, Snapshot(net2, opt2));
  };
  auto [lrs, got] = resume(true);
  EXPECT_EQ(lrs, want_lrs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(BitEqual(got[i], want[i])) << i;

  // The control: a scheduler that restarts counting decays at the wrong steps.
  EXPECT_NE(resume(false).first, want_lrs);
}

// The learning rates live in the optimizer; a scheduler restored without it is refused.
TEST(TrainingState, LrSchedulerWithoutItsOptimizerIsRefused) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::StepLR sched(opt, 1, 0.5);
  for (int i = 0; i < 2; ++i) sched.step();  // lr 0.1 -> 0.05
  pt::TrainingState a(OneBufferNoRng());
  a.track("lr", sched);
  ASSERT_TRUE(a.checkpoint_async(store, 2).handle->wait().ok());

  torch::optim::SGD opt2(net->parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::StepLR sched2(opt2, 1, 0.5);
  pt::TrainingState b(OneBufferNoRng());
  b.track("lr", sched2);
  try {
    b.restore(store);
    FAIL() << "a scheduler whose optimizer was not restored was accepted";
  } catch (const preempt::Error& e) {
    EXPECT_EQ(e.code(), preempt::StatusCode::kMismatch);
    EXPECT_NE(std::string(e.what()).find("LR scheduler 'lr'"), std::string::npos) << e.what();
  }
}

// The extension point: a kind written outside the library is checkpointed and restored like the
// built-in ones, strictness included.
class TrackedCounter : public pt::Tracked {
 public:
  TrackedCounter(std::string name, int64_t& value) : Tracked(std::move(name)), value_(value) {}
  void collect(std::vector<pt::Entry>* out) override {
    out->push_back(pt::Entry::Blob(entry("value"), pt::ToCerealBytes(value_)));
  }
  void expect(std::vector<preempt::RestoreTarget>* out) override { pt::ExpectOwned(out, entry("value")); }
  void apply(pt::RestoreContext& ctx) override {
    if (ctx.has(entry("value"))) pt::FromCerealBytes(ctx.take_blob(entry("value")), entry("value"), &value_);
  }

 private:
  int64_t& value_;
};

TEST(TrainingState, CustomTrackedKind) {
  TempDir dir;
  preempt::Store store(StoreAt(dir.path()));
  int64_t v = 1234;
  pt::TrainingState a;
  a.track(std::make_unique<TrackedCounter>("counter", v));
  EXPECT_EQ(a.entry_names(), (std::vector<std::string>{"counter:value", "rng:cpu"}));
  ASSERT_TRUE(a.checkpoint_async(store, 1).handle->wait().ok());
  int64_t w = 0;
  pt::TrainingState b;
  b.track(std::make_unique<TrackedCounter>("counter", w));
  ASSERT_EQ(*b.restore(store), 1);
  EXPECT_EQ(w, 1234);
  pt::TrainingState c;  // does not track the counter: strict restore refuses the checkpoint
  EXPECT_THROW(c.restore(store), preempt::Error);
}

TEST(TrainingState, UnsupportedOptimizerIsRefusedAtTrack) {
  Net net;
  torch::optim::LBFGS opt(net->parameters());
  pt::TrainingState s;
  try {
    s.track("optim", opt);
    FAIL() << "LBFGS was accepted";
  } catch (const preempt::Error& e) {
    EXPECT_EQ(e.code(), preempt::StatusCode::kInvalidArgument);
  }
}

// snapshot() says what it did: bytes and entries of the layout, allocation only the first time.
TEST(TrainingState, SnapshotReportsWhatItDid) {
  torch::nn::Module m;
  m.register_buffer("w", torch::ones({1000}));
  pt::TrainingState s(OneBufferNoRng());
  s.track("m", m);
  pt::SnapshotResult first = s.snapshot(1);
  EXPECT_FALSE(first.skipped);
  EXPECT_FALSE(first.in_place);
  EXPECT_EQ(first.step, 1);
  EXPECT_EQ(first.bytes, 4000u);
  EXPECT_EQ(first.bytes, s.state_bytes());
  EXPECT_EQ(first.entries, 1u);
  EXPECT_GT(s.stats().staging_bytes, 0u);
  pt::SnapshotResult second = s.snapshot(2);
  EXPECT_EQ(second.alloc_s, 0.0) << "warm staging is not reallocated";
  EXPECT_EQ(s.stats().snapshots, 2);
}

TEST(TrainingState, RejectsBadNames) {
  pt::TrainingState s;
  Net net;
  EXPECT_THROW(s.track("a:b", net), preempt::Error);
  s.track("model", net);
  EXPECT_THROW(s.track("model", net), preempt::Error);
}

}  // namespace
