// preempt/store.h — crash-consistent checkpoints of named byte buffers.
//
// A Store owns one checkpoint root:
//   <root>/step-00001200/rank-00000.bin        data: 4 KiB-aligned chunks, XXH3 per chunk
//   <root>/step-00001200/rank-00000.manifest   tensor index, chunk checksums, metadata
//   <root>/step-00001200/COMMIT                written last: step, world size, manifest checksums
//   <root>/LATEST                              convenience pointer; never trusted alone
// A checkpoint is written as step-N.tmp and renamed to step-N after COMMIT is durable, so a crash
// at any instant leaves either the previous or the new checkpoint restorable, never a partial one.
//
// Thread-safety: a Store may be used from several threads. Saves run one at a time on the
// store's background thread in submission order; restore/list/verify may run concurrently with a
// save (they never look at .tmp directories).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "preempt/buffer.h"
#include "preempt/deadline.h"
#include "preempt/fs.h"
#include "preempt/status.h"

namespace preempt {

enum class IoBackend {
  kAuto,   // io_uring; a pwrite/pread thread when io_uring is refused (EPERM/ENOSYS), logged once
  kUring,  // io_uring or fail
  kPosix,  // pwrite/pread on a background thread (also used for files without a native fd)
};

enum class DirectIo {
  kAuto,  // O_DIRECT; buffered + fdatasync when the file system refuses it (EINVAL), logged once
  kOn,    // O_DIRECT or fail
  kOff,   // buffered + fdatasync
};

struct StoreOptions {
  std::string root;                // checkpoint root directory (created if missing)
  int rank = 0;
  int world_size = 1;
  int keep_last = 3;               // committed checkpoints kept (>= 1); the newest valid is never deleted
  size_t chunk_bytes = 4 << 20;    // checksum + I/O unit; multiple of 4 KiB
  int queue_depth = 8;             // in-flight I/O requests (and staging chunks) per file
  IoBackend io_backend = IoBackend::kAuto;
  DirectIo direct_io = DirectIo::kAuto;
  FileSystem* fs = nullptr;        // nullptr: FileSystem::Default()
  // Multi-rank commit. Called on every rank after its own manifest is durable; must return OK once
  // every rank's manifest is durable (a barrier over the job's process group), or an error by
  // `deadline`. When unset and world_size > 1, rank 0 polls the step directory for all manifests.
  std::function<Status(Deadline deadline)> commit_barrier;
  double commit_timeout_s = 600;   // bound on waiting for the other ranks
};

// One named buffer to save. `data` must stay valid and unchanged until the save is done.
struct SaveItem {
  // 1..512 bytes of [A-Za-z0-9_.:@#+=,[]()-]; no '/', no "..", not starting with '.'.
  // Use ':' or '.' to build hierarchical names ("model:fc1.weight", "optim:state.3.exp_avg").
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;      // empty for kBytes blobs and scalars
  const void* data = nullptr;
  size_t nbytes = 0;
};

struct SaveRequest {
  int64_t step = 0;
  std::vector<SaveItem> items;
  std::map<std::string, std::string> metadata;  // user key/values, stored in the manifest
};

struct SaveStats {
  uint64_t bytes = 0;            // payload bytes
  double queued_s = 0;           // time waiting behind an earlier save
  double write_s = 0;            // data written (copy to staging + checksums + I/O)
  double sync_s = 0;             // fdatasync of data + manifest
  double commit_s = 0;           // barrier + COMMIT + rename + dir fsync + retention
  double total_s = 0;            // submission to durable commit
  std::string backend;           // "io_uring+direct", "posix+buffered", ...
};

// Handle of one asynchronous save.
class SaveHandle {
 public:
  virtual ~SaveHandle() = default;
  virtual int64_t step() const = 0;
  // Non-blocking: true once the save committed or failed.
  virtual bool done() const = 0;
  // Waits until done or `deadline`. Returns the save's first error, OK once committed, or
  // kDeadlineExceeded when the deadline passed first (the save keeps running).
  virtual Status wait(Deadline deadline = Deadline::Never()) = 0;
  // The first error so far (OK while running without error).
  virtual Status status() const = 0;
  virtual uint64_t bytes_total() const = 0;
  virtual uint64_t bytes_written() const = 0;
  // Asks the save to stop at the next chunk; its .tmp directory is removed; wait() returns kAborted.
  virtual void cancel() = 0;
  // Valid once done.
  virtual SaveStats stats() const = 0;
  // Final path of the committed checkpoint directory.
  virtual std::string path() const = 0;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  uint64_t offset = 0;   // within the rank's data file
  uint64_t nbytes = 0;
};

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
  int world_size = 0;
  uint64_t bytes = 0;      // data bytes of this rank
  bool valid = false;      // COMMIT and manifests present and parse (checksums not read)
  std::string problem;     // why not valid
};

// Where a named entry should be restored. The byte count, dtype and shape must match the
// checkpoint's entry exactly, or restore fails naming the entry.
struct RestoreTarget {
  std::string name;
  void* data = nullptr;
  size_t nbytes = 0;
  DType dtype = DType::kBytes;
  std::vector<int64_t> shape;
  bool check_shape = true;  // false for kBytes blobs whose size is known but not their shape
  // Read into RestoreResult::owned instead of `data`; the entry's size, dtype and shape are then
  // the checkpoint's (the caller checks them). For entries whose size is not known beforehand.
  bool owned = false;
  // The checkpoint may lack this entry, even in a strict restore (not listed in `missing`).
  bool optional = false;
};

struct RestoreOptions {
  std::optional<int64_t> step;   // a specific step; default: newest valid
  bool strict = true;            // checkpoint entries without a target are errors (else returned owned)
  bool fallback = true;          // on corruption/invalid, try the next-older committed checkpoint
  bool allocate_untargeted = true;  // non-strict: entries without a target are read into owned buffers
};

struct RestoreResult {
  int64_t step = -1;
  std::string path;
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;                 // every entry of the checkpoint (this rank)
  std::map<std::string, AlignedBuffer> owned;      // entries read without a caller target
  std::vector<std::string> missing;                // non-strict: targets absent from the checkpoint
  std::vector<std::string> unexpected;             // non-strict: checkpoint entries without a target
  std::vector<std::string> rejected;               // checkpoints skipped, "<path>: <reason>"
  double read_s = 0;
  uint64_t bytes = 0;
  std::string backend;
};

struct VerifyResult {
  bool ok = false;
  std::vector<std::string> problems;  // "<file>: tensor <name>: chunk 3 checksum mismatch", ...
  uint64_t bytes_checked = 0;
};

class Store {
 public:
  explicit Store(StoreOptions options);
  ~Store();  // waits for queued saves to finish (use cancel on handles to abort)
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const StoreOptions& options() const { return options_; }

  // Queues a save of `req`; returns at once. Errors are reported on the handle.
  std::shared_ptr<SaveHandle> save_async(SaveRequest req);
  // save_async + wait(deadline).
  Status save(SaveRequest req, Deadline deadline = Deadline::Never());

  // Restores this rank's entries from the newest valid committed checkpoint (or opts.step).
  // Blocks until read and verified. On failure targets may hold partial data; with fallback, a
  // later successful attempt overwrites every target completely.
  Status restore(const std::vector<RestoreTarget>& targets, const RestoreOptions& opts, RestoreResult* out);

  // Committed checkpoints, newest first (cheap: no data read).
  Status list(std::vector<CheckpointInfo>* out);
  // Steps whose checkpoint is committed and whose manifests parse, newest first. Ranks of a job
  // use this to agree on a common step before restore.
  Status valid_steps(std::vector<int64_t>* out);
  // Reads every chunk of every rank of a checkpoint directory and checks its checksum.
  static Status Verify(const std::string& ckpt_dir, VerifyResult* out, FileSystem* fs = nullptr);

  // Removes stale .tmp directories (no save of this store is running). Called before each save.
  Status cleanup_tmp();

 private:
  class Impl;
  StoreOptions options_;
  std::unique_ptr<Impl> impl_;
};

// "step-00001200"
std::string StepDirName(int64_t step);
// True when `name` is acceptable as a SaveItem name (see SaveItem::name).
bool IsValidEntryName(const std::string& name);

}  // namespace preempt
