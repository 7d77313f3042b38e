// DeferredSaveHandle: a save submitted by the background copy of an overlapped snapshot.
#include "torch/deferred_save.h"

namespace preempt::torch::internal {

void DeferredSaveHandle::submitted(std::shared_ptr<SaveHandle> inner) {
  bool cancel_now;
  {
    std::lock_guard<std::mutex> lk(mu_);
    inner_ = inner;
    cancel_now = cancelled_;
  }
  cv_.notify_all();
  if (cancel_now) inner->cancel();  // cancelled between the copy thread's check and submission
}

void DeferredSaveHandle::failed(Status why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    failed_ = true;
    failure_ = std::move(why);
  }
  cv_.notify_all();
}

bool DeferredSaveHandle::cancelled() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cancelled_;
}

std::shared_ptr<SaveHandle> DeferredSaveHandle::inner() const {
  std::lock_guard<std::mutex> lk(mu_);
  return inner_;
}

bool DeferredSaveHandle::durable() const {
  auto h = inner();
  return h && h->durable();
}

bool DeferredSaveHandle::done() const {
  std::shared_ptr<SaveHandle> h;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) return true;
    h = inner_;
  }
  return h && h->done();
}

Status DeferredSaveHandle::wait(Deadline deadline) {
  std::shared_ptr<SaveHandle> h;
  {
    std::unique_lock<std::mutex> lk(mu_);
    auto ready = [&] { return failed_ || inner_ != nullptr; };
    if (deadline.is_never()) cv_.wait(lk, ready);
    else if (!cv_.wait_until(lk, deadline.time(), ready))
      return Status(StatusCode::kDeadlineExceeded, "checkpoint step " + std::to_string(step_) + ": still copying");
    if (failed_) return failure_;
    h = inner_;
  }
  return h->wait(deadline);
}

Status DeferredSaveHandle::status() const {
  std::shared_ptr<SaveHandle> h;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) return failure_;
    h = inner_;
  }
  return h ? h->status() : Status::OK();
}

uint64_t DeferredSaveHandle::bytes_total() const {
  auto h = inner();
  return h ? h->bytes_total() : bytes_;
}

uint64_t DeferredSaveHandle::bytes_written() const {
  auto h = inner();
  return h ? h->bytes_written() : 0;
}

void DeferredSaveHandle::cancel() {
  std::shared_ptr<SaveHandle> h;
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancelled_ = true;
    h = inner_;
  }
  if (h) h->cancel();
}

SaveStats DeferredSaveHandle::stats() const {
  auto h = inner();
  if (h) return h->stats();
  SaveStats s;
  s.bytes = bytes_;
  return s;
}

std::string DeferredSaveHandle::path() const {
  auto h = inner();
  return h ? h->path() : std::string();
}

}  // namespace preempt::torch::internal
