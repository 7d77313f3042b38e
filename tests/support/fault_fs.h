// FaultInjectingFileSystem — wraps the POSIX file system and fails on command: run out of space
// after N bytes, fail the Nth write with an errno, or fail sync calls. Files it opens have no
// native fd (unless native_fds), so the io engine drives them through write_at/read_at (the posix backend).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "preempt/fs.h"

namespace preempt::testing {

class FaultInjectingFileSystem : public FileSystem {
 public:
  FaultInjectingFileSystem() : base_(FileSystem::Default()) {}

  // Writes fail with ENOSPC once this many bytes were written in total (-1: never).
  std::atomic<int64_t> space_left{-1};
  // The Nth write_at call (1-based) fails with `fail_errno` (0: never).
  std::atomic<int64_t> fail_nth_write{0};
  std::atomic<int> fail_errno{EIO};
  // datasync/sync fail with EIO.
  std::atomic<bool> fail_sync{false};
  // Every write_at writes at most this many bytes per underlying call (0: no limit), to
  // exercise callers' short-write handling.
  std::atomic<size_t> max_write_piece{0};

  // open(direct=true) fails with EINVAL, as on file systems without O_DIRECT.
  std::atomic<bool> refuse_direct{false};
  // Files expose their real fd, so the io engine uses io_uring on them (write faults then only
  // apply to what goes through write_at: manifests, COMMIT, the posix backend).
  bool native_fds = false;

  // Power-loss model. Every mutating operation counts one "op"; after `fail_after_ops` ops every
  // further mutating call fails with EIO (the machine is "off"). simulate_power_loss() then undoes
  // what was never made durable: files written since their last (data)sync lose their content
  // (truncated to 0 — conservative), and creates/renames not followed by a sync_dir of their parent
  // directory are reverted, newest first.
  std::atomic<int64_t> fail_after_ops{-1};
  std::atomic<int64_t> ops{0};
  void simulate_power_loss();

  // Called with the path at the start of every open() (set before use; not synchronised), e.g.
  // to let another writer retire a checkpoint at the moment a reader opens one of its files.
  std::function<void(const std::string& path)> on_open;

  std::atomic<int64_t> writes{0};
  std::atomic<int64_t> bytes_written{0};

  Status open(const std::string& path, const OpenOptions& opts, std::unique_ptr<File>* out) override;
  Status lock_exclusive(const std::string& p, const std::string& owner, std::unique_ptr<FileLock>* out) override {
    return base_->lock_exclusive(p, owner, out);
  }
  Status mkdir(const std::string& p) override;
  Status rename(const std::string& a, const std::string& b) override;
  Status remove_file(const std::string& p) override;
  Status remove_tree(const std::string& p) override;
  Status list_dir(const std::string& p, std::vector<std::string>* n) override { return base_->list_dir(p, n); }
  Status sync_dir(const std::string& p) override;
  bool exists(const std::string& p) override { return base_->exists(p); }
  bool is_dir(const std::string& p) override { return base_->is_dir(p); }
  Status file_size(const std::string& p, uint64_t* s) override { return base_->file_size(p, s); }

 private:
  friend class FaultFile;
  // Counts a mutating op; false once the machine is "off".
  bool op();
  void note_dir_op(const std::string& kind, const std::string& a, const std::string& b);
  void note_file(const std::string& path, bool dirty);
  FileSystem* base_;
  std::mutex mu_;
  struct DirOp {
    std::string kind, a, b;  // "create" a | "mkdir" a | "rename" a -> b
  };
  std::vector<DirOp> pending_dir_ops_;
  std::map<std::string, bool> dirty_files_;
};

}  // namespace preempt::testing
