// The two halves of an overlapped snapshot that the C++ torch layer and the Python package share:
//
// SharedCopy: the copy of live tensors into staging, cut into pieces that any number of threads
// take in turn. The background copy thread starts it; a fence (the next optimizer step) that finds
// it unfinished copies the remaining pieces alongside instead of only waiting, since the training
// thread is blocked there anyway: the fence then costs half the rest of the copy, not all of it.
//
// DeferredSaveHandle: the handle of a save that is submitted to the store later, once the staging
// buffer holds every byte. Until then it reports "running"; afterwards it forwards to the store's
// handle. A copy that fails (or a cancel that comes first) ends it with that Status, and nothing is
// submitted.
//
// Neither includes LibTorch: the Python module (which links only the core) builds this file too.
// Thread-safety: every method of both may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "preempt/store.h"

namespace preempt::torch::internal {

// `nbytes` bytes from `src` to `dst`; the ranges of one SharedCopy do not overlap.
struct CopyRange {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t nbytes = 0;
};

class SharedCopy {
 public:
  // Pieces of at most this many bytes: small enough that a helper joins soon and the two threads
  // end close together, large enough that taking a piece costs nothing next to copying it.
  static constexpr size_t kPieceBytes = size_t{8} << 20;

  explicit SharedCopy(const std::vector<CopyRange>& ranges, size_t piece_bytes = kPieceBytes);

  // Copies pieces until none is left to take, then waits until the pieces other threads took are
  // copied too, or until `deadline` (checked between pieces). Returns done().
  bool copy(Deadline deadline = Deadline::Never());
  bool done() const;
  uint64_t bytes() const { return bytes_; }

 private:
  std::vector<CopyRange> pieces_;
  uint64_t bytes_ = 0;
  std::atomic<size_t> next_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t copied_ = 0;  // pieces finished, by any thread
};

class DeferredSaveHandle : public SaveHandle {
 public:
  DeferredSaveHandle(int64_t step, uint64_t bytes, std::string path = {})
      : step_(step), bytes_(bytes), path_(std::move(path)) {}

  // The save was submitted: from now on this handle is `inner`.
  void submitted(std::shared_ptr<SaveHandle> inner);
  // The save will never be submitted (a failed copy, or cancelled first).
  void failed(Status why);
  bool cancelled() const;
  // Waits until submitted() or failed() was called.
  void wait_submitted() const;

  int64_t step() const override { return step_; }
  bool durable() const override;
  bool done() const override;
  Status wait(Deadline deadline) override;
  Status status() const override;
  uint64_t bytes_total() const override;
  uint64_t bytes_written() const override;
  void cancel() override;
  SaveStats stats() const override;
  // The store's path once submitted; before, the path given at construction (may be empty).
  std::string path() const override;

 private:
  std::shared_ptr<SaveHandle> inner() const;

  const int64_t step_;
  const uint64_t bytes_;
  const std::string path_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::shared_ptr<SaveHandle> inner_;
  Status failure_;
  bool failed_ = false;
  bool cancelled_ = false;
};

}  // namespace preempt::torch::internal
