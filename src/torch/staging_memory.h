// Staging memory: the host memory a snapshot is copied into, allocated and pre-faulted (huge
// pages where the kernel gives them; pinned when CUDA is available) so that the copy never takes
// a page fault. Pre-faulting costs seconds per GiB on some VMs, so MemoryPreparer does it on a
// thread of its own and hands the memory over through a future: no training step waits for it.
//
// Errors: AllocateStaging throws (std::bad_alloc, c10::Error); a background preparation that
// fails delivers that exception through its future.
// Thread-safety: StagingMemory is a move-only owner. A MemoryPreparer is driven from one thread
// (prepare(), destruction); its worker thread only fills the memory it is asked for.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include <ATen/ATen.h>

#include "preempt/buffer.h"

namespace preempt::torch::internal {

struct StagingMemory {
  AlignedBuffer host;
  at::Tensor pinned;  // CUDA pinned host memory instead of `host`
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
};

// Allocates `bytes` (pinned when `pinned`) and touches every page. When `cancelled` becomes true
// the pre-faulting stops early and empty memory is returned.
StagingMemory AllocateStaging(uint64_t bytes, bool pinned, const std::atomic<bool>* cancelled = nullptr);

class MemoryPreparer {
 public:
  MemoryPreparer() = default;
  // Cancels what is queued or running (its futures report std::future_errc::broken_promise or
  // hold empty memory) and joins the worker.
  ~MemoryPreparer();
  MemoryPreparer(const MemoryPreparer&) = delete;
  MemoryPreparer& operator=(const MemoryPreparer&) = delete;

  // Queues one allocation (FIFO, one at a time: parallel page faulting only competes for the
  // same cores); the future becomes ready when the memory is pre-faulted.
  std::future<StagingMemory> prepare(uint64_t bytes, bool pinned);

 private:
  struct Job {
    uint64_t bytes;
    bool pinned;
    std::promise<StagingMemory> done;
  };
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::atomic<bool> stop_{false};
  std::thread worker_;
};

}  // namespace preempt::torch::internal
