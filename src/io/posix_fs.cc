// POSIX implementation of the FileSystem interface.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "preempt/fs.h"

namespace preempt {
namespace {

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, bool direct) : File(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  int native_fd() const override { return fd_; }
  bool direct() const override { return direct_; }

  Status write_at(const void* data, size_t n, uint64_t offset) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return Status::FromErrno(errno, "write", path_);
      }
      if (w == 0) return Status(StatusCode::kIoError, "write " + path_ + ": wrote 0 bytes");
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return Status::OK();
  }

  Status read_at(void* data, size_t n, uint64_t offset, size_t* got) override {
    char* p = static_cast<char*>(data);
    size_t total = 0;
    while (total < n) {
      ssize_t r = ::pread(fd_, p + total, n - total, static_cast<off_t>(offset + total));
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return Status::FromErrno(errno, "read", path_);
      }
      if (r == 0) break;
      total += static_cast<size_t>(r);
    }
    *got = total;
    return Status::OK();
  }

  Status datasync() override {
    if (::fdatasync(fd_) != 0) return Status::FromErrno(errno, "fdatasync", path_);
    return Status::OK();
  }
  Status sync() override {
    if (::fsync(fd_) != 0) return Status::FromErrno(errno, "fsync", path_);
    return Status::OK();
  }
  Status truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Status::FromErrno(errno, "ftruncate", path_);
    return Status::OK();
  }
  Status allocate(uint64_t size) override {
    if (size == 0) return Status::OK();
    // fallocate(2), not posix_fallocate: the latter silently writes zeros where unsupported.
    int rc;
    do {
      rc = ::fallocate(fd_, 0, 0, static_cast<off_t>(size));
    } while (rc != 0 && errno == EINTR);
    // Not every file system supports it (EOPNOTSUPP): writing will allocate instead.
    if (rc != 0 && errno != EOPNOTSUPP && errno != ENOSYS && errno != EINVAL) {
      return Status::FromErrno(errno, "fallocate", path_);
    }
    return Status::OK();
  }
  Status size(uint64_t* out) override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::FromErrno(errno, "fstat", path_);
    *out = static_cast<uint64_t>(st.st_size);
    return Status::OK();
  }
  Status close() override {
    if (fd_ < 0) return Status::OK();
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Status::FromErrno(errno, "close", path_);
    return Status::OK();
  }

 private:
  int fd_;
  bool direct_;
};

const char* FileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// A POSIX record lock (fcntl F_SETLK) on the whole file: owned by this process, released when it
// dies, and not inherited by forked children (DataLoader workers must not keep a dead trainer's
// lock). Such a lock is shared by the whole process and dropped when any descriptor of the file
// closes, so a second lock of the same path in this process is refused before the file is opened.
std::mutex g_locked_mu;
std::set<std::string> g_locked_paths;

class PosixFileLock final : public FileLock {
 public:
  PosixFileLock(std::string path, int fd) : FileLock(std::move(path)), fd_(fd) {}
  ~PosixFileLock() override {
    ::close(fd_);
    std::lock_guard<std::mutex> l(g_locked_mu);
    g_locked_paths.erase(path());
  }

 private:
  int fd_;
};

class PosixFileSystem final : public FileSystem {
 public:
  Status open(const std::string& path, const OpenOptions& o, std::unique_ptr<File>* out) override {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; regular files ignore the flag.
    int flags = O_CLOEXEC | O_NONBLOCK | (o.write ? O_RDWR : O_RDONLY);
    if (o.create) flags |= O_CREAT | O_TRUNC;
    if (o.exclusive) flags |= O_EXCL;
    if (o.direct) flags |= O_DIRECT;
    int fd;
    do {
      fd = ::open(path.c_str(), flags, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      return Status::FromErrno(errno, o.write ? "open for write" : "open for read", path);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "fstat", path);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status(StatusCode::kCorruption, path + ": is " + FileTypeName(st.st_mode) + ", not a regular file");
    }
    // A regular file: back to blocking mode, so io_uring never answers -EAGAIN for it.
    if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "fcntl", path);
    }
    *out = std::make_unique<PosixFile>(path, fd, o.direct);
    return Status::OK();
  }

  Status lock_exclusive(const std::string& path, const std::string& owner, std::unique_ptr<FileLock>* out) override {
    {
      std::lock_guard<std::mutex> l(g_locked_mu);
      if (!g_locked_paths.insert(path).second) {
        return Status(StatusCode::kUnavailable, path + ": held by this process (another Store on the same root)");
      }
    }
    Status s = lock_file(path, owner, out);
    if (!s.ok()) {
      std::lock_guard<std::mutex> l(g_locked_mu);
      g_locked_paths.erase(path);
    }
    return s;
  }

  Status lock_file(const std::string& path, const std::string& owner, std::unique_ptr<FileLock>* out) {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return Status::FromErrno(errno, "open lock file", path);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status(StatusCode::kCorruption, path + ": lock file is not a regular file");
    }
    int rc;
    do {
      struct flock whole = {};
      whole.l_type = F_WRLCK;
      whole.l_whence = SEEK_SET;
      rc = ::fcntl(fd, F_SETLK, &whole);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      int err = errno;
      std::string holder(256, '\0');
      ssize_t n = ::pread(fd, holder.data(), holder.size(), 0);
      holder.resize(n > 0 ? static_cast<size_t>(n) : 0);
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
      ::close(fd);
      if (err != EACCES && err != EAGAIN) return Status::FromErrno(err, "fcntl(F_SETLK)", path);
      return Status(StatusCode::kUnavailable,
                    path + ": held by " + (holder.empty() ? std::string("another process") : holder));
    }
    const std::string text = owner + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
      int err = errno;
      ::close(fd);
      return Status::FromErrno(err, "write lock file", path);
    }
    *out = std::make_unique<PosixFileLock>(path, fd);
    return Status::OK();
  }

  Status mkdir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return Status::FromErrno(errno, "mkdir", path);
    return Status::OK();
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return Status::FromErrno(errno, "rename " + from + " to", to);
    return Status::OK();
  }

  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::FromErrno(errno, "unlink", path);
    return Status::OK();
  }

  Status remove_tree(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return Status::OK();
      return Status::FromErrno(errno, "stat", path);
    }
    if (!S_ISDIR(st.st_mode)) return remove_file(path);
    std::vector<std::string> names;
    PREEMPT_RETURN_IF_ERROR(list_dir(path, &names));
    for (const auto& n : names) PREEMPT_RETURN_IF_ERROR(remove_tree(path + "/" + n));
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return Status::FromErrno(errno, "rmdir", path);
    return Status::OK();
  }

  Status list_dir(const std::string& path, std::vector<std::string>* names) override {
    names->clear();
    DIR* d = ::opendir(path.c_str());
    if (!d) return Status::FromErrno(errno, "opendir", path);
    while (struct dirent* e = ::readdir(d)) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      names->emplace_back(e->d_name);
    }
    ::closedir(d);
    return Status::OK();
  }

  Status sync_dir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open directory", path);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return Status::FromErrno(err, "fsync directory", path);
    return Status::OK();
  }

  bool exists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }

  bool is_dir(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }

  Status file_size(const std::string& path, uint64_t* size) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "stat", path);
    *size = static_cast<uint64_t>(st.st_size);
    return Status::OK();
  }
};

}  // namespace

FileSystem* FileSystem::Default() {
  static PosixFileSystem* fs = new PosixFileSystem();
  return fs;
}

Status FileSystem::mkdirs(const std::string& path) {
  if (path.empty() || path == "/" || path == ".") return Status::OK();
  if (is_dir(path)) return Status::OK();
  PREEMPT_RETURN_IF_ERROR(mkdirs(DirName(path)));
  return mkdir(path);
}

Status FileSystem::read_file(const std::string& path, uint64_t max_bytes, std::string* out) {
  std::unique_ptr<File> f;
  PREEMPT_RETURN_IF_ERROR(open(path, OpenOptions{}, &f));
  uint64_t size = 0;
  PREEMPT_RETURN_IF_ERROR(f->size(&size));
  if (size > max_bytes) {
    return Status(StatusCode::kCorruption,
                  path + ": file is " + std::to_string(size) + " bytes, more than the " +
                      std::to_string(max_bytes) + " allowed");
  }
  out->assign(size, '\0');
  size_t got = 0;
  PREEMPT_RETURN_IF_ERROR(f->read_at(out->data(), size, 0, &got));
  out->resize(got);
  return f->close();
}

Status FileSystem::write_file_atomic(const std::string& path, const std::string& data) {
  // A per-writer temporary name: two processes replacing the same file never share a temp file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  std::unique_ptr<File> f;
  OpenOptions o;
  o.write = o.create = true;
  PREEMPT_RETURN_IF_ERROR(open(tmp, o, &f));
  Status s = f->write_at(data.data(), data.size(), 0);
  if (s.ok()) s = f->sync();
  Status c = f->close();
  if (s.ok()) s = c;
  if (!s.ok()) {
    (void)remove_file(tmp);
    return s;
  }
  PREEMPT_RETURN_IF_ERROR(rename(tmp, path));
  return sync_dir(DirName(path));
}

std::string DirName(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

}  // namespace preempt
