// preempt-ckpt — list, inspect and verify checkpoint directories.
//
//   preempt-ckpt list    <root>                  committed checkpoints, newest first (data bytes,
//                                                and the bytes written by that step itself)
//   preempt-ckpt inspect <checkpoint-dir> [--rank N]   tensors, sizes, dtypes, metadata, written vs
//                                                referenced (unchanged chunks of older steps) bytes
//   preempt-ckpt verify  <checkpoint-dir|root>   read every chunk, check every checksum
// Built on the store's public read-only inspection API only: the same validity check as restore.
//
// Exit codes: 0 ok; 1 problems found (invalid/corrupt checkpoint); 2 usage; 3 not found/unreadable.
#include <cinttypes>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "preempt/store.h"

using namespace preempt;

namespace {

constexpr int kOk = 0, kProblems = 1, kUsage = 2, kNotFound = 3;

int Usage() {
  fprintf(stderr,
          "usage: preempt-ckpt list <root>\n"
          "       preempt-ckpt inspect <checkpoint-dir> [--rank N]\n"
          "       preempt-ckpt verify <checkpoint-dir|root>\n"
          "exit: 0 ok, 1 problems found, 2 usage, 3 not found\n");
  return kUsage;
}

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string Human(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else if (b >= (1ull << 20)) snprintf(buf, sizeof buf, "%.2f MiB", b / 1048576.0);
  else if (b >= 1024) snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  return buf;
}

std::string Leaf(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path.substr(path.find_last_of('/') + 1);
}

int List(const std::string& root) {
  std::vector<CheckpointInfo> all;
  Status s = Store::ListCheckpoints(root, &all);
  if (!s.ok()) {
    fprintf(stderr, "preempt-ckpt: %s\n", s.to_string().c_str());
    return kNotFound;
  }
  printf("%-22s %10s %6s %12s %12s  %s\n", "checkpoint", "step", "ranks", "bytes", "written", "state");
  int bad = 0;
  for (const auto& c : all) {
    const std::string name = Leaf(c.path);
    if (!c.committed) {
      printf("%-22s %10" PRId64 " %6s %12s %12s  partial (never committed; removed by the next save)\n", name.c_str(), c.step,
             "-", "-", "-");
    } else if (!c.valid) {
      ++bad;
      printf("%-22s %10" PRId64 " %6s %12s %12s  INVALID: %s\n", name.c_str(), c.step, "-", "-", "-", c.problem.c_str());
    } else {
      printf("%-22s %10" PRId64 " %6d %12s %12s  committed\n", name.c_str(), c.step, c.world_size, Human(c.bytes).c_str(),
             Human(c.written_bytes).c_str());
    }
  }
  return bad ? kProblems : kOk;
}

// The state of one checkpoint directory as ListCheckpoints sees it ("" when not listed there).
std::string StateOf(const std::string& dir) {
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::vector<CheckpointInfo> all;
  if (!Store::ListCheckpoints(DirName(base), &all).ok()) return "";
  for (const auto& c : all) {
    if (Leaf(c.path) != Leaf(base)) continue;
    if (!c.committed) return "NO (partial: never committed)";
    return c.valid ? "yes" : "INVALID: " + c.problem;
  }
  return "";
}

int Inspect(const std::string& dir, int rank) {
  CheckpointManifest m;
  Status s = Store::ReadManifest(dir, rank, &m);
  if (!s.ok()) {
    fprintf(stderr, "preempt-ckpt: %s\n", s.to_string().c_str());
    return s.code() == StatusCode::kNotFound ? kNotFound : kProblems;
  }
  const std::string state = StateOf(dir);
  printf("checkpoint %s\n", dir.c_str());
  printf("  step %" PRId64 "  rank %d of %d  format v%u  created %" PRId64 " ms since epoch\n", m.step, m.rank,
         m.world_size, m.format_version, m.created_unix_ms);
  printf("  committed: %s\n", state.empty() ? "unknown" : state.c_str());
  printf("  data %s in %" PRIu64 " chunks of %s (%s)\n", Human(m.data_bytes).c_str(), m.chunks,
         Human(m.chunk_bytes).c_str(), m.data_file.c_str());
  std::string from;
  for (int64_t s : m.referenced_steps) from += (from.empty() ? "" : ", ") + StepDirName(s);
  printf("  written %s in %" PRIu64 " chunks; referenced %s in %" PRIu64 " unchanged chunks%s%s\n",
         Human(m.file_bytes).c_str(), m.chunks - m.referenced_chunks, Human(m.referenced_bytes).c_str(),
         m.referenced_chunks, from.empty() ? "" : " of ", from.c_str());
  printf("  %-48s %-10s %-20s %14s %12s\n", "tensor", "dtype", "shape", "offset", "bytes");
  for (const auto& t : m.tensors) {
    printf("  %-48s %-10s %-20s %14" PRIu64 " %12s\n", t.name.c_str(), DTypeName(t.dtype), Shape(t.shape).c_str(),
           t.offset, Human(t.nbytes).c_str());
  }
  if (!m.metadata.empty()) {
    printf("  metadata:\n");
    for (const auto& [k, v] : m.metadata) printf("    %s = %s\n", k.c_str(), v.substr(0, 200).c_str());
  }
  return state.rfind("yes", 0) == 0 ? kOk : kProblems;
}

int VerifyOne(const std::string& dir) {
  VerifyResult v;
  Status s = Store::Verify(dir, &v);
  if (!s.ok()) {
    fprintf(stderr, "preempt-ckpt: %s\n", s.to_string().c_str());
    return kNotFound;
  }
  if (v.ok) {
    printf("OK       %s (%s checked)\n", dir.c_str(), Human(v.bytes_checked).c_str());
    return kOk;
  }
  printf("CORRUPT  %s\n", dir.c_str());
  for (const auto& p : v.problems) printf("  %s\n", p.c_str());
  return kProblems;
}

int Verify(const std::string& path) {
  if (!FileSystem::Default()->is_dir(path)) {
    fprintf(stderr, "preempt-ckpt: %s is not a directory\n", path.c_str());
    return kNotFound;
  }
  if (Leaf(path).rfind("step-", 0) == 0) return VerifyOne(path);
  // A root: verify every committed checkpoint (one retired meanwhile is skipped, not corrupt).
  std::vector<CheckpointInfo> all;
  Status s = Store::ListCheckpoints(path, &all);
  if (!s.ok()) {
    fprintf(stderr, "preempt-ckpt: %s\n", s.to_string().c_str());
    return kNotFound;
  }
  int rc = kOk, n = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!it->committed) continue;
    const int one = VerifyOne(it->path);
    if (one == kNotFound && !FileSystem::Default()->is_dir(it->path)) continue;
    ++n;
    if (one != kOk) rc = kProblems;
  }
  if (n == 0) {
    fprintf(stderr, "preempt-ckpt: no committed checkpoint under %s\n", path.c_str());
    return kNotFound;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  std::string cmd = argv[1], path = argv[2];
  if (cmd == "list" && argc == 3) return List(path);
  if (cmd == "verify" && argc == 3) return Verify(path);
  if (cmd == "inspect") {
    int rank = 0;
    if (argc == 5 && !strcmp(argv[3], "--rank")) {
      char* end = nullptr;
      const long v = strtol(argv[4], &end, 10);
      if (end == argv[4] || *end != '\0' || v < 0 || v > (1 << 20)) {
        fprintf(stderr, "preempt-ckpt: --rank %s is not a rank (0..1048576)\n", argv[4]);
        return kUsage;
      }
      rank = static_cast<int>(v);
    } else if (argc != 3) {
      return Usage();
    }
    return Inspect(path, rank);
  }
  return Usage();
}
