// Store: the public façade (option checks, save submission, restore, listing) and the
// read-only inspection calls that need no Store.
#include "preempt/store.h"

#include <algorithm>

#include "store/checkpoint_check.h"
#include "store/root_entries.h"
#include "store/store_impl.h"

namespace preempt {

std::string StepDirName(int64_t step) { return format::StepDirName(step); }

bool IsStoreRootEntry(const std::string& name) {
  int64_t step;
  format::StepDirKind kind;
  if (format::ParseStepDirName(name, &step, &kind) || name == format::kLatestName) return true;
  // LATEST being replaced (save.cc: remove_leftovers) and the writers' locks (acquire_writer_lock).
  const std::string latest_tmp = std::string(format::kLatestName) + ".tmp.";
  return name.rfind(latest_tmp, 0) == 0 || name.rfind(".lock.rank-", 0) == 0;
}

Store::Store(StoreOptions options) : options_(std::move(options)) {
  auto invalid = [](const std::string& what) { return Error(Status(StatusCode::kInvalidArgument, "StoreOptions." + what)); };
  if (options_.root.empty()) throw invalid("root is empty");
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
    throw invalid("rank " + std::to_string(options_.rank) + " is not in [0, world_size=" +
                  std::to_string(options_.world_size) + ")");
  }
  if (options_.world_size > format::kMaxWorldSize) throw invalid("world_size is above " + std::to_string(format::kMaxWorldSize));
  if (options_.keep_last < 1) {
    throw invalid("keep_last is " + std::to_string(options_.keep_last) + "; at least 1 checkpoint must be kept");
  }
  if (options_.chunk_bytes < format::kMinChunkBytes || options_.chunk_bytes > format::kMaxChunkBytes ||
      options_.chunk_bytes % format::kMinChunkBytes) {
    throw invalid("chunk_bytes must be a multiple of 4096 in [4 KiB, 1 GiB]");
  }
  if (options_.queue_depth < 1 || options_.queue_depth > 256) throw invalid("queue_depth must be in [1, 256]");
  if (options_.read_queue_depth < 1 || options_.read_queue_depth > 256) throw invalid("read_queue_depth must be in [1, 256]");
  if (!(options_.commit_timeout_s > 0)) throw invalid("commit_timeout_s must be > 0");
  impl_ = std::make_unique<Impl>(options_);
}

Store::~Store() = default;

std::shared_ptr<SaveHandle> Store::save_async(SaveRequest req) { return impl_->enqueue(std::move(req)); }

Status Store::save(SaveRequest req, Deadline deadline) { return save_async(std::move(req))->wait(deadline); }

Status Store::restore(const std::vector<RestoreTarget>& targets, const RestoreOptions& opts, RestoreResult* out) {
  return impl_->restore(targets, opts, out);
}

Status Store::list(std::vector<CheckpointInfo>* out) { return impl_->list(out); }

Status Store::valid_steps(std::vector<int64_t>* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "Store::valid_steps: out is null");
  out->clear();
  std::vector<CheckpointInfo> all;
  PREEMPT_RETURN_IF_ERROR(list(&all));
  for (const auto& c : all)
    if (c.valid) out->push_back(c.step);
  return Status::OK();
}

// =============================================================================================
// Read-only inspection
// =============================================================================================
Status Store::ListCheckpoints(const std::string& root, std::vector<CheckpointInfo>* out, FileSystem* fs) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "Store::ListCheckpoints: out is null");
  if (!fs) fs = FileSystem::Default();
  out->clear();
  if (!fs->is_dir(root)) return Status(StatusCode::kNotFound, root + ": not a directory");
  std::vector<std::string> names;
  PREEMPT_RETURN_IF_ERROR(fs->list_dir(root, &names));
  for (const auto& name : names) {
    int64_t step;
    format::StepDirKind kind;
    if (!format::ParseStepDirName(name, &step, &kind)) continue;
    if (kind != format::StepDirKind::kCommitted && kind != format::StepDirKind::kPartial) continue;
    CheckpointInfo info;
    info.step = step;
    info.path = JoinPath(root, name);
    info.committed = kind == format::StepDirKind::kCommitted;
    if (!info.committed) {
      info.problem = "partial (never committed)";
      out->push_back(std::move(info));
      continue;
    }
    format::CommitRecord c;
    format::Manifest m;
    Status s = store_internal::CheckCheckpoint(fs, info.path, step, -1, 0, &c, &m, &info.bytes, &info.written_bytes);
    if (!s.ok() && !fs->is_dir(info.path)) continue;  // retired while being listed
    info.valid = s.ok();
    info.world_size = s.ok() ? c.world_size : 0;
    if (!s.ok()) info.problem = s.message();
    out->push_back(std::move(info));
  }
  std::sort(out->begin(), out->end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.step != b.step ? a.step > b.step : a.committed > b.committed;
  });
  return Status::OK();
}

Status Store::ReadManifest(const std::string& dir, int rank, CheckpointManifest* out, FileSystem* fs) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "Store::ReadManifest: out is null");
  if (!fs) fs = FileSystem::Default();
  if (rank < 0 || rank >= format::kMaxWorldSize) {
    return Status(StatusCode::kInvalidArgument, "rank " + std::to_string(rank) + " is out of range");
  }
  if (!fs->is_dir(dir)) return Status(StatusCode::kNotFound, dir + ": not a directory");
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  int64_t step;
  format::StepDirKind kind;
  if (!format::ParseStepDirName(base.substr(base.find_last_of('/') + 1), &step, &kind)) {
    return Status(StatusCode::kInvalidArgument, dir + ": not a checkpoint directory (step-NNNNNNNN)");
  }
  const std::string mp = JoinPath(dir, format::RankManifestName(rank));
  if (!fs->exists(mp)) return Status(StatusCode::kNotFound, mp + ": no manifest for rank " + std::to_string(rank));
  format::Manifest m;
  PREEMPT_RETURN_IF_ERROR(store_internal::CheckRank(fs, dir, step, rank, nullptr, &m));
  *out = CheckpointManifest();
  out->step = m.step;
  out->rank = m.rank;
  out->world_size = m.world_size;
  out->format_version = m.format_version;
  out->created_unix_ms = m.created_unix_ms;
  out->data_file = m.data_file;
  out->chunk_bytes = m.chunk_bytes;
  out->data_bytes = m.data_bytes;
  out->chunks = m.chunk_xxh3.size();
  out->file_bytes = m.file_bytes;
  for (uint64_t c = 0; c < m.chunk_xxh3.size(); ++c) {
    if (format::IsOwnChunk(m, c)) continue;
    ++out->referenced_chunks;
    out->referenced_bytes += format::ChunkLength(m, c);
  }
  out->referenced_steps = format::ReferencedSteps(m);
  out->tensors = std::move(m.tensors);
  out->metadata = std::move(m.metadata);
  return Status::OK();
}

}  // namespace preempt
