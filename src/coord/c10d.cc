// c10d adapters for the coordinator. The only TU of preempt_coord that includes LibTorch.
#include "preempt/coord_c10d.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#if defined(PREEMPT_HAVE_GLOO)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "preempt/log.h"
#include "preempt/signal.h"

namespace preempt {

namespace {
// c10::Error messages carry a multi-line backtrace; the first line is the message.
std::string FirstLine(const char* what) {
  std::string s(what);
  size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}
}  // namespace

Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work, Deadline deadline, UntilStop until_stop,
                const std::string& what) {
  if (!work) return Status::OK();
  // Polls instead of Work::wait(timeout): with UntilStop::kYes the effective deadline can move
  // earlier while we wait, and a timed-out Work::wait throws a c10::Error whose backtrace costs
  // milliseconds.
  auto t0 = std::chrono::steady_clock::now();
  int64_t sleep_us = 20;
  try {
    while (!work->isCompleted()) {
      if (EffectiveDeadline(deadline, until_stop).expired()) {
        return Status(StatusCode::kDeadlineExceeded, what + ": not complete at the deadline");
      }
      if (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(2)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
        sleep_us = std::min<int64_t>(sleep_us * 2, 1000);
      }
    }
    work->wait();  // completed: rethrows the op's error, if any
  } catch (const std::exception& e) {
    return Status(StatusCode::kAborted, what + " failed: " + FirstLine(e.what()));
  }
  return Status::OK();
}

C10dCollectiveBase::C10dCollectiveBase(int rank, int size, std::string name, C10dAllreduceFn allreduce)
    : rank_(rank), size_(size), name_(std::move(name)), allreduce_(std::move(allreduce)) {}

namespace {

// One all-reduce(MAX) in flight. `tensor` is allocated here, and the Work keeps its own reference,
// so an abandoned operation that completes later writes only into memory it co-owns.
class C10dPending : public Collective::Pending {
 public:
  C10dPending(const C10dAllreduceFn& allreduce, const int64_t* values, int n, const std::string& name)
      : tensor_(torch::empty({n}, torch::kInt64)), what_(name + " allreduce(MAX)") {
    std::copy(values, values + n, tensor_.data_ptr<int64_t>());
    std::vector<at::Tensor> tensors{tensor_};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    try {
      work_ = allreduce(tensors, opts);
    } catch (const std::exception& e) {
      start_status_ = Status(StatusCode::kAborted, what_ + " could not start: " + FirstLine(e.what()));
    }
  }
  Status wait(Deadline deadline, UntilStop until_stop, int64_t* out) override {
    if (!start_status_.ok()) return start_status_;
    Status st = WaitWork(work_, deadline, until_stop, what_);
    if (st.ok()) std::copy(tensor_.data_ptr<int64_t>(), tensor_.data_ptr<int64_t>() + tensor_.numel(), out);
    return st;
  }

 private:
  at::Tensor tensor_;
  c10::intrusive_ptr<c10d::Work> work_;
  Status start_status_;
  std::string what_;
};

}  // namespace

Status C10dCollectiveBase::allreduce_max(int64_t* values, int n, Deadline deadline, UntilStop until_stop) {
  return C10dPending(allreduce_, values, n, name_).wait(deadline, until_stop, values);
}

std::unique_ptr<Collective::Pending> C10dCollectiveBase::allreduce_max_async(const int64_t* values, int n) {
  return std::make_unique<C10dPending>(allreduce_, values, n, name_);
}

void WorkDrain::add(c10::intrusive_ptr<c10d::Work> work, std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  works_.erase(std::remove_if(works_.begin(), works_.end(),
                              [](const auto& w) {
                                try {
                                  return w.first->isCompleted();
                                } catch (...) {
                                  return false;
                                }
                              }),
               works_.end());
  works_.emplace_back(std::move(work), std::move(what));
}

Status WorkDrain::drain(Deadline deadline) { return wait_all(deadline, UntilStop::kNo); }

Status WorkDrain::wait_until_stop_deadline() { return wait_all(Deadline::Never(), UntilStop::kYes); }

Status WorkDrain::wait_all(Deadline deadline, UntilStop until_stop) {
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, std::string>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    works.swap(works_);
  }
  Status first;
  size_t late = 0;
  for (auto& [w, what] : works) {
    Status st = WaitWork(w, deadline, until_stop, what);
    if (st.code() == StatusCode::kDeadlineExceeded) {
      ++late;
      try {
        w->abort();  // gloo 1.13 does not implement it; NCCL aborts the communicator
      } catch (const std::exception& e) {
        PREEMPT_LOG_DEBUG("abort of %s: %s", what.c_str(), e.what());
      }
    }
    if (!st.ok() && first.ok()) first = st;
  }
  if (late > 0) {
    return Status(StatusCode::kDeadlineExceeded,
                  std::to_string(late) + " of " + std::to_string(works.size()) +
                      " registered collectives still in flight at the drain deadline (aborted): " + first.message());
  }
  return first;
}

#if defined(PREEMPT_HAVE_GLOO)
c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGlooGroup(const std::string& store_path, int rank, int size,
                                                         double timeout_s) {
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, size);
  auto opts = c10d::ProcessGroupGloo::Options::create(
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}
#endif

}  // namespace preempt
