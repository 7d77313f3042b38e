// The handle of a save that is submitted to the store later, by the background copy of an
// overlapped snapshot once the staging buffer holds every byte. Until then it reports "running";
// afterwards it forwards to the store's handle. A copy that fails (or a cancel that comes first)
// ends it with that Status, and nothing is submitted.
//
// Thread-safety: every method may be called from any thread (the copy thread calls submitted()
// or failed(); the trainer waits).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "preempt/store.h"

namespace preempt::torch::internal {

class DeferredSaveHandle : public SaveHandle {
 public:
  DeferredSaveHandle(int64_t step, uint64_t bytes) : step_(step), bytes_(bytes) {}

  // The save was submitted: from now on this handle is `inner`.
  void submitted(std::shared_ptr<SaveHandle> inner);
  // The save will never be submitted (a failed copy, or cancelled first).
  void failed(Status why);
  bool cancelled() const;

  int64_t step() const override { return step_; }
  bool durable() const override;
  bool done() const override;
  Status wait(Deadline deadline) override;
  Status status() const override;
  uint64_t bytes_total() const override;
  uint64_t bytes_written() const override;
  void cancel() override;
  SaveStats stats() const override;
  std::string path() const override;

 private:
  std::shared_ptr<SaveHandle> inner() const;

  const int64_t step_;
  const uint64_t bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<SaveHandle> inner_;
  Status failure_;
  bool failed_ = false;
  bool cancelled_ = false;
};

}  // namespace preempt::torch::internal
