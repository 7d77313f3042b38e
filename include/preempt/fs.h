// preempt/fs.h — the small file-system interface every preempt component uses for OS access.
//
// Production code uses FileSystem::Default() (POSIX). Tests substitute a FaultInjectingFileSystem
// (tests/support) that can fail the Nth write, return short writes, run out of space, or drop
// data that was never synced, so crash and error paths are exercised without a real crash.
//
// A File opened with `direct` may carry a native fd (native_fd() >= 0); the io engine then drives
// it with io_uring. Files without a native fd are written through write_at()/read_at().
//
// Opening never blocks: a path that is not a regular file (a FIFO, a device, a socket) is refused
// with kCorruption naming the path, so a hostile or damaged directory cannot hang a reader.
//
// Thread-safety: FileSystem methods are safe to call concurrently. A File may be used by several
// threads for positional I/O at disjoint offsets; sync/close must not race with I/O on it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "preempt/status.h"

namespace preempt {

class File {
 public:
  virtual ~File() = default;
  const std::string& path() const { return path_; }
  // The OS descriptor when this is a real file, -1 when I/O must go through the methods below.
  virtual int native_fd() const { return -1; }
  // True when the file was opened with O_DIRECT (buffers and offsets must be 4 KiB-aligned).
  virtual bool direct() const { return false; }
  // Writes all `n` bytes at `offset` (retries short writes and EINTR); errors name the path.
  virtual Status write_at(const void* data, size_t n, uint64_t offset) = 0;
  // Reads up to `n` bytes at `offset`; `*got` < n only at end of file.
  virtual Status read_at(void* data, size_t n, uint64_t offset, size_t* got) = 0;
  virtual Status datasync() = 0;
  virtual Status sync() = 0;
  virtual Status truncate(uint64_t size) = 0;
  // Reserves `size` bytes of blocks (fallocate). Reports ENOSPC before any data is written and
  // lets io_uring complete writes inline instead of on its worker threads. Default: no-op.
  virtual Status allocate(uint64_t size) { return Status::OK(); }
  virtual Status size(uint64_t* out) = 0;
  virtual Status close() = 0;

 protected:
  explicit File(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// An exclusive advisory lock on a file, held until this object is destroyed or the process dies.
class FileLock {
 public:
  virtual ~FileLock() = default;
  const std::string& path() const { return path_; }

 protected:
  explicit FileLock(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

struct OpenOptions {
  bool write = false;      // open for writing (created/truncated when `create`)
  bool create = false;     // O_CREAT|O_TRUNC
  bool exclusive = false;  // O_EXCL
  bool direct = false;     // O_DIRECT; the call fails with EINVAL where unsupported (tmpfs)
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // The process-wide POSIX implementation.
  static FileSystem* Default();

  // Opens a regular file (see above: anything else is refused without blocking).
  virtual Status open(const std::string& path, const OpenOptions& opts, std::unique_ptr<File>* out) = 0;
  // Takes an exclusive lock on `path` (created if missing) without waiting and writes `owner`
  // (who holds it: pid, host) into it. Held by another open file, here or in another process:
  // kUnavailable naming the path and what the holder wrote.
  virtual Status lock_exclusive(const std::string& path, const std::string& owner, std::unique_ptr<FileLock>* out) = 0;
  // Creates one directory; OK when it already exists.
  virtual Status mkdir(const std::string& path) = 0;
  // Creates a directory and its missing parents.
  virtual Status mkdirs(const std::string& path);
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  virtual Status remove_file(const std::string& path) = 0;
  // Removes a directory tree (files and sub-directories); OK when absent.
  virtual Status remove_tree(const std::string& path) = 0;
  // Names (not paths) of entries in a directory, without "." and "..".
  virtual Status list_dir(const std::string& path, std::vector<std::string>* names) = 0;
  // fsync on the directory itself, making renames/creates inside it durable.
  virtual Status sync_dir(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
  virtual bool is_dir(const std::string& path) = 0;
  virtual Status file_size(const std::string& path, uint64_t* size) = 0;

  // Convenience: whole-file helpers (buffered).
  Status read_file(const std::string& path, uint64_t max_bytes, std::string* out);
  // Writes `data` to `path` durably and atomically: path.tmp, fsync, rename, fsync parent.
  Status write_file_atomic(const std::string& path, const std::string& data);
};

// Parent directory of a path ("a/b/c" → "a/b"; "c" → ".").
std::string DirName(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);

}  // namespace preempt
