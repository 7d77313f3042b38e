// Staging buffers, the overlapped snapshot and the in-place save slot of
// preempt::torch::TrainingState.
#include "torch/staging.h"

#include <chrono>
#include <cstring>

#include <ATen/Context.h>
#include <torch/cuda.h>

#include "preempt/log.h"
#include "torch/deferred_save.h"

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

// Copies one entry into `dst` on the calling thread; true when a device copy was queued
// non-blocking (the caller synchronizes).
bool CopyEntry(const Entry& e, uint8_t* dst, bool pinned_dst) {
  const size_t n = e.nbytes();
  if (n == 0) return false;
  if (e.is_blob) {
    std::memcpy(dst, e.blob.data(), n);
    return false;
  }
  if (CpuContiguous(e.tensor)) {
    std::memcpy(dst, e.tensor.data_ptr(), n);
    return false;
  }
  const at::Tensor& t = e.tensor;
  at::Tensor view = at::from_blob(dst, t.sizes(), at::TensorOptions().dtype(t.scalar_type()));
  const bool device = !t.device().is_cpu();
  view.copy_(t, /*non_blocking=*/device && pinned_dst);
  return device;
}

}  // namespace

// The overlapped snapshot in flight.
struct StagingPool::Overlap {
  std::vector<Entry> entries;
  std::vector<uint64_t> offsets;
  std::vector<char> staged;  // copied already (on the training thread or queued on a stream)
  std::shared_ptr<DeferredSaveHandle> handle;
  DeviceCopies device;
  std::mutex mu;
  std::condition_variable cv;
  std::unique_ptr<SharedCopy> copy;  // the CPU copies, set once the memory is there (under mu)
  bool host_done = false;  // the copy thread no longer reads live tensors
  bool fenced = false;
  std::thread thread;
};

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

StagingPool::~StagingPool() { finish_overlap(); }

bool StagingPool::pinned() const { return pin_memory_ && CudaDevices() > 0; }

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
  for (const auto& b : buffers_) n += b->capacity.load();
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

void StagingPool::prepare(uint64_t need) {
  for (auto& b : buffers_) {
    if (b->busy()) continue;
    const uint64_t have = b->pending.valid() ? b->pending_bytes : b->mem.capacity;
    if (have >= need) continue;
    b->pending = preparer_.prepare(need, pinned());
    b->pending_bytes = need;
  }
}

void StagingPool::reserve(uint64_t need) {
  for (auto& b : buffers_)
    if (!b->busy()) (void)ensure_capacity(b.get(), need);
}

void StagingPool::adopt_if_ready(StagingBuffer* buf) {
  if (buf->pending.valid() && buf->pending.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
    (void)ensure_capacity(buf, 0);
}

double StagingPool::ensure_capacity(StagingBuffer* buf, uint64_t need) {
  auto t0 = Clock::now();
  bool waited = false;
  if (buf->pending.valid()) {
    waited = buf->pending.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
    if (buf->pending_bytes < need) {
      buf->pending = {};  // too small: dropped (the preparer frees it)
    } else {
      try {
        StagingMemory m = buf->pending.get();  // waits while it is being prepared
        if (m.capacity > buf->mem.capacity) buf->mem = std::move(m);
      } catch (const std::exception& e) {
        PREEMPT_LOG_WARN("snapshot: preparing staging buffer %d in the background failed (%s)", buf->id, e.what());
      }
      buf->capacity = buf->mem.capacity;
    }
  }
  if (buf->mem.capacity >= need) return waited ? SecondsSince(t0) : 0;
  buf->mem = StagingMemory();
  buf->capacity = 0;
  try {
    buf->mem = AllocateStaging(need, pinned());
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

uint64_t StagingPool::copy_into(StagingBuffer* buf, const std::vector<Entry>& entries) {
  buf->items.clear();
  buf->items.reserve(entries.size());
  uint64_t off = 0, bytes = 0;
  bool any_device = false;
  for (const auto& e : entries) {
    off = AlignUp(off, kIoAlignment);
    uint8_t* dst = buf->mem.data + off;
    any_device = CopyEntry(e, dst, buf->mem.pinned.defined()) || any_device;
    buf->items.push_back(ItemFor(e, dst));
    off += e.nbytes();
    bytes += e.nbytes();
  }
  if (any_device) ::torch::cuda::synchronize();
  buf->bytes = bytes;
  return bytes;
}

// ---- overlapped snapshot ----------------------------------------------------------------------
std::shared_ptr<SaveHandle> StagingPool::start_overlapped(StagingBuffer* buf, std::vector<Entry> entries, int64_t step,
                                                          Submit submit, SnapshotResult* res) {
  finish_overlap();
  const uint64_t need = LayoutBytes(entries);
  adopt_if_ready(buf);
  // Not ready (still being prepared, or never): what must be copied now is cloned instead, and
  // the copy thread waits for the memory.
  const bool ready = buf->mem.capacity >= need;
  const bool streams = ready && buf->mem.pinned.defined() && DeviceCopies::Available();
  auto ov = std::make_unique<Overlap>();
  ov->entries = std::move(entries);
  ov->staged.assign(ov->entries.size(), 0);
  uint64_t off = 0;
  for (const auto& e : ov->entries) {
    off = AlignUp(off, kIoAlignment);
    ov->offsets.push_back(off);
    off += e.nbytes();
  }
  const auto t0 = Clock::now();
  bool any_sync_device = false;
  // Pass 0: what the next forward pass may change; pass 1: until_update tensors on a device
  // (CPU ones go to the copy thread).
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < ov->entries.size(); ++i) {
      Entry& e = ov->entries[i];
      const bool device = !e.is_blob && !e.tensor.device().is_cpu();
      if (e.nbytes() == 0 || (!device && e.until_update && CpuContiguous(e.tensor))) continue;
      if ((pass == 1) != (device && e.until_update)) continue;
      if (!ready) {
        if (!e.is_blob) e.tensor = device ? e.tensor.to(at::kCPU).contiguous() : e.tensor.clone(at::MemoryFormat::Contiguous);
        continue;  // blobs and the clones are the snapshot's own: copied by the copy thread
      }
      uint8_t* dst = buf->mem.data + ov->offsets[i];
      if (device && streams) ov->device.copy(e.tensor, dst);
      else any_sync_device = CopyEntry(e, dst, buf->mem.pinned.defined()) || any_sync_device;
      ov->staged[i] = 1;
    }
    if (pass == 0) ov->device.order_current_streams_after_queued();
  }
  ov->device.close();
  if (any_sync_device) ::torch::cuda::synchronize();
  res->stall_s = SecondsSince(t0);
  res->entries = ov->entries.size();
  res->bytes = 0;
  for (const auto& e : ov->entries) res->bytes += e.nbytes();
  res->overlapped = true;

  ov->handle = std::make_shared<DeferredSaveHandle>(step, res->bytes);
  buf->step = step;
  buf->handle = ov->handle;
  Overlap* raw = ov.get();
  overlap_ = std::move(ov);
  raw->thread = std::thread(copy_in_background, this, buf, raw, need, std::move(submit));
  return raw->handle;
}

// The copy thread: memory (waiting for its preparation if needed), the CPU copies, the device
// copies' completion, then the save.
void StagingPool::copy_in_background(StagingPool* pool, StagingBuffer* buf, Overlap* ov, uint64_t need, Submit submit) {
  Status st;
  try {
    (void)pool->ensure_capacity(buf, need);
    std::vector<CopyRange> ranges;
    for (size_t i = 0; i < ov->entries.size(); ++i) {
      const Entry& e = ov->entries[i];
      if (ov->staged[i] || e.nbytes() == 0) continue;
      ranges.push_back({e.is_blob ? static_cast<const void*>(e.blob.data()) : e.tensor.data_ptr(),
                        buf->mem.data + ov->offsets[i], e.nbytes()});
    }
    SharedCopy* copy;
    {
      std::lock_guard<std::mutex> lk(ov->mu);
      ov->copy = std::make_unique<SharedCopy>(ranges);
      copy = ov->copy.get();
    }
    ov->cv.notify_all();  // a fence waiting already joins the copy
    (void)copy->copy();
  } catch (const Error& e) {
    st = e.status();
  } catch (const std::exception& e) {
    st = Status(StatusCode::kInternal, std::string("snapshot: background copy into staging: ") + e.what());
  }
  {
    std::lock_guard<std::mutex> lk(ov->mu);
    ov->host_done = true;
  }
  ov->cv.notify_all();
  if (!st.ok()) return ov->handle->failed(st.with_context("checkpoint step " + std::to_string(buf->step)));
  try {
    ov->device.synchronize();
    buf->items.clear();
    buf->bytes = 0;
    for (size_t i = 0; i < ov->entries.size(); ++i) {
      buf->items.push_back(ItemFor(ov->entries[i], buf->mem.data + ov->offsets[i]));
      buf->bytes += ov->entries[i].nbytes();
    }
    if (ov->handle->cancelled()) return ov->handle->failed(Status(StatusCode::kAborted, "checkpoint cancelled"));
    ov->handle->submitted(submit(*buf));
  } catch (const std::exception& e) {
    ov->handle->failed(Status(StatusCode::kInternal, std::string("checkpoint: submitting the save: ") + e.what()));
  }
}

double StagingPool::fence() {
  if (!overlap_ || overlap_->fenced) return 0;
  auto t0 = Clock::now();
  SharedCopy* copy = nullptr;
  {
    std::unique_lock<std::mutex> lk(overlap_->mu);
    overlap_->cv.wait(lk, [&] { return overlap_->host_done || overlap_->copy; });
    if (!overlap_->host_done) copy = overlap_->copy.get();
  }
  // The training thread is blocked here anyway: it copies what is left alongside the copy thread.
  if (copy) (void)copy->copy();
  {
    std::unique_lock<std::mutex> lk(overlap_->mu);
    overlap_->cv.wait(lk, [&] { return overlap_->host_done; });
  }
  overlap_->device.fence();
  overlap_->fenced = true;
  return SecondsSince(t0);
}

void StagingPool::finish_overlap() {
  if (!overlap_) return;
  (void)fence();
  overlap_->thread.join();
  overlap_.reset();  // drops the references to live tensors on the training thread
}

// ---- in place --------------------------------------------------------------------------------
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
  (void)fence();
  Status first;
  auto wait = [&](SaveSlot& s) {
    if (!s.handle) return;
    Status st = s.handle->wait(deadline);
    if (!st.ok() && first.ok()) first = st;
  };
  for (auto& b : buffers_) wait(*b);
  if (in_place_) wait(*in_place_);
  if (overlap_ && overlap_->handle->done()) finish_overlap();
  if (!first.ok() && first_error_.ok()) first_error_ = first;
  return first;
}

}  // namespace preempt::torch::internal
