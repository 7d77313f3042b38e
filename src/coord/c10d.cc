// c10d adapters for the coordinator. The only TU of preempt_coord that includes LibTorch.
#include "preempt/coord_c10d.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
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

Status WaitWork(const c10::intrusive_ptr<c10d::Work>& work, Deadline deadline, const std::string& what) {
  if (!work) return Status::OK();
  // Polls instead of Work::wait(timeout): the effective deadline can move earlier while we wait
  // (a stop signal arriving during a long collective sets StopDeadline()), and a timed-out
  // Work::wait throws a c10::Error whose backtrace costs milliseconds.
  auto t0 = std::chrono::steady_clock::now();
  int64_t sleep_us = 20;
  try {
    while (!work->isCompleted()) {
      Deadline effective = deadline.min(StopDeadline());
      if (effective.expired()) {
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

C10dCollectiveBase::C10dCollectiveBase(int rank, int size, std::string name, C10dAllreduceFn allreduce,
                                       C10dBarrierFn barrier)
    : rank_(rank), size_(size), name_(std::move(name)), allreduce_(std::move(allreduce)), barrier_(std::move(barrier)) {}

Status C10dCollectiveBase::allreduce_max(int64_t* values, int n, Deadline deadline) {
  at::Tensor t = torch::from_blob(values, {n}, torch::kInt64);  // CPU: reduced in place
  std::vector<at::Tensor> tensors{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = allreduce_(tensors, opts);
  } catch (const std::exception& e) {
    return Status(StatusCode::kAborted, name_ + " allreduce(MAX) could not start: " + FirstLine(e.what()));
  }
  return WaitWork(work, deadline, name_ + " allreduce(MAX)");
}

namespace {
class C10dPending : public Collective::Pending {
 public:
  C10dPending(at::Tensor t, c10::intrusive_ptr<c10d::Work> w, Status st, std::string what)
      : tensor_(std::move(t)), work_(std::move(w)), start_status_(std::move(st)), what_(std::move(what)) {}
  Status wait(Deadline deadline) override {
    if (!start_status_.ok()) return start_status_;
    return WaitWork(work_, deadline, what_);
  }

 private:
  at::Tensor tensor_;  // keeps the reduced buffer's view alive while the work runs
  c10::intrusive_ptr<c10d::Work> work_;
  Status start_status_;
  std::string what_;
};
}  // namespace

std::unique_ptr<Collective::Pending> C10dCollectiveBase::allreduce_max_async(int64_t* values, int n) {
  at::Tensor t = torch::from_blob(values, {n}, torch::kInt64);
  std::vector<at::Tensor> tensors{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  c10::intrusive_ptr<c10d::Work> work;
  Status st;
  try {
    work = allreduce_(tensors, opts);
  } catch (const std::exception& e) {
    st = Status(StatusCode::kAborted, name_ + " allreduce(MAX) could not start: " + FirstLine(e.what()));
  }
  return std::make_unique<C10dPending>(t, std::move(work), st, name_ + " allreduce(MAX)");
}

Status C10dCollectiveBase::barrier(Deadline deadline) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = barrier_();
  } catch (const std::exception& e) {
    return Status(StatusCode::kAborted, name_ + " barrier could not start: " + FirstLine(e.what()));
  }
  return WaitWork(work, deadline, name_ + " barrier");
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

size_t WorkDrain::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& w : works_) n += w.first->isCompleted() ? 0 : 1;
  return n;
}

Status WorkDrain::drain(Deadline deadline) {
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, std::string>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    works.swap(works_);
  }
  Status first;
  size_t late = 0;
  for (auto& [w, what] : works) {
    Status st = WaitWork(w, deadline, what);
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

c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGlooGroup(const std::string& store_path, int rank, int size,
                                                         double timeout_s) {
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, size);
  auto opts = c10d::ProcessGroupGloo::Options::create(
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, opts);
}

}  // namespace preempt
