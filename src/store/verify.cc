// Store::Verify — the validity check restore uses, then every chunk of every rank read back.
#include <algorithm>
#include <cstdio>
#include <map>

#include "format/format.h"
#include "preempt/store.h"
#include "store/checkpoint_check.h"

namespace preempt {
namespace {

// Reads every chunk of one rank, from this step's data file or the older step's file it
// references, and compares its checksum with the one in this step's manifest.
void VerifyChunks(FileSystem* fs, const std::string& dir, const format::Manifest& m, VerifyResult* out) {
  std::map<int64_t, std::vector<uint64_t>> chunks_by_step;
  for (uint64_t ci = 0; ci < m.chunk_xxh3.size(); ++ci) chunks_by_step[m.chunk_step[ci]].push_back(ci);
  for (auto& [holder, chunks] : chunks_by_step) {  // sequential reads within each file
    std::sort(chunks.begin(), chunks.end(), [&](uint64_t a, uint64_t b) { return m.chunk_offset[a] < m.chunk_offset[b]; });
  }
  AlignedBuffer buf(m.chunk_bytes, false);
  for (auto group = chunks_by_step.rbegin(); group != chunks_by_step.rend(); ++group) {
    const std::string dp = store_internal::ChunkFilePath(dir, m, group->second[0]);
    std::unique_ptr<File> f;
    Status s = fs->open(dp, OpenOptions{}, &f);
    if (!s.ok()) {
      out->problems.push_back(s.message());
      continue;
    }
    for (uint64_t ci : group->second) {
      const uint64_t begin = ci * m.chunk_bytes;
      const uint64_t len = format::ChunkLength(m, ci);
      const std::string chunk = store_internal::ChunkLabel(m, ci);
      size_t got = 0;
      s = f->read_at(buf.data(), len, m.chunk_offset[ci], &got);
      if (!s.ok() || got < len) {
        out->problems.push_back(s.ok() ? dp + ": " + chunk + " truncated" : s.message());
        break;
      }
      out->bytes_checked += len;
      if (format::Hash64(buf.data(), len) != m.chunk_xxh3[ci]) {
        out->problems.push_back(dp + ": " + chunk + " (bytes " + std::to_string(begin) + ".." + std::to_string(begin + len) +
                                ", tensors " + format::TensorsInRange(m, begin, begin + len) + ") checksum mismatch");
      }
    }
  }
}

}  // namespace

Status Store::Verify(const std::string& dir, VerifyResult* out, FileSystem* fs) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "Store::Verify: out is null");
  if (!fs) fs = FileSystem::Default();
  *out = VerifyResult();
  if (!fs->is_dir(dir)) return Status(StatusCode::kNotFound, dir + ": not a directory");
  auto problem = [&](const std::string& p) { out->problems.push_back(p); };

  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  int64_t step = -1;
  format::StepDirKind kind;
  if (!format::ParseStepDirName(base.substr(base.find_last_of('/') + 1), &step, &kind) ||
      kind != format::StepDirKind::kCommitted) {
    problem(dir + ": directory name is not that of a committed checkpoint (step-NNNNNNNN)");
    out->ok = false;
    return Status::OK();
  }
  format::CommitRecord c;
  Status s = store_internal::CheckCommit(fs, dir, step, 0, &c);
  const bool committed = s.ok();
  if (!committed) problem(s.message());
  // Without a readable COMMIT, still check the manifests that are present.
  std::vector<int> ranks;
  if (committed) {
    for (int r = 0; r < c.world_size; ++r) ranks.push_back(r);
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
    format::Manifest m;
    s = store_internal::CheckRank(fs, dir, step, r, committed ? &c : nullptr, &m);
    if (!s.ok()) {
      problem(s.message());
      continue;
    }
    VerifyChunks(fs, dir, m, out);
  }
  if (!out->problems.empty() && !fs->is_dir(dir)) {
    return Status(StatusCode::kNotFound, dir + ": retired (removed by retention) while being verified");
  }
  out->ok = out->problems.empty();
  return Status::OK();
}

}  // namespace preempt
