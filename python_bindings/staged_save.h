// python_bindings/staged_save.h — a save whose bytes are first copied into staging memory on a
// background thread, so the copy overlaps the next training step instead of stalling it.
//
// The Python layer copies what training may change before the next optimizer step (parameters,
// optimizer state) this way, and fences the optimizer's step() on staged(): the snapshot still
// holds the state after the step it is named for. When the copy is done the request (whose items
// point into the staging memory) is queued on the Store; saves reach the Store in the order
// their StagedSaves were created (each waits for its predecessor's submission).
//
// The caller keeps the copy sources, the staging memory and the Store alive until done().
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "preempt/store.h"

namespace preempt::python {

struct StagingCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t nbytes = 0;
};

class StagedSave : public SaveHandle {
 public:
  // Starts the copy thread at once.
  StagedSave(Store* store, SaveRequest req, std::vector<StagingCopy> copies, std::shared_ptr<StagedSave> previous);
  ~StagedSave() override;  // joins the thread (the copy and the submission are short)

  // True once every copy is done: the sources may change from then on.
  bool staged() const;
  // Waits until staged() or the deadline; returns staged().
  bool wait_staged(Deadline deadline);
  // Waits until the request was handed to the Store (or the save was cancelled before).
  void wait_submitted();

  int64_t step() const override { return step_; }
  bool durable() const override;
  bool done() const override;
  Status wait(Deadline deadline) override;
  Status status() const override;
  uint64_t bytes_total() const override { return bytes_total_; }
  uint64_t bytes_written() const override;
  void cancel() override;
  SaveStats stats() const override;
  std::string path() const override;

 private:
  void run();
  std::shared_ptr<SaveHandle> inner() const;

  Store* const store_;
  SaveRequest req_;
  std::vector<StagingCopy> copies_;
  std::shared_ptr<StagedSave> previous_;
  const int64_t step_;
  const uint64_t bytes_total_;
  const std::string path_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool staged_ = false;
  bool submitted_ = false;  // inner_ set, or cancelled before submission
  bool cancelled_ = false;
  std::shared_ptr<SaveHandle> inner_;
  std::thread thread_;
};

}  // namespace preempt::python
