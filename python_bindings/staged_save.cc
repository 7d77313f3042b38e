// See staged_save.h.
#include "staged_save.h"

#include <cstring>

namespace preempt::python {
namespace {

uint64_t TotalBytes(const SaveRequest& req) {
  uint64_t n = 0;
  for (const auto& it : req.items) n += it.nbytes;
  return n;
}

std::string StepPath(const Store& store, int64_t step) {
  std::string root = store.options().root;
  if (!root.empty() && root.back() != '/') root += '/';
  return root + StepDirName(step);
}

}  // namespace

StagedSave::StagedSave(Store* store, SaveRequest req, std::vector<StagingCopy> copies,
                       std::shared_ptr<StagedSave> previous)
    : store_(store),
      req_(std::move(req)),
      copies_(std::move(copies)),
      previous_(std::move(previous)),
      step_(req_.step),
      bytes_total_(TotalBytes(req_)),
      path_(StepPath(*store, req_.step)) {
  thread_ = std::thread([this] { run(); });
}

StagedSave::~StagedSave() {
  if (thread_.joinable()) thread_.join();
}

void StagedSave::run() {
  for (const auto& c : copies_) std::memcpy(c.dst, c.src, c.nbytes);
  {
    std::lock_guard<std::mutex> l(mu_);
    staged_ = true;
  }
  cv_.notify_all();
  if (previous_) previous_->wait_submitted();
  previous_.reset();
  std::shared_ptr<SaveHandle> h;
  bool cancelled;
  {
    std::lock_guard<std::mutex> l(mu_);
    cancelled = cancelled_;
  }
  if (!cancelled) h = store_->save_async(std::move(req_));
  {
    std::lock_guard<std::mutex> l(mu_);
    inner_ = h;
    submitted_ = true;
    if (cancelled_ && inner_) inner_->cancel();  // cancelled while being submitted
  }
  cv_.notify_all();
}

bool StagedSave::staged() const {
  std::lock_guard<std::mutex> l(mu_);
  return staged_;
}

bool StagedSave::wait_staged(Deadline deadline) {
  std::unique_lock<std::mutex> l(mu_);
  if (deadline.is_never()) cv_.wait(l, [&] { return staged_; });
  else cv_.wait_until(l, deadline.time(), [&] { return staged_; });
  return staged_;
}

void StagedSave::wait_submitted() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return submitted_; });
}

std::shared_ptr<SaveHandle> StagedSave::inner() const {
  std::lock_guard<std::mutex> l(mu_);
  return inner_;
}

bool StagedSave::durable() const {
  auto h = inner();
  return h && h->durable();
}

bool StagedSave::done() const {
  std::lock_guard<std::mutex> l(mu_);
  if (!submitted_) return false;
  return !inner_ || inner_->done();
}

Status StagedSave::wait(Deadline deadline) {
  {
    std::unique_lock<std::mutex> l(mu_);
    if (deadline.is_never()) cv_.wait(l, [&] { return submitted_; });
    else if (!cv_.wait_until(l, deadline.time(), [&] { return submitted_; }))
      return Status(StatusCode::kDeadlineExceeded, "save of step " + std::to_string(step_) + ": still copying");
  }
  auto h = inner();
  if (!h) return Status(StatusCode::kAborted, "save of step " + std::to_string(step_) + " cancelled");
  return h->wait(deadline);
}

Status StagedSave::status() const {
  std::lock_guard<std::mutex> l(mu_);
  if (inner_) return inner_->status();
  if (submitted_) return Status(StatusCode::kAborted, "save of step " + std::to_string(step_) + " cancelled");
  return Status::OK();
}

uint64_t StagedSave::bytes_written() const {
  auto h = inner();
  return h ? h->bytes_written() : 0;
}

void StagedSave::cancel() {
  std::shared_ptr<SaveHandle> h;
  {
    std::lock_guard<std::mutex> l(mu_);
    cancelled_ = true;
    h = inner_;
  }
  if (h) h->cancel();
}

SaveStats StagedSave::stats() const {
  auto h = inner();
  return h ? h->stats() : SaveStats{};
}

std::string StagedSave::path() const {
  auto h = inner();
  return h ? h->path() : path_;
}

}  // namespace preempt::python
