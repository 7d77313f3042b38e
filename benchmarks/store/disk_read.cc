// Plain reads and cold caches for the benchmarks (see disk_read.h).
#include "disk_read.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

namespace preempt_bench {

bool MakeCold(const std::string& mode, const std::string& dir, std::string* why) {
  ::sync();
  if (mode == "drop") {
    int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd < 0) {
      *why = std::string("open /proc/sys/vm/drop_caches: ") + std::strerror(errno);
      return false;
    }
    const bool ok = ::write(fd, "3\n", 2) == 2;
    if (!ok) *why = std::string("write /proc/sys/vm/drop_caches: ") + std::strerror(errno);
    ::close(fd);
    return ok;
  }
  for (const auto& path : FilesUnder(dir)) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    const int rc = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (rc != 0) {
      *why = "posix_fadvise DONTNEED " + path + ": " + std::strerror(rc);
      return false;
    }
  }
  return true;
}

std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) out.push_back(it->path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// One file read by `depth` threads taking the next block in turn: a sequential stream with
// `depth` requests in flight.
bool ReadOne(const std::string& path, const PlainReadOptions& o, uint64_t* bytes, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | (o.direct ? O_DIRECT : 0));
  if (fd < 0) {
    *why = "open " + path + (o.direct ? " (O_DIRECT)" : "") + ": " + std::strerror(errno);
    return false;
  }
  std::atomic<uint64_t> next{0}, total{0};
  std::atomic<bool> eof{false};
  std::mutex err_mu;
  std::string err;
  auto reader = [&] {
    void* buf = nullptr;
    if (::posix_memalign(&buf, 4096, o.block_bytes) != 0) {
      std::lock_guard<std::mutex> l(err_mu);
      err = "out of memory for a read buffer";
      return;
    }
    while (!eof.load(std::memory_order_relaxed)) {
      const uint64_t off = next.fetch_add(o.block_bytes);
      const ssize_t got = ::pread(fd, buf, o.block_bytes, static_cast<off_t>(off));
      if (got < 0) {
        if (errno == EINTR) continue;
        std::lock_guard<std::mutex> l(err_mu);
        err = "pread " + path + ": " + std::strerror(errno);
        break;
      }
      total.fetch_add(static_cast<uint64_t>(got));
      if (static_cast<size_t>(got) < o.block_bytes) eof.store(true);
    }
    std::free(buf);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, o.depth); ++i) threads.emplace_back(reader);
  for (auto& t : threads) t.join();
  ::close(fd);
  *bytes += total.load();
  if (!err.empty()) *why = err;
  return err.empty();
}

}  // namespace

bool ReadFiles(const std::vector<std::string>& paths, const PlainReadOptions& o, uint64_t* bytes, std::string* why) {
  *bytes = 0;
  for (const auto& p : paths) {
    if (!ReadOne(p, o, bytes, why)) return false;
  }
  return true;
}

}  // namespace preempt_bench
