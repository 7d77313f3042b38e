// Where a snapshot's bytes live until the save that persists them is done: the staging buffers
// (pre-faulted host memory, pinned when CUDA is available) and the in-place slot of the stop
// checkpoint, whose items point at the live tensors.
//
// Errors: allocation failure throws Error (kNoSpace); a wait that runs out throws Error
// (kDeadlineExceeded). Background save errors stay Status values (first_error, wait_all).
// Thread-safety: the training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "preempt/store.h"
#include "preempt/torch/training_state.h"

namespace preempt::torch::internal {

// The items one SaveRequest points at, and the handle of the save that reads them.
struct SaveSlot {
  int64_t step = -1;
  uint64_t bytes = 0;
  std::vector<SaveItem> items;
  std::vector<Entry> entries;  // in place: keeps blobs and tensors alive while the save runs
  std::shared_ptr<SaveHandle> handle;
  bool busy() const { return handle && !handle->done(); }
};

struct StagingBuffer : SaveSlot {
  int id = 0;
  AlignedBuffer host;
  at::Tensor pinned;  // CUDA pinned host memory (when CUDA is available and pin_memory)
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
};

// Bytes the staging layout of `entries` needs (each entry starts at a kIoAlignment boundary).
uint64_t LayoutBytes(const std::vector<Entry>& entries);
// Number of CUDA devices (0 on a CPU-only build or machine; never touches CUDA then).
int CudaDevices();

class StagingPool {
 public:
  StagingPool(int buffers, bool pin_memory);

  // A buffer no running save uses, or nullptr with kSkip when every one is busy. kWait waits for
  // the oldest running save until `deadline`. Adds the time waited to *wait_s.
  StagingBuffer* acquire(WhenBusy when_busy, Deadline deadline, double* wait_s);
  // Grows `buf` to at least `need` bytes (the one allocation path); returns the seconds spent
  // allocating, 0 when it was big enough.
  double ensure_capacity(StagingBuffer* buf, uint64_t need);
  // Grows every idle buffer to `need` bytes.
  void reserve(uint64_t need);
  // Copies `entries` into `buf` (the stall) and fills its items; returns the payload bytes.
  uint64_t copy_into(StagingBuffer* buf, const std::vector<Entry>& entries);
  // The in-place slot, once the previous in-place save is done (waits until `deadline`); its
  // items point into `entries`, which it keeps. nullptr when an entry is not CPU-contiguous
  // (on a device, or strided): the caller stages a copy instead.
  SaveSlot* fill_in_place(std::vector<Entry> entries, Deadline deadline);

  // The snapshot staged and not yet persisted (or nullptr); take_staged() hands it over.
  void set_staged(SaveSlot* slot) { staged_ = slot; }
  SaveSlot* take_staged();

  // Waits for every save using this pool's memory; returns the first error.
  Status wait_all(Deadline deadline);
  Status first_error();
  uint64_t staging_bytes() const;

 private:
  void keep_first_error(const SaveSlot& slot);

  bool pin_memory_;
  std::vector<std::unique_ptr<StagingBuffer>> buffers_;
  std::unique_ptr<SaveSlot> in_place_;
  SaveSlot* staged_ = nullptr;
  Status first_error_;
};

}  // namespace preempt::torch::internal
