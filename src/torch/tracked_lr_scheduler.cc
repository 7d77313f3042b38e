// Tracked kind: a torch::optim::LRScheduler (StepLR, or a subclass).
//   <lr>:state   step count and the learning rates of the scheduler's optimizer (cereal)
// LRScheduler::step() decides from its step count whether to change the rates, and keeps the
// count in a protected member with no accessor. The rates themselves live in the optimizer,
// which its own tracked entry restores; this entry checks that they agree.
#include <cstdio>
#include <limits>
#include <utility>

#include "torch/kinds.h"
#include "torch/records.h"

namespace preempt::torch::internal {
namespace {

using ::torch::optim::LRScheduler;

// A member pointer formed inside a derived class reaches LRScheduler's protected members on any
// LRScheduler (standard access rules; no layout assumption, no private access).
template <class T>
T MemberType(T LRScheduler::*);

struct SchedulerAccess : LRScheduler {
  using StepCount = decltype(MemberType(&SchedulerAccess::step_count_));
  static StepCount& step_count(LRScheduler& s) { return s.*(&SchedulerAccess::step_count_); }
  static std::vector<double> rates(const LRScheduler& s) { return (s.*(&SchedulerAccess::get_current_lrs))(); }
};

using records::SchedulerRecord;

std::string Join(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.17g", v[i]);
    out += (i ? ", " : "") + std::string(buf);
  }
  return out + "]";
}

class TrackedLrScheduler : public Tracked {
 public:
  TrackedLrScheduler(std::string name, LRScheduler& s) : Tracked(std::move(name)), s_(s) {}
  // After the optimizers: apply() compares the rates they restored.
  Stage stage() const override { return Stage::kDependent; }

  void collect(std::vector<Entry>* out) override {
    SchedulerRecord r;
    r.step_count = static_cast<int64_t>(SchedulerAccess::step_count(s_));
    r.rates = SchedulerAccess::rates(s_);
    out->push_back(Entry::Blob(entry("state"), ToCerealBytes(r)));
  }
  void expect(std::vector<RestoreTarget>* out) override { ExpectOwned(out, entry("state")); }
  void apply(RestoreContext& ctx) override {
    if (!ctx.has(entry("state"))) return;
    SchedulerRecord r;
    FromCerealBytes(ctx.take_blob(entry("state")), entry("state"), &r);
    using StepCount = SchedulerAccess::StepCount;
    if (r.step_count < 0 || static_cast<uint64_t>(r.step_count) > std::numeric_limits<StepCount>::max())
      throw Error(Status(StatusCode::kCorruption, "restore: entry '" + entry("state") + "': step count " +
                                                      std::to_string(r.step_count) + " out of range"));
    const std::vector<double> now = SchedulerAccess::rates(s_);
    if (now != r.rates)
      throw Error(Status(StatusCode::kMismatch,
                         "restore: LR scheduler '" + name() + "': its optimizer's learning rates are " + Join(now) +
                             ", the checkpoint's are " + Join(r.rates) +
                             " (track the scheduler's optimizer in the same TrainingState)"));
    SchedulerAccess::step_count(s_) = static_cast<StepCount>(r.step_count);
  }

 private:
  LRScheduler& s_;
};

}  // namespace

std::unique_ptr<Tracked> TrackLrScheduler(const std::string& name, LRScheduler& scheduler) {
  return std::make_unique<TrackedLrScheduler>(name, scheduler);
}

}  // namespace preempt::torch::internal
