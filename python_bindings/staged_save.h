// python_bindings/staged_save.h — a save whose bytes are first copied into staging memory on a
// background thread, so the copy overlaps the next training step instead of stalling it.
//
// The Python layer copies what training may change before the next optimizer step (parameters,
// optimizer state) this way, and fences the optimizer's step() on wait_staged(), which copies the
// rest alongside the background thread (torch/deferred_save.h): the snapshot still holds the
// state after the step it is named for. When the copy is done the request (whose items point
// into the staging memory) is queued on the Store; saves reach the Store in the order their
// StagedSaves were created (each waits for its predecessor's submission).
//
// The caller keeps the copy sources, the staging memory and the Store alive until the handle is
// done. Thread-safety: every method may be called from any thread.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "preempt/store.h"
#include "torch/deferred_save.h"

namespace preempt::python {

using torch::internal::CopyRange;
using torch::internal::DeferredSaveHandle;

class StagedSave {
 public:
  // Starts the copy thread at once. `previous`: the handle of the StagedSave created before on
  // the same Store (its save is submitted first), or null.
  StagedSave(Store* store, SaveRequest req, const std::vector<CopyRange>& copies,
             std::shared_ptr<DeferredSaveHandle> previous);
  ~StagedSave();  // joins the thread (the copy and the submission are short)
  StagedSave(const StagedSave&) = delete;
  StagedSave& operator=(const StagedSave&) = delete;

  // The save: running until submitted, then the Store's handle.
  const std::shared_ptr<DeferredSaveHandle>& handle() const { return handle_; }
  // True once every copy is done: the sources may change from then on.
  bool staged() const { return copy_.done(); }
  // Copies what is left alongside the background thread until staged() or the deadline; returns
  // staged().
  bool wait_staged(Deadline deadline) { return copy_.copy(deadline); }

 private:
  void run();

  Store* const store_;
  SaveRequest req_;
  torch::internal::SharedCopy copy_;
  std::shared_ptr<DeferredSaveHandle> previous_;
  std::shared_ptr<DeferredSaveHandle> handle_;
  std::thread thread_;
};

}  // namespace preempt::python
