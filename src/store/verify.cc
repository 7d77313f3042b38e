// Store::Verify — reads every chunk of every rank of one checkpoint directory.
#include <algorithm>

#include "format/format.h"
#include "preempt/store.h"

namespace preempt {

Status Store::Verify(const std::string& dir, VerifyResult* out, FileSystem* fs) {
  if (!fs) fs = FileSystem::Default();
  *out = VerifyResult();
  if (!fs->is_dir(dir)) return Status(StatusCode::kNotFound, dir + ": not a directory");
  auto problem = [&](const std::string& p) { out->problems.push_back(p); };

  const std::string commit_path = JoinPath(dir, format::kCommitName);
  format::CommitRecord c;
  int world = -1;
  std::string text;
  if (!fs->exists(commit_path)) {
    problem(commit_path + ": COMMIT missing (checkpoint was never committed)");
  } else {
    Status s = fs->read_file(commit_path, format::kMaxCommitBytes, &text);
    if (s.ok()) s = format::DecodeCommit(text, commit_path, &c);
    if (s.ok()) world = c.world_size;
    else problem(s.message());
  }
  // Without a readable COMMIT, still check the manifests that are present.
  std::vector<int> ranks;
  if (world > 0) {
    for (int r = 0; r < world; ++r) ranks.push_back(r);
  } else {
    std::vector<std::string> names;
    PREEMPT_RETURN_IF_ERROR(fs->list_dir(dir, &names));
    for (const auto& n : names) {
      int r;
      if (sscanf(n.c_str(), "rank-%05d.manifest", &r) == 1 && format::RankManifestName(r) == n) ranks.push_back(r);
    }
    std::sort(ranks.begin(), ranks.end());
  }
  for (int r : ranks) {
    const std::string mp = JoinPath(dir, format::RankManifestName(r));
    Status s = fs->read_file(mp, format::kMaxManifestBytes, &text);
    if (!s.ok()) {
      problem(s.message());
      continue;
    }
    if (world > 0 && format::Hash64(text.data(), text.size()) != c.manifest_xxh3[r]) {
      problem(mp + ": checksum differs from the one recorded in COMMIT");
    }
    const std::string dp = JoinPath(dir, format::RankDataName(r));
    uint64_t size = 0;
    s = fs->file_size(dp, &size);
    if (!s.ok()) {
      problem(s.message());
      continue;
    }
    format::Manifest m;
    s = format::DecodeManifest(text, mp, size, &m);
    if (!s.ok()) {
      problem(s.message());
      continue;
    }
    std::unique_ptr<File> f;
    s = fs->open(dp, OpenOptions{}, &f);
    if (!s.ok()) {
      problem(s.message());
      continue;
    }
    AlignedBuffer buf(m.chunk_bytes, false);
    for (uint64_t ci = 0; ci < m.chunk_xxh3.size(); ++ci) {
      const uint64_t begin = ci * m.chunk_bytes;
      const uint64_t len = std::min<uint64_t>(m.chunk_bytes, m.data_bytes - begin);
      size_t got = 0;
      s = f->read_at(buf.data(), len, begin, &got);
      if (!s.ok() || got < len) {
        problem(s.ok() ? dp + ": chunk " + std::to_string(ci) + " truncated" : s.message());
        break;
      }
      out->bytes_checked += len;
      if (format::Hash64(buf.data(), len) != m.chunk_xxh3[ci]) {
        problem(dp + ": chunk " + std::to_string(ci) + " (bytes " + std::to_string(begin) + ".." +
                std::to_string(begin + len) + ", tensors " + format::TensorsInRange(m, begin, begin + len) +
                ") checksum mismatch");
      }
    }
  }
  out->ok = out->problems.empty();
  return Status::OK();
}

}  // namespace preempt
