#include "store/checkpoint_check.h"

namespace preempt::store_internal {

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
  return Status::OK();
}

Status CheckCheckpoint(FileSystem* fs, const std::string& dir, int64_t step, int rank, int world_size,
                       format::CommitRecord* c, format::Manifest* m, uint64_t* bytes) {
  PREEMPT_RETURN_IF_ERROR(CheckCommit(fs, dir, step, world_size, c));
  if (bytes) *bytes = 0;
  if (rank >= 0) {
    if (rank >= c->world_size) {
      return Status(StatusCode::kMismatch, JoinPath(dir, format::kCommitName) + ": has no rank " + std::to_string(rank));
    }
    PREEMPT_RETURN_IF_ERROR(CheckRank(fs, dir, step, rank, c, m));
    if (bytes) *bytes = m->data_bytes;
    return Status::OK();
  }
  for (int r = 0; r < c->world_size; ++r) {
    PREEMPT_RETURN_IF_ERROR(CheckRank(fs, dir, step, r, c, m));
    if (bytes) *bytes += m->data_bytes;
  }
  return Status::OK();
}

}  // namespace preempt::store_internal
