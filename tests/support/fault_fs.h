// FaultInjectingFileSystem — wraps the POSIX file system and fails on command: run out of space
// after N bytes, fail the Nth write with an errno, or fail sync calls. Files it opens have no
// native fd (unless native_fds), so the io engine drives them through write_at/read_at (the posix backend).
#pragma once

#include <atomic>
#include <string>

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

  std::atomic<int64_t> writes{0};
  std::atomic<int64_t> bytes_written{0};

  Status open(const std::string& path, const OpenOptions& opts, std::unique_ptr<File>* out) override;
  Status mkdir(const std::string& p) override { return base_->mkdir(p); }
  Status rename(const std::string& a, const std::string& b) override { return base_->rename(a, b); }
  Status remove_file(const std::string& p) override { return base_->remove_file(p); }
  Status remove_tree(const std::string& p) override { return base_->remove_tree(p); }
  Status list_dir(const std::string& p, std::vector<std::string>* n) override { return base_->list_dir(p, n); }
  Status sync_dir(const std::string& p) override { return base_->sync_dir(p); }
  bool exists(const std::string& p) override { return base_->exists(p); }
  bool is_dir(const std::string& p) override { return base_->is_dir(p); }
  Status file_size(const std::string& p, uint64_t* s) override { return base_->file_size(p, s); }

 private:
  friend class FaultFile;
  FileSystem* base_;
};

}  // namespace preempt::testing
