// The stop-step agreement protocol (torch-free part). See include/preempt/coord.h.
#include "preempt/coord.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "preempt/log.h"
#include "preempt/signal.h"

namespace preempt {

Deadline EffectiveDeadline(Deadline deadline, UntilStop until_stop) {
  return until_stop == UntilStop::kYes ? deadline.min(StopDeadline()) : deadline;
}

namespace {
// The result of a blocking allreduce that already ran (the default asynchronous variant).
class DonePending : public Collective::Pending {
 public:
  DonePending(Status st, const int64_t* values, int n) : st_(std::move(st)), values_(values, values + n) {}
  Status wait(Deadline, UntilStop, int64_t* out) override {
    if (st_.ok()) std::copy(values_.begin(), values_.end(), out);
    return st_;
  }

 private:
  Status st_;
  std::vector<int64_t> values_;
};
}  // namespace

std::unique_ptr<Collective::Pending> Collective::allreduce_max_async(const int64_t* values, int n) {
  std::vector<int64_t> v(values, values + n);
  Status st = allreduce_max(v.data(), n, Deadline::InSeconds(300), UntilStop::kNo);
  return std::make_unique<DonePending>(std::move(st), v.data(), n);
}

StopCoordinator::~StopCoordinator() {
  int64_t ignored[3];
  if (inflight_) (void)inflight_->wait(Deadline::InSeconds(5), UntilStop::kNo, ignored);
}

StopCoordinator::StopCoordinator(Collective* collective, CoordOptions options)
    : collective_(collective), options_(options) {
  if (options_.check_every < 1) options_.check_every = 1;
}

Status StopCoordinator::check(int64_t step, bool local_stop, bool local_checkpoint, Deadline local_deadline,
                              UntilStop until_stop, StopDecision* out) {
  *out = StopDecision{};
  out->step = step;
  out->deadline = local_deadline;
  if (!is_check_step(step)) return Status::OK();
  auto t0 = std::chrono::steady_clock::now();
  // Remaining time travels as a duration (clocks of different hosts are not comparable);
  // MAX over −remaining_ms gives the smallest remaining time.
  constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::min() / 2;
  int64_t remaining_ms = kNoDeadline;
  if (!local_deadline.is_never()) {
    remaining_ms = -std::chrono::duration_cast<std::chrono::milliseconds>(local_deadline.remaining()).count();
  }
  int64_t v[3] = {local_stop ? 1 : 0, local_checkpoint ? 1 : 0, remaining_ms};
  Deadline bound = local_deadline.min(Deadline::InSeconds(options_.collective_timeout_s));
  Status st;
  if (!options_.pipelined) {
    st = collective_->allreduce_max(v, 3, bound, until_stop);
  } else {
    // Consume the exchange launched at the previous check step (all ranks launched it at the
    // same step), then launch this step's. The first check step only launches.
    bool have = false;
    int64_t mine[3] = {v[0], v[1], v[2]};
    if (inflight_) {
      st = inflight_->wait(bound, until_stop, v);
      inflight_.reset();
      have = true;
    }
    if (!have) v[0] = v[1] = 0, v[2] = kNoDeadline;
    if (have && v[2] != kNoDeadline) {
      // The remaining time was measured when the exchange was launched.
      auto left = std::chrono::milliseconds(-v[2]) - std::chrono::duration_cast<std::chrono::milliseconds>(
                                                         std::chrono::steady_clock::now() - inflight_launched_);
      v[2] = -std::max<int64_t>(0, left.count());
    }
    if (st.ok() && !(have && v[0] != 0)) {
      inflight_launched_ = std::chrono::steady_clock::now();
      inflight_ = collective_->allreduce_max_async(mine, 3);
    }
  }
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.checks++;
  stats_.last_check_s = dt;
  stats_.total_check_s += dt;
  stats_.max_check_s = std::max(stats_.max_check_s, dt);
  if (!st.ok()) return st.with_context("stop agreement at step " + std::to_string(step));
  out->checked = true;
  out->stop = v[0] != 0;
  out->checkpoint = v[1] != 0;
  if (v[2] != kNoDeadline) {
    Deadline agreed = Deadline::In(std::chrono::milliseconds(-v[2]));
    out->deadline = local_deadline.min(agreed);
  }
  return Status::OK();
}

Status DrainAll(const std::vector<DrainSource*>& sources, Deadline deadline) {
  Status first;
  for (DrainSource* s : sources) {
    if (!s) continue;
    Status st = s->drain(deadline);
    if (!st.ok()) {
      PREEMPT_LOG_WARN("drain of %s: %s", s->name().c_str(), st.to_string().c_str());
      if (first.ok()) first = st;
    }
  }
  return first;
}

}  // namespace preempt
