// Staging memory allocation and its background preparation.
#include "torch/staging_memory.h"

#include <algorithm>
#include <cstring>

namespace preempt::torch::internal {
namespace {
// Pre-faulting runs in pieces of this size so that a cancellation is seen quickly.
constexpr uint64_t kFaultPieceBytes = 64ull << 20;
}  // namespace

StagingMemory AllocateStaging(uint64_t bytes, bool pinned, const std::atomic<bool>* cancelled) {
  StagingMemory m;
  if (bytes == 0) return m;
  if (pinned) {
    m.pinned = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    m.data = static_cast<uint8_t*>(m.pinned.data_ptr());
  } else {
    // AlignedBuffer asks for transparent huge pages on large buffers (512x fewer faults).
    m.host = AlignedBuffer(bytes, /*prefault=*/false);
    m.data = m.host.data();
  }
  const uint64_t span = pinned ? bytes : m.host.capacity();
  for (uint64_t off = 0; off < span; off += kFaultPieceBytes) {
    if (cancelled && cancelled->load(std::memory_order_relaxed)) return StagingMemory();
    std::memset(m.data + off, 0, std::min(kFaultPieceBytes, span - off));
  }
  m.capacity = bytes;
  return m;
}

MemoryPreparer::~MemoryPreparer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    jobs_.clear();  // their futures report broken_promise
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::future<StagingMemory> MemoryPreparer::prepare(uint64_t bytes, bool pinned) {
  Job job{bytes, pinned, {}};
  std::future<StagingMemory> f = job.done.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
  return f;
}

void MemoryPreparer::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      job.done.set_value(AllocateStaging(job.bytes, job.pinned, &stop_));
    } catch (...) {
      job.done.set_exception(std::current_exception());
    }
  }
}

}  // namespace preempt::torch::internal
