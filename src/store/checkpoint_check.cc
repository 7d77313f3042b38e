#include "store/checkpoint_check.h"

#include <algorithm>
#include <map>

namespace preempt::store_internal {
namespace {

// The checkpoint root a step directory lies in.
std::string RootOf(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return DirName(dir);
}

}  // namespace

std::string ChunkFilePath(const std::string& dir, const format::Manifest& m, uint64_t c) {
  if (format::IsOwnChunk(m, c)) return JoinPath(dir, m.data_file);
  return JoinPath(JoinPath(RootOf(dir), format::StepDirName(m.chunk_step[c])), m.data_file);
}

std::string ChunkLabel(const format::Manifest& m, uint64_t c) {
  std::string s = "chunk " + std::to_string(c);
  if (!format::IsOwnChunk(m, c)) s += " of step " + std::to_string(m.step) + " (at offset " + std::to_string(m.chunk_offset[c]) + ")";
  return s;
}

Status CheckReferences(FileSystem* fs, const std::string& dir, const std::string& mp, const format::Manifest& m,
                       const format::CommitRecord* c) {
  // Per referenced step: the first chunk naming it (for the message) and the end of its furthest chunk.
  struct Need {
    uint64_t first_chunk;
    uint64_t end_chunk;
    uint64_t end_bytes;
  };
  std::map<int64_t, Need> need;
  for (uint64_t ci = 0; ci < m.chunk_step.size(); ++ci) {
    if (format::IsOwnChunk(m, ci)) continue;
    const uint64_t end = m.chunk_offset[ci] + AlignUp(format::ChunkLength(m, ci), format::kMinChunkBytes);
    auto [it, fresh] = need.try_emplace(m.chunk_step[ci], Need{ci, ci, end});
    if (!fresh && end > it->second.end_bytes) it->second = Need{it->second.first_chunk, ci, end};
  }
  for (const auto& [step, n] : need) {
    const std::string field = "field chunk_step[" + std::to_string(n.first_chunk) + "] references step " + std::to_string(step);
    if (c && !std::binary_search(c->referenced_steps.begin(), c->referenced_steps.end(), step)) {
      return Status(StatusCode::kCorruption, mp + ": " + field + ", which COMMIT's referenced_steps does not list");
    }
    const std::string ref_dir = JoinPath(RootOf(dir), format::StepDirName(step));
    format::CommitRecord rc;
    Status s = CheckCommit(fs, ref_dir, step, 0, &rc);
    if (s.ok() && m.rank >= rc.world_size) s = Status(StatusCode::kCorruption, "it has no rank " + std::to_string(m.rank));
    if (!s.ok()) {
      return Status(StatusCode::kCorruption, mp + ": " + field + ", which is not a committed checkpoint (" + s.message() + ")");
    }
    const std::string dp = JoinPath(ref_dir, m.data_file);
    std::unique_ptr<File> f;
    uint64_t size = 0;
    s = fs->open(dp, OpenOptions{}, &f);
    if (s.ok()) s = f->size(&size);
    if (f) (void)f->close();
    if (!s.ok()) return Status(StatusCode::kCorruption, mp + ": " + field + ": " + s.message());
    if (size < n.end_bytes) {
      return Status(StatusCode::kCorruption, mp + ": field chunk_offset[" + std::to_string(n.end_chunk) + "] needs " +
                                                 std::to_string(n.end_bytes) + " bytes of " + dp + ", which has " +
                                                 std::to_string(size) + " (truncated?)");
    }
  }
  return Status::OK();
}

Status CheckCommit(FileSystem* fs, const std::string& dir, int64_t step, int world_size, format::CommitRecord* c) {
  const std::string commit_path = JoinPath(dir, format::kCommitName);
  std::string text;
  Status s = fs->read_file(commit_path, format::kMaxCommitBytes, &text);
  if (s.code() == StatusCode::kNotFound) return Status(StatusCode::kCorruption, commit_path + ": COMMIT missing");
  if (!s.ok()) return Status(StatusCode::kCorruption, s.message());
  PREEMPT_RETURN_IF_ERROR(format::DecodeCommit(text, commit_path, c));
  if (c->step != step) {
    return Status(StatusCode::kCorruption, commit_path + ": field step is " + std::to_string(c->step) +
                                               " in the directory of step " + std::to_string(step));
  }
  if (world_size > 0 && c->world_size != world_size) {
    return Status(StatusCode::kMismatch, commit_path + ": checkpoint was written by " + std::to_string(c->world_size) +
                                             " ranks; this job has world_size " + std::to_string(world_size));
  }
  return Status::OK();
}

Status CheckRank(FileSystem* fs, const std::string& dir, int64_t step, int rank, const format::CommitRecord* c,
                 format::Manifest* m) {
  const std::string mp = JoinPath(dir, format::RankManifestName(rank));
  std::string text;
  Status s = fs->read_file(mp, format::kMaxManifestBytes, &text);
  if (!s.ok()) return Status(StatusCode::kCorruption, s.message());
  // The data file is opened like every other file: a FIFO or device in its place is refused.
  const std::string dp = JoinPath(dir, format::RankDataName(rank));
  std::unique_ptr<File> f;
  s = fs->open(dp, OpenOptions{}, &f);
  uint64_t data_size = 0;
  if (s.ok()) s = f->size(&data_size);
  if (f) (void)f->close();
  if (!s.ok()) return Status(StatusCode::kCorruption, s.message());
  // Decoding first reports the most specific problem (version, field) before the COMMIT cross-check.
  PREEMPT_RETURN_IF_ERROR(format::DecodeManifest(text, mp, data_size, m));
  if (c && format::Hash64(text.data(), text.size()) != c->manifest_xxh3[rank]) {
    return Status(StatusCode::kCorruption, mp + ": checksum differs from the one recorded in COMMIT");
  }
  if (m->step != step) {
    return Status(StatusCode::kCorruption, mp + ": field step is " + std::to_string(m->step) +
                                               " in the directory of step " + std::to_string(step));
  }
  if (m->rank != rank) {
    return Status(StatusCode::kCorruption, mp + ": field rank is " + std::to_string(m->rank));
  }
  if (c && m->world_size != c->world_size) {
    return Status(StatusCode::kCorruption, mp + ": field world_size is " + std::to_string(m->world_size) +
                                               ", COMMIT says " + std::to_string(c->world_size));
  }
  return CheckReferences(fs, dir, mp, *m, c);
}

Status CheckCheckpoint(FileSystem* fs, const std::string& dir, int64_t step, int rank, int world_size,
                       format::CommitRecord* c, format::Manifest* m, uint64_t* bytes, uint64_t* written_bytes) {
  PREEMPT_RETURN_IF_ERROR(CheckCommit(fs, dir, step, world_size, c));
  if (bytes) *bytes = 0;
  if (written_bytes) *written_bytes = 0;
  if (rank >= 0) {
    if (rank >= c->world_size) {
      return Status(StatusCode::kMismatch, JoinPath(dir, format::kCommitName) + ": has no rank " + std::to_string(rank));
    }
    PREEMPT_RETURN_IF_ERROR(CheckRank(fs, dir, step, rank, c, m));
    if (bytes) *bytes = m->data_bytes;
    if (written_bytes) *written_bytes = m->file_bytes;
    return Status::OK();
  }
  for (int r = 0; r < c->world_size; ++r) {
    PREEMPT_RETURN_IF_ERROR(CheckRank(fs, dir, step, r, c, m));
    if (bytes) *bytes += m->data_bytes;
    if (written_bytes) *written_bytes += m->file_bytes;
  }
  return Status::OK();
}

}  // namespace preempt::store_internal
