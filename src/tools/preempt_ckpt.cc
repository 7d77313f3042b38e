// preempt-ckpt — list, inspect and verify checkpoint directories.
//
//   preempt-ckpt list    <root>                  committed checkpoints, newest first
//   preempt-ckpt inspect <checkpoint-dir> [--rank N]   tensors, sizes, dtypes, metadata
//   preempt-ckpt verify  <checkpoint-dir|root>   read every chunk, check every checksum
//
// Exit codes: 0 ok; 1 problems found (invalid/corrupt checkpoint); 2 usage; 3 not found/unreadable.
#include <cinttypes>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "format/format.h"
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

int List(const std::string& root) {
  FileSystem* fs = FileSystem::Default();
  if (!fs->is_dir(root)) {
    fprintf(stderr, "preempt-ckpt: %s is not a directory\n", root.c_str());
    return kNotFound;
  }
  std::vector<std::string> names;
  Status s = fs->list_dir(root, &names);
  if (!s.ok()) {
    fprintf(stderr, "preempt-ckpt: %s\n", s.ToString().c_str());
    return kNotFound;
  }
  std::vector<std::pair<int64_t, std::string>> dirs;
  for (const auto& n : names) {
    int64_t step;
    bool tmp;
    if (format::ParseStepDirName(n, &step, &tmp)) dirs.emplace_back(step, n);
  }
  std::sort(dirs.begin(), dirs.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  printf("%-22s %10s %6s %12s  %s\n", "checkpoint", "step", "ranks", "bytes", "state");
  int bad = 0;
  for (auto& [step, name] : dirs) {
    const std::string dir = JoinPath(root, name);
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
      printf("%-22s %10" PRId64 " %6s %12s  partial (never committed; removed by the next save)\n", name.c_str(), step, "-", "-");
      continue;
    }
    std::string text;
    format::CommitRecord c;
    s = fs->read_file(JoinPath(dir, format::kCommitName), format::kMaxCommitBytes, &text);
    if (s.ok()) s = format::DecodeCommit(text, JoinPath(dir, format::kCommitName), &c);
    if (!s.ok()) {
      ++bad;
      printf("%-22s %10" PRId64 " %6s %12s  INVALID: %s\n", name.c_str(), step, "-", "-", s.message().c_str());
      continue;
    }
    uint64_t total = 0;
    std::string state = "committed";
    for (int r = 0; r < c.world_size; ++r) {
      const std::string mp = JoinPath(dir, format::RankManifestName(r));
      format::Manifest m;
      s = fs->read_file(mp, format::kMaxManifestBytes, &text);
      if (s.ok()) s = format::DecodeManifest(text, mp, UINT64_MAX, &m);
      if (!s.ok()) {
        state = "INVALID: " + s.message();
        ++bad;
        break;
      }
      total += m.data_bytes;
    }
    printf("%-22s %10" PRId64 " %6d %12s  %s\n", name.c_str(), step, c.world_size, Human(total).c_str(), state.c_str());
  }
  return bad ? kProblems : kOk;
}

int Inspect(const std::string& dir, int rank) {
  FileSystem* fs = FileSystem::Default();
  const std::string mp = JoinPath(dir, format::RankManifestName(rank));
  std::string text;
  Status s = fs->read_file(mp, format::kMaxManifestBytes, &text);
  if (!s.ok()) {
    fprintf(stderr, "preempt-ckpt: %s\n", s.ToString().c_str());
    return kNotFound;
  }
  uint64_t size = UINT64_MAX;
  (void)fs->file_size(JoinPath(dir, format::RankDataName(rank)), &size);
  format::Manifest m;
  s = format::DecodeManifest(text, mp, size, &m);
  if (!s.ok()) {
    fprintf(stderr, "preempt-ckpt: %s\n", s.ToString().c_str());
    return kProblems;
  }
  printf("checkpoint %s\n", dir.c_str());
  printf("  step %" PRId64 "  rank %d of %d  format v%u  created %" PRId64 " ms since epoch\n", m.step, m.rank,
         m.world_size, m.format_version, m.created_unix_ms);
  printf("  committed: %s\n", fs->exists(JoinPath(dir, format::kCommitName)) ? "yes" : "NO (COMMIT missing)");
  printf("  data %s in %zu chunks of %s (%s)\n", Human(m.data_bytes).c_str(), m.chunk_xxh3.size(),
         Human(m.chunk_bytes).c_str(), m.data_file.c_str());
  printf("  %-48s %-10s %-20s %14s %12s\n", "tensor", "dtype", "shape", "offset", "bytes");
  for (const auto& t : m.tensors) {
    printf("  %-48s %-10s %-20s %14" PRIu64 " %12s\n", t.name.c_str(), DTypeName(t.dtype), Shape(t.shape).c_str(),
           t.offset, Human(t.nbytes).c_str());
  }
  if (!m.metadata.empty()) {
    printf("  metadata:\n");
    for (const auto& [k, v] : m.metadata) printf("    %s = %s\n", k.c_str(), v.substr(0, 200).c_str());
  }
  return kOk;
}

int VerifyOne(const std::string& dir) {
  VerifyResult v;
  Status s = Store::Verify(dir, &v);
  if (!s.ok()) {
    fprintf(stderr, "preempt-ckpt: %s\n", s.ToString().c_str());
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
  FileSystem* fs = FileSystem::Default();
  if (!fs->is_dir(path)) {
    fprintf(stderr, "preempt-ckpt: %s is not a directory\n", path.c_str());
    return kNotFound;
  }
  std::string base = path;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string leaf = base.substr(base.find_last_of('/') + 1);
  int64_t step;
  bool tmp;
  if (format::ParseStepDirName(leaf, &step, &tmp)) return VerifyOne(base);
  // A root: verify every committed checkpoint.
  std::vector<std::string> names;
  Status s = fs->list_dir(base, &names);
  std::sort(names.begin(), names.end());
  int rc = kOk, n = 0;
  for (const auto& name : names) {
    if (!format::ParseStepDirName(name, &step, &tmp) || tmp) continue;
    ++n;
    if (VerifyOne(JoinPath(base, name)) != kOk) rc = kProblems;
  }
  if (n == 0) {
    fprintf(stderr, "preempt-ckpt: no committed checkpoint under %s\n", base.c_str());
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
    if (argc == 5 && !strcmp(argv[3], "--rank")) rank = atoi(argv[4]);
    else if (argc != 3) return Usage();
    return Inspect(path, rank);
  }
  return Usage();
}
