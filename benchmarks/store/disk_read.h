// disk_read — the plain references a benchmark's cold reads are held to, torch-free: making the
// next read of a directory cold, and reading files start to end the way a program without
// preempt would (O_DIRECT with several reads in flight, like fio; or through the page cache with
// the kernel's readahead, like a stream reader).
//
// Not thread-safe across calls on the same files; each call blocks until its reads are done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace preempt_bench {

// Makes the next read of `dir` cold. "drop": sync + /proc/sys/vm/drop_caches (root only; the
// whole machine's page cache, dentries and inodes). "evict": only the pages of the files under
// `dir` (posix_fadvise DONTNEED after fdatasync; needs no privilege and leaves the rest of a
// shared machine's cache alone). Returns false (and why) when the machine refuses.
bool MakeCold(const std::string& mode, const std::string& dir, std::string* why);

struct PlainReadOptions {
  bool direct = true;               // O_DIRECT (page cache bypassed) or buffered reads
  size_t block_bytes = 4 << 20;     // one read; a multiple of 4 KiB
  int depth = 8;                    // reads in flight (threads issuing pread), >= 1
};

// Reads every file of `paths` start to end, one file after the other, `depth` blocks in flight.
// Returns the bytes read, or false with the failing file and operation in `why`.
bool ReadFiles(const std::vector<std::string>& paths, const PlainReadOptions& o, uint64_t* bytes, std::string* why);

// Every regular file under `dir` (recursively), sorted.
std::vector<std::string> FilesUnder(const std::string& dir);

}  // namespace preempt_bench
