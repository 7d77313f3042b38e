// See staged_save.h.
#include "staged_save.h"

#include <exception>
#include <string>

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

StagedSave::StagedSave(Store* store, SaveRequest req, const std::vector<CopyRange>& copies,
                       std::shared_ptr<DeferredSaveHandle> previous)
    : store_(store),
      req_(std::move(req)),
      copy_(copies),
      previous_(std::move(previous)),
      handle_(std::make_shared<DeferredSaveHandle>(req_.step, TotalBytes(req_), StepPath(*store, req_.step))) {
  thread_ = std::thread([this] { run(); });
}

StagedSave::~StagedSave() {
  if (thread_.joinable()) thread_.join();
}

void StagedSave::run() {
  (void)copy_.copy();
  if (previous_) previous_->wait_submitted();
  previous_.reset();
  if (handle_->cancelled()) {
    handle_->failed(Status(StatusCode::kAborted, "save of step " + std::to_string(req_.step) + " cancelled"));
    return;
  }
  try {
    handle_->submitted(store_->save_async(std::move(req_)));  // cancels it if cancel() came meanwhile
  } catch (const std::exception& e) {
    handle_->failed(Status(StatusCode::kInternal, std::string("submitting the save: ") + e.what()));
  }
}

}  // namespace preempt::python
