// preempt/store.h — crash-consistent checkpoints of named byte buffers.
//
// A Store owns one checkpoint root:
//   <root>/step-00001200/rank-00000.bin        data: 4 KiB-aligned chunks, XXH3 per chunk
//   <root>/step-00001200/rank-00000.manifest   tensor index, chunk checksums, metadata
//   <root>/step-00001200/COMMIT                written last: step, world size, manifest checksums
//   <root>/LATEST                              convenience pointer; never trusted alone
//   <root>/.lock.rank-00000                    writer lock of rank 0 (holder's pid and host inside)
// A checkpoint is written as step-N.tmp and renamed to step-N after COMMIT is durable, so a crash
// at any instant leaves either the previous or the new checkpoint restorable, never a partial one.
// A checkpoint is retired (retention, rewind) by renaming it out of the committed namespace
// (step-N.retired.tmp) before it is deleted, so readers never see a half-deleted one.
//
// Unchanged chunks (StoreOptions::dedup, on by default): a chunk whose length and XXH3 equal
// those of the same chunk in the newest valid committed checkpoint below the step being saved is
// not written again; the manifest references the data file that holds it (always the step that
// wrote the bytes, never another reference). Restore and Verify read referenced chunks from there
// and check them against the new manifest's checksums. Rank 0 checks every reference before COMMIT;
// retention keeps a step, whole, while a kept checkpoint references its data, and retires steps
// newest first, so no committed checkpoint ever references deleted data, whatever the instant of
// a crash. Two chunks are taken as equal when their 64-bit XXH3 checksums are (as restore does).
//
// Writers: the first save of a Store takes an exclusive lock on <root>/.lock.rank-<rank>, held
// until the Store is destroyed or the process dies. The ranks of one job each hold their own; a
// second process saving as the same rank on the same root fails fast naming the holder. Only a
// lock holder removes leftovers (stale step-N.tmp, step-N.retired.tmp, LATEST.tmp.*). Readers
// (restore, list, verify, the static inspection calls) take no lock and never block on a file:
// anything that is not a regular file where a checkpoint file belongs is refused as corruption.
//
// Steps only move forward: a save below the newest valid committed step is refused unless the
// request asks to rewind, which retires the newer steps before the rewound one commits.
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
#include "preempt/checkpoint_entry.h"
#include "preempt/deadline.h"
#include "preempt/fs.h"
#include "preempt/io_options.h"
#include "preempt/status.h"

namespace preempt {

struct StoreOptions {
  std::string root;                // checkpoint root directory (created if missing)
  int rank = 0;
  int world_size = 1;
  int keep_last = 3;               // committed checkpoints kept (>= 1, else refused); the newest is never deleted
  size_t chunk_bytes = 4 << 20;    // checksum + I/O unit; multiple of 4 KiB
  int queue_depth = 8;             // in-flight writes (and staging chunks) per file of a save
  // In-flight reads (and read buffers of chunk_bytes each) per file of a restore, in [1, 256].
  // Deeper than writes: cold restores measured faster at 32 than at 8 (restore_tuning in
  // benchmarks/store); 128 MiB of buffers with 4 MiB chunks, held while the Store lives.
  int read_queue_depth = 32;
  IoBackend io_backend = IoBackend::kAuto;
  DirectIo direct_io = DirectIo::kAuto;
  FileSystem* fs = nullptr;        // nullptr: FileSystem::Default()
  // Unchanged chunks are referenced, not rewritten (see above). Off: every chunk is written.
  bool dedup = true;
  // A chunk that lies inside one item, at a 4 KiB-aligned address, with a length that is a
  // multiple of 4 KiB, is written straight from the item's memory (hashed there first) instead
  // of being copied into an I/O buffer: one copy of the state less per save (staging buffers and
  // tensors of whole pages qualify). Off: every written chunk is copied.
  bool write_from_items = true;
  // The same on restore: such a chunk of a target's entry is read straight into the target's
  // memory and verified there, without a bounce through an I/O buffer. Off: every chunk bounces.
  bool read_into_targets = true;
  // Multi-rank commit: rank 0 polls the step directory until every rank's manifest is there (the
  // root is shared by all ranks), for at most this long.
  double commit_timeout_s = 600;
};

struct SaveRequest {
  int64_t step = 0;                             // >= 0
  std::vector<SaveItem> items;
  std::map<std::string, std::string> metadata;  // user key/values, stored in the manifest; no NUL bytes
  // A step below the newest valid committed one is refused (kInvalidArgument) unless `rewind`:
  // then every committed step newer than `step` is retired before this one commits, so a run
  // that rolled back never resumes the abandoned branch.
  bool rewind = false;
};

struct SaveStats {
  uint64_t bytes = 0;            // payload bytes
  uint64_t written_bytes = 0;    // payload bytes of the chunks written to this step's data file
  uint64_t referenced_bytes = 0; // payload bytes of unchanged chunks referenced in an older step
  uint64_t from_items_bytes = 0; // of written_bytes: written straight from the items' memory (no copy)
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
  // Non-blocking: true once this rank's part (data file and manifest) is durable. On rank 0 the
  // checkpoint may still be uncommitted; on other ranks COMMIT may not exist yet.
  virtual bool durable() const = 0;
  // Non-blocking: true once the save committed or failed.
  virtual bool done() const = 0;
  // Waits until done or `deadline`. Returns the save's first error, OK once the checkpoint is
  // committed — on every rank: a rank other than 0 returns OK only after it saw the COMMIT that
  // rank 0 wrote over its manifest — or kDeadlineExceeded when the deadline passed first (the save keeps running).
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

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
  int world_size = 0;
  uint64_t bytes = 0;      // data bytes: this rank's (Store::list), every rank's (ListCheckpoints)
  uint64_t written_bytes = 0;  // size of this step's own data files (the chunks it wrote, 4 KiB-padded)
  bool committed = true;   // false: a step-N.tmp directory (being written, or left by a crash)
  // The check restore makes before reading data: COMMIT and manifests are regular files that
  // parse, their steps match the directory name, manifest checksums match COMMIT, data files
  // have the recorded size, referenced chunks lie in committed older steps' data files (data
  // checksums are not read; Verify reads them).
  bool valid = false;
  std::string problem;     // why not valid
};

// One rank's manifest of a checkpoint, as read back (Store::ReadManifest).
struct CheckpointManifest {
  int64_t step = 0;
  int rank = 0;
  int world_size = 0;
  uint32_t format_version = 0;
  int64_t created_unix_ms = 0;
  std::string data_file;           // "rank-00000.bin"
  uint64_t chunk_bytes = 0;
  uint64_t data_bytes = 0;
  uint64_t chunks = 0;
  uint64_t file_bytes = 0;                // size of this step's own data file
  uint64_t referenced_chunks = 0;         // chunks read from older steps' data files
  uint64_t referenced_bytes = 0;          // their bytes
  std::vector<int64_t> referenced_steps;  // the steps holding them, ascending
  std::vector<TensorInfo> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
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
  uint64_t in_place_bytes = 0;  // of `bytes`: read straight into the targets (read_into_targets)
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
  // later successful attempt overwrites every target completely. A checkpoint retired while it
  // is being read (retention of a concurrent writer) is not corruption: the steps are listed
  // again and the newest valid one is read. `out` must not be null (kInvalidArgument).
  Status restore(const std::vector<RestoreTarget>& targets, const RestoreOptions& opts, RestoreResult* out);

  // Committed checkpoints, newest first, validity checked for this rank (cheap: no data read).
  Status list(std::vector<CheckpointInfo>* out);
  // Steps whose checkpoint is committed and whose manifests parse, newest first. Ranks of a job
  // use this to agree on a common step before restore.
  Status valid_steps(std::vector<int64_t>* out);

  // ---- read-only inspection: no Store, no lock; fs nullptr means FileSystem::Default() ----
  // Every step directory under `root`, newest first: committed ones checked for every rank
  // listed in COMMIT with the same check restore uses, and partial ones (committed = false).
  // A directory retired while being listed is left out. kNotFound when root is not a directory.
  static Status ListCheckpoints(const std::string& root, std::vector<CheckpointInfo>* out, FileSystem* fs = nullptr);
  // Reads and validates one rank's manifest of a checkpoint directory (committed or partial).
  static Status ReadManifest(const std::string& ckpt_dir, int rank, CheckpointManifest* out, FileSystem* fs = nullptr);
  // The validity check of CheckpointInfo::valid, then every chunk of every rank read and its
  // checksum checked. Problems go to out->problems; the Status is an error only when the
  // directory cannot be examined at all (kNotFound when it does not exist).
  static Status Verify(const std::string& ckpt_dir, VerifyResult* out, FileSystem* fs = nullptr);

 private:
  class Impl;
  StoreOptions options_;
  std::unique_ptr<Impl> impl_;
};

// "step-00001200"
std::string StepDirName(int64_t step);

}  // namespace preempt
