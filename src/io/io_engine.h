// io_engine — bounded-depth asynchronous positional I/O over pre-faulted, 4 KiB-aligned staging
// slots: io_uring (registered buffers, batched submits, short writes and -EAGAIN requeued) or a
// pwrite/pread worker thread for files without a native fd or where io_uring is refused.
//
// Thread-safety: an IoEngine and the IoQueue opened from it are used by one thread at a time
// (the thread that saves or restores). One queue per engine may be open at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "preempt/buffer.h"
#include "preempt/deadline.h"
#include "preempt/fs.h"
#include "preempt/io_options.h"
#include "preempt/status.h"

namespace preempt::io {

// One staging chunk. `tag` is free for the caller (e.g. the chunk index).
struct Slot {
  uint8_t* data = nullptr;
  size_t capacity = 0;
  int index = 0;        // index among the engine's slots (= registered buffer index)
  uint64_t tag = 0;
  // A write from other memory than `data` (4 KiB-aligned when the file is O_DIRECT; it must
  // stay unchanged until the write completes). Set after acquire(), which clears it.
  const uint8_t* source = nullptr;
  // A read into other memory than `data` (the same alignment rule), e.g. a restore target.
  uint8_t* target = nullptr;
  // In-flight request state (owned by the queue).
  bool reading = false;
  uint64_t offset = 0;  // file offset of the request start
  size_t length = 0;    // requested bytes
  size_t done = 0;      // bytes completed so far (short transfers are resubmitted)
};

struct EngineOptions {
  int depth = 8;
  size_t slot_bytes = 4 << 20;
  IoBackend backend = IoBackend::kAuto;
};

class IoQueue;

class IoEngine {
 public:
  // Allocates `depth` pre-faulted slots and, unless the backend is kPosix, an io_uring with the
  // slots registered. io_uring refused (EPERM/ENOSYS/ENOMEM) under kAuto → posix, logged once.
  // PREEMPT_IO_BACKEND=posix|uring in the environment overrides kAuto.
  static Status Create(const EngineOptions& opts, std::unique_ptr<IoEngine>* out);
  ~IoEngine();

  int depth() const { return static_cast<int>(slots_.size()); }
  size_t slot_bytes() const { return opts_.slot_bytes; }
  // Opens a queue over `file` (not owned; must outlive the queue). Uses io_uring when the engine
  // has a ring and the file has a native fd, else a worker thread calling File::write_at/read_at.
  std::unique_ptr<IoQueue> open_queue(File* file);

 private:
  friend class UringQueue;
  friend class PosixQueue;
  IoEngine() = default;
  EngineOptions opts_;
  std::vector<AlignedBuffer> buffers_;
  std::vector<Slot> slots_;
  struct Ring;
  std::unique_ptr<Ring> ring_;
};

class IoQueue {
 public:
  virtual ~IoQueue() = default;
  virtual const char* backend_name() const = 0;
  // Called on the caller's thread (inside acquire/drain) when a read completes; `got` < length
  // only at end of file. A non-OK return becomes the queue's first error.
  using ReadDone = std::function<Status(Slot* slot, size_t got)>;
  void set_read_done(ReadDone cb) { read_done_ = std::move(cb); }

  // A free slot; waits for an in-flight request when all are busy. Errors: the first I/O error
  // of an earlier request, or kDeadlineExceeded.
  virtual Status acquire(Deadline deadline, Slot** out) = 0;
  // Writes slot->data[0, length) (or slot->source[0, length)) at `offset`; the slot is free
  // again once written.
  virtual Status submit_write(Slot* slot, size_t length, uint64_t offset) = 0;
  // Reads `length` bytes at `offset` into the slot; ReadDone runs when complete.
  virtual Status submit_read(Slot* slot, size_t length, uint64_t offset) = 0;
  // Waits for every in-flight request; returns the first error.
  virtual Status drain(Deadline deadline) = 0;
  // drain, then fdatasync ordered after all data writes.
  virtual Status sync(Deadline deadline) = 0;
  // The first error seen (OK if none).
  const Status& first_error() const { return error_; }

 protected:
  void note_error(const Status& s) {
    if (error_.ok() && !s.ok()) error_ = s;
  }
  ReadDone read_done_;
  Status error_;
};

}  // namespace preempt::io
