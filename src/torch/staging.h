// Where a snapshot's bytes live until the save that persists them is done: the staging buffers
// (pre-faulted host memory, pinned when CUDA is available) and the in-place slot of the stop
// checkpoint, whose items point at the live tensors.
//
// Staging memory is prepared in the background (prepare(); see staging_memory.h) and adopted by
// the first snapshot that needs it; a snapshot that finds it still being prepared waits for it,
// and one that finds none allocates it itself (the cost is reported as alloc_s).
//
// Overlapped snapshots (start_overlapped): what can change before the optimizer update is copied
// on the training thread; Entry::until_update tensors are copied by a copy thread (CPU) or on a
// CUDA stream (device tensors, see device_copy.h) while training goes on, and the copy thread
// then submits the save. fence() is the trainer's wait before the optimizer update: it returns
// once the live tensors are no longer read (CPU) and has the update's kernels wait for the
// device copies (GPU side). At most one overlapped snapshot is in flight: starting another, any
// plain snapshot, wait_all and destruction fence (and join) the previous one first.
//
// Errors: allocation failure throws Error (kNoSpace); a wait that runs out throws Error
// (kDeadlineExceeded). Background failures (a copy, a save) are Status values on the save's
// handle (first_error, wait_all).
// Thread-safety: the training thread only; the copy thread touches only the buffer it was given,
// which no other call uses until its save is done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "preempt/store.h"
#include "preempt/torch/training_state.h"
#include "torch/device_copy.h"
#include "torch/staging_memory.h"

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
  StagingMemory mem;
  std::future<StagingMemory> pending;  // memory being prepared in the background
  uint64_t pending_bytes = 0;
  std::atomic<uint64_t> capacity{0};   // mem.capacity, readable while a copy thread owns the buffer
};

// Bytes the staging layout of `entries` needs (each entry starts at a kIoAlignment boundary).
uint64_t LayoutBytes(const std::vector<Entry>& entries);
// Number of CUDA devices (0 on a CPU-only build or machine; never touches CUDA then).
int CudaDevices();

class StagingPool {
 public:
  // Submits the save of a filled slot to the store (called on the copy thread).
  using Submit = std::function<std::shared_ptr<SaveHandle>(const SaveSlot&)>;

  StagingPool(int buffers, bool pin_memory);
  ~StagingPool();  // joins the copy thread and the memory preparation

  // A buffer no running save uses, or nullptr with kSkip when every one is busy. kWait waits for
  // the oldest running save until `deadline`. Adds the time waited to *wait_s.
  StagingBuffer* acquire(WhenBusy when_busy, Deadline deadline, double* wait_s);
  // Makes `buf` hold at least `need` bytes: adopts its background preparation (waiting for it
  // when it is not finished), else allocates now. Returns the seconds this took (0 when it was
  // big enough).
  double ensure_capacity(StagingBuffer* buf, uint64_t need);
  // Starts preparing, in the background, every idle buffer that holds (or is getting) less than
  // `need` bytes; returns at once.
  void prepare(uint64_t need);
  // Makes every idle buffer hold `need` bytes now (adopting or waiting for their preparation).
  void reserve(uint64_t need);
  // Copies `entries` into `buf` (the stall) and fills its items; returns the payload bytes.
  uint64_t copy_into(StagingBuffer* buf, const std::vector<Entry>& entries);
  // The overlapped snapshot of `entries` into `buf` (see the top of this file). Fills `res`
  // (bytes, entries, stall_s = the part copied now) and returns the save's handle at once.
  std::shared_ptr<SaveHandle> start_overlapped(StagingBuffer* buf, std::vector<Entry> entries, int64_t step,
                                               Submit submit, SnapshotResult* res);
  // Waits until the overlapped snapshot in flight no longer reads live tensors, taking CPU copy
  // pieces alongside the copy thread (see deferred_save.h); returns the seconds waited (0 when
  // none is in flight or it was already done).
  double fence();
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
  struct Overlap;
  bool pinned() const;
  void keep_first_error(const SaveSlot& slot);
  void adopt_if_ready(StagingBuffer* buf);
  void finish_overlap();
  static void copy_in_background(StagingPool* pool, StagingBuffer* buf, Overlap* ov, uint64_t need, Submit submit);

  bool pin_memory_;
  std::vector<std::unique_ptr<StagingBuffer>> buffers_;
  std::unique_ptr<SaveSlot> in_place_;
  SaveSlot* staged_ = nullptr;
  Status first_error_;
  std::unique_ptr<Overlap> overlap_;
  MemoryPreparer preparer_;  // declared last: destroyed (cancelled, joined) first
};

}  // namespace preempt::torch::internal
