// SharedCopy and DeferredSaveHandle: see deferred_save.h.
#include "torch/deferred_save.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace preempt::torch::internal {
namespace {

// Staging is written once and read back only by the store's writer, much later: streaming stores
// skip reading the destination into the cache first. glibc's memcpy switches to them only above
// a size that depends on the cache (above 32 MiB on the machines measured), so a piece of a few
// MiB would copy at about half the speed through it.
void CopyPiece(void* dst, const void* src, size_t n) {
#if defined(__SSE2__)
  if (n >= (size_t{1} << 20)) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    const size_t head = std::min(n, (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63);
    std::memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
    }
    _mm_sfence();  // streaming stores are not ordered by the lock release that publishes the piece
    std::memcpy(d, s, n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace

SharedCopy::SharedCopy(const std::vector<CopyRange>& ranges, size_t piece_bytes) {
  piece_bytes = std::max<size_t>(piece_bytes, 1);
  for (const auto& r : ranges) {
    bytes_ += r.nbytes;
    for (size_t off = 0; off < r.nbytes; off += piece_bytes)
      pieces_.push_back({static_cast<const uint8_t*>(r.src) + off, static_cast<uint8_t*>(r.dst) + off,
                         std::min(piece_bytes, r.nbytes - off)});
  }
}

bool SharedCopy::copy(Deadline deadline) {
  while (!deadline.expired()) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= pieces_.size()) break;
    CopyPiece(pieces_[i].dst, pieces_[i].src, pieces_[i].nbytes);
    bool last;
    {
      std::lock_guard<std::mutex> lk(mu_);  // also publishes the bytes to whoever sees done()
      last = ++copied_ == pieces_.size();
    }
    if (last) cv_.notify_all();
  }
  std::unique_lock<std::mutex> lk(mu_);
  auto all = [&] { return copied_ == pieces_.size(); };
  if (deadline.is_never()) cv_.wait(lk, all);
  else cv_.wait_until(lk, deadline.time(), all);
  return all();
}

bool SharedCopy::done() const {
  std::lock_guard<std::mutex> lk(mu_);
  return copied_ == pieces_.size();
}

void DeferredSaveHandle::submitted(std::shared_ptr<SaveHandle> inner) {
  bool cancel_now;
  {
    std::lock_guard<std::mutex> lk(mu_);
    inner_ = inner;
    cancel_now = cancelled_;
  }
  cv_.notify_all();
  if (cancel_now) inner->cancel();  // cancelled between the copy thread's check and submission
}

void DeferredSaveHandle::failed(Status why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    failed_ = true;
    failure_ = std::move(why);
  }
  cv_.notify_all();
}

void DeferredSaveHandle::wait_submitted() const {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return failed_ || inner_ != nullptr; });
}

bool DeferredSaveHandle::cancelled() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cancelled_;
}

std::shared_ptr<SaveHandle> DeferredSaveHandle::inner() const {
  std::lock_guard<std::mutex> lk(mu_);
  return inner_;
}

bool DeferredSaveHandle::durable() const {
  auto h = inner();
  return h && h->durable();
}

bool DeferredSaveHandle::done() const {
  std::shared_ptr<SaveHandle> h;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) return true;
    h = inner_;
  }
  return h && h->done();
}

Status DeferredSaveHandle::wait(Deadline deadline) {
  std::shared_ptr<SaveHandle> h;
  {
    std::unique_lock<std::mutex> lk(mu_);
    auto ready = [&] { return failed_ || inner_ != nullptr; };
    if (deadline.is_never()) cv_.wait(lk, ready);
    else if (!cv_.wait_until(lk, deadline.time(), ready))
      return Status(StatusCode::kDeadlineExceeded, "checkpoint step " + std::to_string(step_) + ": still copying");
    if (failed_) return failure_;
    h = inner_;
  }
  return h->wait(deadline);
}

Status DeferredSaveHandle::status() const {
  std::shared_ptr<SaveHandle> h;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) return failure_;
    h = inner_;
  }
  return h ? h->status() : Status::OK();
}

uint64_t DeferredSaveHandle::bytes_total() const {
  auto h = inner();
  return h ? h->bytes_total() : bytes_;
}

uint64_t DeferredSaveHandle::bytes_written() const {
  auto h = inner();
  return h ? h->bytes_written() : 0;
}

void DeferredSaveHandle::cancel() {
  std::shared_ptr<SaveHandle> h;
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancelled_ = true;
    h = inner_;
  }
  if (h) h->cancel();
}

SaveStats DeferredSaveHandle::stats() const {
  auto h = inner();
  if (h) return h->stats();
  SaveStats s;
  s.bytes = bytes_;
  return s;
}

std::string DeferredSaveHandle::path() const {
  auto h = inner();
  return h ? h->path() : path_;
}

}  // namespace preempt::torch::internal
