// Staging buffers and the in-place save slot of preempt::torch::TrainingState.
#include "torch/staging.h"

#include <chrono>
#include <cstring>

#include <ATen/Context.h>
#include <torch/cuda.h>

#include "preempt/log.h"

namespace preempt::torch::internal {
namespace {

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

SaveItem ItemFor(const Entry& e, const void* data) {
  SaveItem item;
  item.name = e.name;
  item.nbytes = e.nbytes();
  item.data = item.nbytes ? data : nullptr;
  if (e.is_blob) {
    item.dtype = DType::kBytes;
  } else {
    item.dtype = ToDType(e.tensor.scalar_type());
    item.shape.assign(e.tensor.sizes().begin(), e.tensor.sizes().end());
  }
  return item;
}

bool CpuContiguous(const at::Tensor& t) { return t.device().is_cpu() && t.is_contiguous(); }

}  // namespace

uint64_t LayoutBytes(const std::vector<Entry>& entries) {
  uint64_t off = 0;
  for (const auto& e : entries) off = AlignUp(off, kIoAlignment) + e.nbytes();
  return AlignUp(off, kIoAlignment);
}

int CudaDevices() {
  // Guarded at run time: a CPU-only LibTorch answers false / 0 without touching CUDA.
  if (!at::hasCUDA() || !::torch::cuda::is_available()) return 0;
  return static_cast<int>(::torch::cuda::device_count());
}

StagingPool::StagingPool(int buffers, bool pin_memory) : pin_memory_(pin_memory) {
  for (int i = 0; i < buffers; ++i) {
    buffers_.push_back(std::make_unique<StagingBuffer>());
    buffers_.back()->id = i;
  }
}

void StagingPool::keep_first_error(const SaveSlot& slot) {
  if (first_error_.ok() && slot.handle && slot.handle->done() && !slot.handle->status().ok())
    first_error_ = slot.handle->status();
}

Status StagingPool::first_error() {
  for (const auto& b : buffers_) keep_first_error(*b);
  if (in_place_) keep_first_error(*in_place_);
  return first_error_;
}

uint64_t StagingPool::staging_bytes() const {
  uint64_t n = 0;
  for (const auto& b : buffers_) n += b->capacity;
  return n;
}

StagingBuffer* StagingPool::acquire(WhenBusy when_busy, Deadline deadline, double* wait_s) {
  auto t0 = Clock::now();
  for (;;) {
    (void)first_error();  // kept before a finished handle is dropped
    for (auto& b : buffers_) {
      if (b->busy()) continue;
      *wait_s += SecondsSince(t0);
      return b.get();
    }
    if (when_busy == WhenBusy::kSkip) return nullptr;
    StagingBuffer* oldest = nullptr;
    for (auto& b : buffers_)
      if (b->busy() && (!oldest || b->step < oldest->step)) oldest = b.get();
    if (oldest->handle->wait(deadline).code() == StatusCode::kDeadlineExceeded)
      throw Error(Status(StatusCode::kDeadlineExceeded, "snapshot: no staging buffer became free before the deadline"));
  }
}

double StagingPool::ensure_capacity(StagingBuffer* buf, uint64_t need) {
  if (buf->capacity >= need) return 0;
  auto t0 = Clock::now();
  if (staged_ == buf) staged_ = nullptr;
  buf->handle.reset();
  buf->pinned = at::Tensor();
  buf->host = AlignedBuffer();
  buf->data = nullptr;
  buf->capacity = 0;
  try {
    if (pin_memory_ && CudaDevices() > 0) {
      buf->pinned = at::empty({static_cast<int64_t>(need)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      std::memset(buf->pinned.data_ptr(), 0, need);  // pre-fault
      buf->data = static_cast<uint8_t*>(buf->pinned.data_ptr());
    } else {
      buf->host = AlignedBuffer(need, /*prefault=*/true);
      buf->data = buf->host.data();
    }
  } catch (const std::exception& e) {
    throw Error(Status(StatusCode::kNoSpace,
                       "snapshot: allocating " + std::to_string(need) + " bytes of staging failed: " + e.what()));
  }
  buf->capacity = need;
  const double alloc_s = SecondsSince(t0);
  PREEMPT_LOG_INFO("snapshot: staging buffer %d sized to %llu bytes (%.3f s)", buf->id,
                   static_cast<unsigned long long>(need), alloc_s);
  return alloc_s;
}

void StagingPool::reserve(uint64_t need) {
  for (auto& b : buffers_)
    if (!b->busy()) ensure_capacity(b.get(), need);
}

uint64_t StagingPool::copy_into(StagingBuffer* buf, const std::vector<Entry>& entries) {
  buf->items.clear();
  buf->items.reserve(entries.size());
  uint64_t off = 0, bytes = 0;
  bool any_device = false;
  for (const auto& e : entries) {
    off = AlignUp(off, kIoAlignment);
    const size_t n = e.nbytes();
    uint8_t* dst = buf->data + off;
    if (e.is_blob) {
      if (n) std::memcpy(dst, e.blob.data(), n);
    } else if (n == 0) {
    } else if (CpuContiguous(e.tensor)) {
      std::memcpy(dst, e.tensor.data_ptr(), n);
    } else {
      const at::Tensor& t = e.tensor;
      at::Tensor view = at::from_blob(dst, t.sizes(), at::TensorOptions().dtype(t.scalar_type()));
      const bool device = !t.device().is_cpu();
      view.copy_(t, /*non_blocking=*/device && buf->pinned.defined());
      any_device = any_device || device;
    }
    buf->items.push_back(ItemFor(e, dst));
    off += n;
    bytes += n;
  }
  if (any_device) ::torch::cuda::synchronize();
  buf->bytes = bytes;
  return bytes;
}

SaveSlot* StagingPool::fill_in_place(std::vector<Entry> entries, Deadline deadline) {
  for (const auto& e : entries)
    if (!e.is_blob && e.nbytes() > 0 && !CpuContiguous(e.tensor)) return nullptr;
  if (in_place_ && in_place_->busy())
    ThrowIfError(in_place_->handle->wait(deadline).with_context("previous in-place save"));
  if (!in_place_) in_place_ = std::make_unique<SaveSlot>();
  SaveSlot* slot = in_place_.get();
  keep_first_error(*slot);
  slot->entries = std::move(entries);
  slot->items.clear();
  slot->items.reserve(slot->entries.size());
  slot->bytes = 0;
  for (const auto& e : slot->entries) {
    slot->items.push_back(ItemFor(e, e.is_blob ? static_cast<const void*>(e.blob.data()) : e.tensor.data_ptr()));
    slot->bytes += e.nbytes();
  }
  return slot;
}

SaveSlot* StagingPool::take_staged() {
  SaveSlot* s = staged_;
  staged_ = nullptr;
  return s;
}

Status StagingPool::wait_all(Deadline deadline) {
  Status first;
  auto wait = [&](SaveSlot& s) {
    if (!s.handle) return;
    Status st = s.handle->wait(deadline);
    if (!st.ok() && first.ok()) first = st;
  };
  for (auto& b : buffers_) wait(*b);
  if (in_place_) wait(*in_place_);
  if (!first.ok() && first_error_.ok()) first_error_ = first;
  return first;
}

}  // namespace preempt::torch::internal
