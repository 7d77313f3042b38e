#include "io/io_engine.h"

#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "preempt/log.h"

namespace preempt::io {

struct IoEngine::Ring {
  struct io_uring ring;
  bool registered = false;
  ~Ring() { io_uring_queue_exit(&ring); }
};

namespace {

std::once_flag g_uring_fallback_logged;

IoBackend BackendFromEnv(IoBackend requested) {
  if (requested != IoBackend::kAuto) return requested;
  const char* v = std::getenv("PREEMPT_IO_BACKEND");
  if (!v) return requested;
  if (!strcmp(v, "posix")) return IoBackend::kPosix;
  if (!strcmp(v, "uring")) return IoBackend::kUring;
  static std::once_flag warned;
  if (strcmp(v, "auto") != 0)
    std::call_once(warned, [v] {
      PREEMPT_LOG_WARN("ignoring PREEMPT_IO_BACKEND=\"%.64s\": expected posix, uring or auto; choosing automatically",
                       v);
    });
  return requested;
}

}  // namespace

Status IoEngine::Create(const EngineOptions& opts, std::unique_ptr<IoEngine>* out) {
  if (opts.depth < 1 || opts.depth > 256) {
    return Status(StatusCode::kInvalidArgument, "queue_depth must be in [1, 256], got " + std::to_string(opts.depth));
  }
  if (opts.slot_bytes == 0 || opts.slot_bytes % kIoAlignment != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "chunk_bytes must be a positive multiple of 4096, got " + std::to_string(opts.slot_bytes));
  }
  std::unique_ptr<IoEngine> e(new IoEngine());
  e->opts_ = opts;
  e->buffers_.reserve(opts.depth);
  e->slots_.resize(opts.depth);
  for (int i = 0; i < opts.depth; ++i) {
    e->buffers_.emplace_back(opts.slot_bytes, /*prefault=*/true);
    e->slots_[i].data = e->buffers_[i].data();
    e->slots_[i].capacity = opts.slot_bytes;
    e->slots_[i].index = i;
  }
  IoBackend backend = BackendFromEnv(opts.backend);
  if (backend != IoBackend::kPosix) {
    auto ring = std::make_unique<Ring>();
    int rc = io_uring_queue_init(static_cast<unsigned>(opts.depth) * 2, &ring->ring, 0);
    if (rc < 0) {
      ring.release();  // queue_init failed: nothing to exit
      if (backend == IoBackend::kUring) {
        return Status::FromErrno(-rc, "io_uring_queue_init", "").with_context("io_uring requested but unavailable");
      }
      std::call_once(g_uring_fallback_logged, [rc] {
        PREEMPT_LOG_WARN("io_uring unavailable (%s); using the pwrite/pread thread", strerror(-rc));
      });
    } else {
      std::vector<struct iovec> iov(opts.depth);
      for (int i = 0; i < opts.depth; ++i) iov[i] = {e->slots_[i].data, e->slots_[i].capacity};
      int reg = io_uring_register_buffers(&ring->ring, iov.data(), static_cast<unsigned>(iov.size()));
      ring->registered = (reg == 0);
      if (reg != 0) PREEMPT_LOG_DEBUG("io_uring buffer registration refused (%s); using unregistered buffers", strerror(-reg));
      e->ring_ = std::move(ring);
    }
  }
  *out = std::move(e);
  return Status::OK();
}

IoEngine::~IoEngine() = default;


// ---------------------------------------------------------------------------------------------
// io_uring queue
// ---------------------------------------------------------------------------------------------
class UringQueue final : public IoQueue {
 public:
  UringQueue(IoEngine* engine, File* file) : engine_(engine), file_(file), fd_(file->native_fd()) {
    for (auto& s : engine_->slots_) free_.push_back(&s);
    batch_ = std::max(1, engine_->depth() / 4);
  }
  ~UringQueue() override {
    // In-flight requests must finish before their buffers or the fd go away.
    (void)drain(Deadline::Never());
  }
  const char* backend_name() const override { return "io_uring"; }

  Status acquire(Deadline deadline, Slot** out) override {
    while (free_.empty()) {
      PREEMPT_RETURN_IF_ERROR(reap_one(deadline));
    }
    if (!error_.ok()) return error_;
    *out = free_.back();
    free_.pop_back();
    (*out)->source = nullptr;
    (*out)->target = nullptr;
    return Status::OK();
  }

  Status submit_write(Slot* slot, size_t length, uint64_t offset) override {
    slot->reading = false;
    return start(slot, length, offset);
  }

  Status submit_read(Slot* slot, size_t length, uint64_t offset) override {
    slot->reading = true;
    return start(slot, length, offset);
  }

  Status drain(Deadline deadline) override {
    flush();
    while (in_flight_ > 0) {
      Status s = reap_one(deadline);
      if (s.code() == StatusCode::kDeadlineExceeded) return s;
    }
    return error_;
  }

  Status sync(Deadline deadline) override {
    PREEMPT_RETURN_IF_ERROR(drain(deadline));
    // All writes completed; the fsync is issued after them (IOSQE_IO_DRAIN as a second guard).
    struct io_uring_sqe* sqe = get_sqe();
    io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC);
    sqe->flags |= IOSQE_IO_DRAIN;
    io_uring_sqe_set_data(sqe, nullptr);
    ++in_flight_;
    ++unsubmitted_;
    flush();
    while (in_flight_ > 0) {
      Status s = reap_one(deadline);
      if (s.code() == StatusCode::kDeadlineExceeded) return s;
    }
    return error_;
  }

 private:
  struct io_uring* ring() { return &engine_->ring_->ring; }

  struct io_uring_sqe* get_sqe() {
    struct io_uring_sqe* sqe = io_uring_get_sqe(ring());
    while (sqe == nullptr) {  // submission queue full: push what we have
      flush();
      sqe = io_uring_get_sqe(ring());
    }
    return sqe;
  }

  void prep(Slot* slot) {
    struct io_uring_sqe* sqe = get_sqe();
    uint8_t* buf = slot->data + slot->done;
    unsigned len = static_cast<unsigned>(slot->length - slot->done);
    uint64_t off = slot->offset + slot->done;
    const bool fixed = engine_->ring_->registered;
    if (slot->reading && slot->target != nullptr) {  // not a registered buffer
      io_uring_prep_read(sqe, fd_, slot->target + slot->done, len, off);
    } else if (slot->reading) {
      if (fixed) io_uring_prep_read_fixed(sqe, fd_, buf, len, off, slot->index);
      else io_uring_prep_read(sqe, fd_, buf, len, off);
    } else if (slot->source != nullptr) {  // not a registered buffer
      io_uring_prep_write(sqe, fd_, slot->source + slot->done, len, off);
    } else {
      if (fixed) io_uring_prep_write_fixed(sqe, fd_, buf, len, off, slot->index);
      else io_uring_prep_write(sqe, fd_, buf, len, off);
    }
    io_uring_sqe_set_data(sqe, slot);
    ++in_flight_;
    ++unsubmitted_;
  }

  Status start(Slot* slot, size_t length, uint64_t offset) {
    if (!error_.ok()) {
      free_.push_back(slot);
      return error_;
    }
    slot->offset = offset;
    slot->length = length;
    slot->done = 0;
    prep(slot);
    if (unsubmitted_ >= batch_) flush();
    return Status::OK();
  }

  void flush() {
    if (unsubmitted_ == 0) return;
    int rc;
    do {
      rc = io_uring_submit(ring());
    } while (rc == -EINTR || rc == -EAGAIN);
    if (rc < 0) note_error(Status::FromErrno(-rc, "io_uring_submit for", file_->path()));
    unsubmitted_ = 0;
  }

  // Waits for one completion and handles it.
  Status reap_one(Deadline deadline) {
    flush();
    if (in_flight_ == 0) return error_.ok() ? Status(StatusCode::kInternal, "io queue: nothing in flight") : error_;
    struct io_uring_cqe* cqe = nullptr;
    int rc;
    for (;;) {
      if (deadline.is_never()) {
        rc = io_uring_wait_cqe(ring(), &cqe);
      } else {
        auto left = deadline.remaining();
        if (left.count() == 0) {
          return Status(StatusCode::kDeadlineExceeded, "I/O on " + file_->path() + " did not finish before the deadline");
        }
        struct __kernel_timespec ts;
        ts.tv_sec = left.count() / 1000000000;
        ts.tv_nsec = left.count() % 1000000000;
        rc = io_uring_wait_cqe_timeout(ring(), &cqe, &ts);
        if (rc == -ETIME) continue;
      }
      if (rc == -EINTR || rc == -EAGAIN) continue;
      break;
    }
    if (rc < 0) {
      Status s = Status::FromErrno(-rc, "io_uring_wait_cqe for", file_->path());
      note_error(s);
      return s;
    }
    Slot* slot = static_cast<Slot*>(io_uring_cqe_get_data(cqe));
    int res = cqe->res;
    io_uring_cqe_seen(ring(), cqe);
    --in_flight_;
    if (slot == nullptr) {  // fsync
      if (res < 0) note_error(Status::FromErrno(-res, "fdatasync", file_->path()));
      return Status::OK();
    }
    if (res == -EAGAIN || res == -EINTR) {  // transient: resubmit the remainder
      prep(slot);
      return Status::OK();
    }
    if (res < 0) {
      note_error(Status::FromErrno(-res, slot->reading ? "read" : "write", file_->path()));
      free_.push_back(slot);
      return Status::OK();
    }
    if (res == 0 && slot->reading) {  // end of file
      finish_read(slot);
      return Status::OK();
    }
    if (res == 0) {
      note_error(Status(StatusCode::kIoError, "write " + file_->path() + ": wrote 0 bytes"));
      free_.push_back(slot);
      return Status::OK();
    }
    slot->done += static_cast<size_t>(res);
    if (slot->done < slot->length) {  // short transfer: requeue the rest
      prep(slot);
      return Status::OK();
    }
    if (slot->reading) {
      finish_read(slot);
    } else {
      free_.push_back(slot);
    }
    return Status::OK();
  }

  void finish_read(Slot* slot) {
    if (read_done_ && error_.ok()) note_error(read_done_(slot, slot->done));
    free_.push_back(slot);
  }

  IoEngine* engine_;
  File* file_;
  int fd_;
  std::vector<Slot*> free_;
  int in_flight_ = 0;
  int unsubmitted_ = 0;
  int batch_ = 1;
};

// ---------------------------------------------------------------------------------------------
// pwrite/pread worker thread
// ---------------------------------------------------------------------------------------------
class PosixQueue final : public IoQueue {
 public:
  PosixQueue(IoEngine* engine, File* file) : file_(file) {
    for (auto& s : engine->slots_) free_.push_back(&s);
    worker_ = std::thread([this] { run(); });
  }
  ~PosixQueue() override {
    (void)drain(Deadline::Never());
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  const char* backend_name() const override { return "posix"; }

  Status acquire(Deadline deadline, Slot** out) override {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      PREEMPT_RETURN_IF_ERROR(complete_locked(lock));
      if (!free_.empty()) break;
      if (!wait_locked(lock, deadline)) {
        return Status(StatusCode::kDeadlineExceeded, "I/O on " + file_->path() + " did not finish before the deadline");
      }
    }
    if (!error_.ok()) return error_;
    *out = free_.back();
    free_.pop_back();
    (*out)->source = nullptr;
    (*out)->target = nullptr;
    return Status::OK();
  }

  Status submit_write(Slot* slot, size_t length, uint64_t offset) override { return start(slot, false, length, offset); }
  Status submit_read(Slot* slot, size_t length, uint64_t offset) override { return start(slot, true, length, offset); }

  Status drain(Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      (void)complete_locked(lock);
      if (pending_.empty() && busy_ == 0 && completed_.empty()) break;
      if (!wait_locked(lock, deadline)) {
        return Status(StatusCode::kDeadlineExceeded, "I/O on " + file_->path() + " did not finish before the deadline");
      }
    }
    return error_;
  }

  Status sync(Deadline deadline) override {
    PREEMPT_RETURN_IF_ERROR(drain(deadline));
    Status s = file_->datasync();
    note_error(s);
    return error_;
  }

 private:
  Status start(Slot* slot, bool reading, size_t length, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) {
      free_.push_back(slot);
      return error_;
    }
    slot->reading = reading;
    slot->offset = offset;
    slot->length = length;
    slot->done = 0;
    pending_.push_back(slot);
    cv_.notify_all();
    return Status::OK();
  }

  bool wait_locked(std::unique_lock<std::mutex>& lock, Deadline deadline) {
    if (deadline.is_never()) {
      done_cv_.wait(lock);
      return true;
    }
    if (deadline.expired()) return false;
    done_cv_.wait_until(lock, deadline.time());
    return true;
  }

  // Runs read callbacks for completed requests on the caller's thread (lock released meanwhile).
  Status complete_locked(std::unique_lock<std::mutex>& lock) {
    while (!completed_.empty()) {
      auto [slot, st] = completed_.front();
      completed_.pop_front();
      note_error(st);
      if (slot->reading && st.ok() && read_done_ && error_.ok()) {
        lock.unlock();
        Status cb = read_done_(slot, slot->done);
        lock.lock();
        note_error(cb);
      }
      free_.push_back(slot);
    }
    return error_;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stop_ and nothing left
      Slot* slot = pending_.front();
      pending_.pop_front();
      ++busy_;
      lock.unlock();
      Status st;
      if (slot->reading) {
        size_t got = 0;
        st = file_->read_at(slot->target ? slot->target : slot->data, slot->length, slot->offset, &got);
        slot->done = got;
      } else {
        st = file_->write_at(slot->source ? slot->source : slot->data, slot->length, slot->offset);
        slot->done = st.ok() ? slot->length : 0;
      }
      lock.lock();
      --busy_;
      completed_.emplace_back(slot, st);
      done_cv_.notify_all();
    }
  }

  File* file_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::vector<Slot*> free_;
  std::deque<Slot*> pending_;
  std::deque<std::pair<Slot*, Status>> completed_;
  int busy_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

std::unique_ptr<IoQueue> IoEngine::open_queue(File* file) {
  if (ring_ && file->native_fd() >= 0) return std::make_unique<UringQueue>(this, file);
  return std::make_unique<PosixQueue>(this, file);
}

}  // namespace preempt::io
