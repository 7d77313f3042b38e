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
    if (!fs_->op()) return Status::FromErrno(EIO, "write", path_);
    fs_->note_file(path_, true);
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
    if (fs_->fail_sync.load() || !fs_->op()) return Status::FromErrno(EIO, "fdatasync", path_);
    PREEMPT_RETURN_IF_ERROR(base_->datasync());
    fs_->note_file(path_, false);
    return Status::OK();
  }
  Status sync() override {
    if (fs_->fail_sync.load() || !fs_->op()) return Status::FromErrno(EIO, "fsync", path_);
    PREEMPT_RETURN_IF_ERROR(base_->sync());
    fs_->note_file(path_, false);
    return Status::OK();
  }
  Status truncate(uint64_t s) override { return base_->truncate(s); }
  // Reservations are passed through without touching space_left, so that ENOSPC tests hit the
  // write path itself (as on file systems without fallocate).
  Status allocate(uint64_t s) override { return base_->allocate(s); }
  Status size(uint64_t* s) override { return base_->size(s); }
  Status close() override { return base_->close(); }

 private:
  FaultInjectingFileSystem* fs_;
  std::unique_ptr<File> base_;
};

Status FaultInjectingFileSystem::open(const std::string& path, const OpenOptions& opts, std::unique_ptr<File>* out) {
  if (on_open) on_open(path);
  if (opts.direct && refuse_direct.load()) return Status::FromErrno(EINVAL, "open for write", path);
  const bool creates = opts.create && !base_->exists(path);
  if (opts.write && !op()) return Status::FromErrno(EIO, "open for write", path);
  std::unique_ptr<File> base;
  PREEMPT_RETURN_IF_ERROR(base_->open(path, opts, &base));
  if (creates) note_dir_op("create", path, "");
  if (opts.write && opts.create) note_file(path, true);
  *out = std::make_unique<FaultFile>(this, std::move(base));
  return Status::OK();
}

bool FaultInjectingFileSystem::op() {
  int64_t n = ++ops;
  int64_t limit = fail_after_ops.load();
  return limit < 0 || n <= limit;
}

void FaultInjectingFileSystem::note_dir_op(const std::string& kind, const std::string& a, const std::string& b) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_dir_ops_.push_back({kind, a, b});
}

void FaultInjectingFileSystem::note_file(const std::string& path, bool dirty) {
  std::lock_guard<std::mutex> lock(mu_);
  dirty_files_[path] = dirty;
}

Status FaultInjectingFileSystem::mkdir(const std::string& p) {
  const bool creates = !base_->exists(p);
  if (!op()) return Status::FromErrno(EIO, "mkdir", p);
  PREEMPT_RETURN_IF_ERROR(base_->mkdir(p));
  if (creates) note_dir_op("mkdir", p, "");
  return Status::OK();
}

Status FaultInjectingFileSystem::rename(const std::string& a, const std::string& b) {
  if (!op()) return Status::FromErrno(EIO, "rename " + a + " to", b);
  PREEMPT_RETURN_IF_ERROR(base_->rename(a, b));
  note_dir_op("rename", a, b);
  std::lock_guard<std::mutex> lock(mu_);
  // A renamed file keeps its dirtiness under its new name.
  auto it = dirty_files_.find(a);
  if (it != dirty_files_.end()) {
    dirty_files_[b] = it->second;
    dirty_files_.erase(a);
  }
  return Status::OK();
}

Status FaultInjectingFileSystem::remove_file(const std::string& p) {
  if (!op()) return Status::FromErrno(EIO, "unlink", p);
  return base_->remove_file(p);
}

Status FaultInjectingFileSystem::remove_tree(const std::string& p) {
  if (!op()) return Status::FromErrno(EIO, "remove", p);
  return base_->remove_tree(p);
}

Status FaultInjectingFileSystem::sync_dir(const std::string& p) {
  if (!op()) return Status::FromErrno(EIO, "fsync directory", p);
  PREEMPT_RETURN_IF_ERROR(base_->sync_dir(p));
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DirOp> keep;
  for (auto& op : pending_dir_ops_) {
    const std::string& entry = op.kind == "rename" ? op.b : op.a;
    if (DirName(entry) != p || (op.kind == "rename" && DirName(op.a) != p)) keep.push_back(op);
  }
  pending_dir_ops_.swap(keep);
  return Status::OK();
}

void FaultInjectingFileSystem::simulate_power_loss() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [path, dirty] : dirty_files_) {
    if (dirty && base_->exists(path)) {
      std::unique_ptr<File> f;
      OpenOptions o;
      o.write = true;
      if (base_->open(path, o, &f).ok()) (void)f->truncate(0);
    }
  }
  for (auto it = pending_dir_ops_.rbegin(); it != pending_dir_ops_.rend(); ++it) {
    if (it->kind == "rename") (void)base_->rename(it->b, it->a);
    else (void)base_->remove_tree(it->a);
  }
  pending_dir_ops_.clear();
  dirty_files_.clear();
  fail_after_ops = -1;
}

}  // namespace preempt::testing
