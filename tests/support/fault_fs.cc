#include "support/fault_fs.h"

#include <cerrno>

namespace preempt::testing {

class FaultFile final : public File {
 public:
  FaultFile(FaultInjectingFileSystem* fs, std::unique_ptr<File> base)
      : File(base->path()), fs_(fs), base_(std::move(base)) {}
  bool direct() const override { return base_->direct(); }
  int native_fd() const override { return fs_->native_fds ? base_->native_fd() : -1; }

  Status write_at(const void* data, size_t n, uint64_t offset) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      int64_t nth = ++fs_->writes;
      if (fs_->fail_nth_write.load() > 0 && nth == fs_->fail_nth_write.load()) {
        return Status::FromErrno(fs_->fail_errno.load(), "write", path_);
      }
      size_t piece = n;
      if (fs_->max_write_piece.load() > 0) piece = std::min(piece, fs_->max_write_piece.load());
      int64_t left = fs_->space_left.load();
      if (left >= 0) {
        if (static_cast<int64_t>(piece) > left) return Status::FromErrno(ENOSPC, "write", path_);
        fs_->space_left.fetch_sub(static_cast<int64_t>(piece));
      }
      PREEMPT_RETURN_IF_ERROR(base_->write_at(p, piece, offset));
      fs_->bytes_written += static_cast<int64_t>(piece);
      p += piece;
      n -= piece;
      offset += piece;
    }
    return Status::OK();
  }
  Status read_at(void* d, size_t n, uint64_t off, size_t* got) override { return base_->read_at(d, n, off, got); }
  Status datasync() override {
    if (fs_->fail_sync.load()) return Status::FromErrno(EIO, "fdatasync", path_);
    return base_->datasync();
  }
  Status sync() override {
    if (fs_->fail_sync.load()) return Status::FromErrno(EIO, "fsync", path_);
    return base_->sync();
  }
  Status truncate(uint64_t s) override { return base_->truncate(s); }
  Status size(uint64_t* s) override { return base_->size(s); }
  Status close() override { return base_->close(); }

 private:
  FaultInjectingFileSystem* fs_;
  std::unique_ptr<File> base_;
};

Status FaultInjectingFileSystem::open(const std::string& path, const OpenOptions& opts, std::unique_ptr<File>* out) {
  if (opts.direct && refuse_direct.load()) return Status::FromErrno(EINVAL, "open for write", path);
  std::unique_ptr<File> base;
  PREEMPT_RETURN_IF_ERROR(base_->open(path, opts, &base));
  *out = std::make_unique<FaultFile>(this, std::move(base));
  return Status::OK();
}

}  // namespace preempt::testing
