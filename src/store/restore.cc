// Store restores: pick the newest valid committed checkpoint, match its entries to the caller's
// targets, read every chunk and check its checksum while scattering the bytes.
#include <algorithm>
#include <cstring>
#include <map>

#include "preempt/log.h"
#include "store/checkpoint_check.h"
#include "store/store_impl.h"

namespace preempt {
namespace {

using format::CommitRecord;
using format::Manifest;

// Piece of a chunk hashed then scattered while still in cache.
constexpr uint64_t kHashPiece = 256 << 10;
// A step retired under a restore makes it list again; bounded so a root that keeps changing
// faster than a checkpoint can be read ends in an error instead of a loop.
constexpr int kMaxRelists = 64;

// Where each checkpoint entry goes while reading: a caller target or an owned buffer.
struct Destination {
  const TensorInfo* info;
  uint8_t* data;
};

std::string Describe(DType d, const std::vector<int64_t>& shape, uint64_t n) {
  std::string s = std::string(DTypeName(d)) + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "] (" + std::to_string(n) + " bytes)";
}

std::string JoinNames(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 8) s += " and " + std::to_string(v.size() - 8) + " more";
  return s;
}

// Pairs the manifest's entries with targets (or owned buffers in r->owned); sorted by offset.
Status MatchTargets(const std::string& dir, const Manifest& m, const std::vector<RestoreTarget>& targets,
                    const RestoreOptions& opts, std::vector<Destination>* dest, RestoreResult* r) {
  std::map<std::string, const RestoreTarget*> by_name;
  for (const auto& t : targets) by_name[t.name] = &t;
  std::vector<const TensorInfo*> untargeted;
  for (const auto& t : m.tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      untargeted.push_back(&t);
      continue;
    }
    const RestoreTarget& tg = *it->second;
    by_name.erase(it);
    if (tg.owned) {
      auto& buf = r->owned[t.name];
      buf = AlignedBuffer(t.nbytes, /*prefault=*/false);
      dest->push_back({&t, buf.data()});
      continue;
    }
    if (tg.nbytes != t.nbytes || tg.dtype != t.dtype || (tg.check_shape && tg.shape != t.shape)) {
      return Status(StatusCode::kMismatch, dir + ": tensor " + t.name + ": checkpoint has " +
                                               Describe(t.dtype, t.shape, t.nbytes) + ", target is " +
                                               Describe(tg.dtype, tg.shape, tg.nbytes));
    }
    if (t.nbytes > 0 && tg.data == nullptr) {
      return Status(StatusCode::kInvalidArgument, "restore target " + t.name + " has no data pointer");
    }
    dest->push_back({&t, static_cast<uint8_t*>(tg.data)});
  }
  std::vector<std::string> missing;
  for (auto& [name, tg] : by_name) {
    if (!tg->optional) missing.push_back(name);
  }
  std::vector<std::string> unexpected;
  for (const auto* t : untargeted) unexpected.push_back(t->name);
  if (opts.strict && (!untargeted.empty() || !missing.empty())) {
    std::string msg = dir + ": strict restore: ";
    if (!missing.empty()) msg += "missing in checkpoint: " + JoinNames(missing);
    if (!unexpected.empty()) msg += std::string(missing.empty() ? "" : "; ") + "unexpected in checkpoint: " + JoinNames(unexpected);
    return Status(StatusCode::kMismatch, msg);
  }
  if (opts.allocate_untargeted) {
    for (const auto* t : untargeted) {
      auto& buf = r->owned[t->name];
      buf = AlignedBuffer(t->nbytes, /*prefault=*/false);
      dest->push_back({t, buf.data()});
    }
  }
  std::sort(dest->begin(), dest->end(), [](auto& a, auto& b) { return a.info->offset < b.info->offset; });
  r->missing = std::move(missing);
  r->unexpected = std::move(unexpected);
  return Status::OK();
}

Status ChecksumMismatch(const Manifest& m, const std::string& dp, uint64_t c, uint64_t begin, uint64_t len) {
  return Status(StatusCode::kCorruption, dp + ": " + store_internal::ChunkLabel(m, c) + " (bytes " + std::to_string(begin) + ".." +
                                             std::to_string(begin + len) + ", tensors " +
                                             format::TensorsInRange(m, begin, begin + len) + ") checksum mismatch");
}

// Verifies one chunk read into `slot` from the file `dp` and scatters its bytes to the
// destinations; a chunk read straight into its destination (slot->target) is verified there.
Status ScatterChunk(const Manifest& m, const std::string& dp, const std::vector<Destination>& dest,
                    XXH3_state_t* hash, io::Slot* slot, size_t got) {
  const uint64_t c = slot->tag;
  const uint64_t begin = c * m.chunk_bytes;
  const uint64_t len = std::min<uint64_t>(m.chunk_bytes, m.data_bytes - begin);
  if (got < len) {
    return Status(StatusCode::kCorruption, dp + ": " + store_internal::ChunkLabel(m, c) + " truncated (tensors " +
                                               format::TensorsInRange(m, begin, begin + len) + ")");
  }
  // Verify and scatter piece by piece while each piece is in cache. A mismatch is only known at
  // the end of the chunk: targets may then hold unverified bytes, which the contract allows (a
  // failed restore leaves targets unspecified; a fallback rewrites all).
  XXH3_64bits_reset(hash);
  if (slot->target != nullptr) {  // read in place (see restore_step): verify there
    XXH3_64bits_update(hash, slot->target, len);
    if (XXH3_64bits_digest(hash) != m.chunk_xxh3[c]) return ChecksumMismatch(m, dp, c, begin, len);
    return Status::OK();
  }
  auto first = std::lower_bound(dest.begin(), dest.end(), begin, [](const Destination& d, uint64_t b) {
    return d.info->offset + d.info->nbytes <= b;
  });
  for (uint64_t piece = begin; piece < begin + len; piece += kHashPiece) {
    const uint64_t piece_end = std::min(begin + len, piece + kHashPiece);
    XXH3_64bits_update(hash, slot->data + (piece - begin), piece_end - piece);
    for (auto it = first; it != dest.end() && it->info->offset < piece_end; ++it) {
      const uint64_t from = std::max(piece, it->info->offset);
      const uint64_t to = std::min(piece_end, it->info->offset + it->info->nbytes);
      if (to > from) std::memcpy(it->data + (from - it->info->offset), slot->data + (from - begin), to - from);
      if (it->info->offset + it->info->nbytes <= piece_end) first = it + 1;
    }
  }
  if (XXH3_64bits_digest(hash) != m.chunk_xxh3[c]) return ChecksumMismatch(m, dp, c, begin, len);
  return Status::OK();
}

// The destination memory of chunk c when the chunk lies inside one destination at a 4 KiB-aligned
// address and is whole pages (it can be read there directly), else nullptr.
uint8_t* InPlaceTarget(const Manifest& m, const std::vector<Destination>& dest, uint64_t c) {
  const uint64_t begin = c * m.chunk_bytes;
  const uint64_t len = std::min<uint64_t>(m.chunk_bytes, m.data_bytes - begin);
  if (len % kIoAlignment != 0) return nullptr;
  auto it = std::lower_bound(dest.begin(), dest.end(), begin, [](const Destination& d, uint64_t b) {
    return d.info->offset + d.info->nbytes <= b;
  });
  if (it == dest.end() || it->info->offset > begin || it->info->offset + it->info->nbytes < begin + len) return nullptr;
  uint8_t* p = it->data + (begin - it->info->offset);
  return reinterpret_cast<uintptr_t>(p) % kIoAlignment == 0 ? p : nullptr;
}

}  // namespace

Status Store::Impl::committed_steps(std::vector<int64_t>* out) {
  out->clear();
  if (!fs_->is_dir(o_.root)) return Status::OK();
  std::vector<std::string> names;
  PREEMPT_RETURN_IF_ERROR(fs_->list_dir(o_.root, &names));
  for (const auto& n : names) {
    int64_t step;
    format::StepDirKind kind;
    if (format::ParseStepDirName(n, &step, &kind) && kind == format::StepDirKind::kCommitted) out->push_back(step);
  }
  std::sort(out->begin(), out->end(), std::greater<int64_t>());
  return Status::OK();
}

Status Store::Impl::list(std::vector<CheckpointInfo>* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "Store::list: out is null");
  out->clear();
  std::vector<int64_t> steps;
  PREEMPT_RETURN_IF_ERROR(committed_steps(&steps));
  for (int64_t step : steps) {
    CheckpointInfo info;
    info.step = step;
    info.path = JoinPath(o_.root, format::StepDirName(step));
    Manifest m;
    CommitRecord c;
    Status s = store_internal::CheckCheckpoint(fs_, info.path, step, o_.rank, o_.world_size, &c, &m, &info.bytes,
                                               &info.written_bytes);
    if (!s.ok() && !fs_->is_dir(info.path)) continue;  // retired while being listed
    info.valid = s.ok();
    info.world_size = s.ok() ? c.world_size : 0;
    if (!s.ok()) info.problem = s.message();
    out->push_back(std::move(info));
  }
  return Status::OK();
}

Status Store::Impl::restore_step(int64_t step, const std::vector<RestoreTarget>& targets, const RestoreOptions& opts,
                                 RestoreResult* r) {
  const std::string dir = JoinPath(o_.root, format::StepDirName(step));
  const auto t0 = std::chrono::steady_clock::now();
  Manifest m;
  CommitRecord c;
  PREEMPT_RETURN_IF_ERROR(store_internal::CheckCheckpoint(fs_, dir, step, o_.rank, o_.world_size, &c, &m, nullptr));
  std::vector<Destination> dest;
  PREEMPT_RETURN_IF_ERROR(MatchTargets(dir, m, targets, opts, &dest, r));

  // Read every chunk (checksums cover all of them), scatter the overlapping bytes.
  std::unique_lock<std::mutex> engine_lock(restore_engine_mu_, std::try_to_lock);
  std::unique_ptr<io::IoEngine> own_engine;
  std::unique_ptr<io::IoEngine>& engine = engine_lock.owns_lock() ? restore_engine_ : own_engine;
  if (!engine || engine->slot_bytes() != m.chunk_bytes) {
    io::EngineOptions eo;
    eo.depth = o_.read_queue_depth;
    eo.slot_bytes = m.chunk_bytes;
    eo.backend = o_.io_backend;
    engine.reset();
    PREEMPT_RETURN_IF_ERROR(io::IoEngine::Create(eo, &engine));
  }
  // One pass per data file: this step's own, then each older step's whose chunks it references.
  std::map<int64_t, std::vector<uint64_t>> chunks_by_step;
  for (uint64_t ci = 0; ci < m.chunk_xxh3.size(); ++ci) chunks_by_step[m.chunk_step[ci]].push_back(ci);
  for (auto& [holder, chunks] : chunks_by_step) {  // sequential reads within each file
    std::sort(chunks.begin(), chunks.end(), [&](uint64_t a, uint64_t b) { return m.chunk_offset[a] < m.chunk_offset[b]; });
  }
  if (chunks_by_step.empty()) chunks_by_step[step];  // the own file is opened even when empty
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), &XXH3_freeState);
  for (auto group = chunks_by_step.rbegin(); group != chunks_by_step.rend(); ++group) {
    const std::vector<uint64_t>& chunks = group->second;
    const std::string dp = chunks.empty() ? JoinPath(dir, m.data_file) : store_internal::ChunkFilePath(dir, m, chunks[0]);
    std::unique_ptr<File> file;
    bool direct = false;
    PREEMPT_RETURN_IF_ERROR(OpenData(fs_, dp, false, o_.direct_io, &file, &direct));
    auto queue = engine->open_queue(file.get());
    if (group == chunks_by_step.rbegin()) r->backend = std::string(queue->backend_name()) + (direct ? "+direct" : "+buffered");
    queue->set_read_done([&](io::Slot* slot, size_t got) { return ScatterChunk(m, dp, dest, hash.get(), slot, got); });
    Status s;
    for (uint64_t ci : chunks) {
      io::Slot* slot = nullptr;
      s = queue->acquire(Deadline::Never(), &slot);
      if (!s.ok()) break;
      slot->tag = ci;
      if (o_.read_into_targets) slot->target = InPlaceTarget(m, dest, ci);
      if (slot->target) r->in_place_bytes += format::ChunkLength(m, ci);
      s = queue->submit_read(slot, AlignUp(format::ChunkLength(m, ci), kIoAlignment), m.chunk_offset[ci]);
      if (!s.ok()) break;
    }
    Status d = queue->drain(Deadline::Never());
    if (s.ok()) s = d;
    PREEMPT_RETURN_IF_ERROR(s);
  }
  r->step = step;
  r->path = dir;
  r->metadata = m.metadata;
  r->tensors = m.tensors;
  r->bytes = m.data_bytes;
  r->read_s = SecondsSince(t0);
  return Status::OK();
}

Status Store::Impl::restore(const std::vector<RestoreTarget>& targets, const RestoreOptions& opts, RestoreResult* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "Store::restore: out is null");
  std::vector<std::string> rejected;
  std::vector<int64_t> rejected_steps;
  for (int relists = 0;; ++relists) {
    std::vector<int64_t> candidates;
    PREEMPT_RETURN_IF_ERROR(committed_steps(&candidates));
    if (opts.step) candidates.erase(std::remove_if(candidates.begin(), candidates.end(), [&](int64_t s) { return s != *opts.step; }),
                                    candidates.end());
    if (candidates.empty() && rejected.empty()) {
      return Status(StatusCode::kNotFound, opts.step ? "no committed checkpoint for step " + std::to_string(*opts.step) + " in " + o_.root
                                                     : "no committed checkpoint in " + o_.root);
    }
    bool vanished = false;
    for (int64_t step : candidates) {
      if (std::find(rejected_steps.begin(), rejected_steps.end(), step) != rejected_steps.end()) continue;
      const std::string dir = JoinPath(o_.root, format::StepDirName(step));
      RestoreResult r;
      Status s = restore_step(step, targets, opts, &r);
      if (s.ok()) {
        r.rejected = rejected;
        PREEMPT_LOG_INFO("restored step %lld rank %d: %.1f MiB in %.3f s (%s)%s", static_cast<long long>(step), o_.rank,
                         r.bytes / 1048576.0, r.read_s, r.backend.c_str(),
                         rejected.empty() ? "" : " after skipping newer invalid checkpoints");
        *out = std::move(r);
        return Status::OK();
      }
      if (s.code() == StatusCode::kMismatch || s.code() == StatusCode::kInvalidArgument) return s;
      if (!fs_->is_dir(dir) && relists < kMaxRelists) {
        // Retired while being read (retention of a writer): not corruption; look again.
        PREEMPT_LOG_INFO("checkpoint %s was retired while being read; listing again", dir.c_str());
        vanished = true;
        break;
      }
      if (!opts.fallback) return s;
      PREEMPT_LOG_WARN("checkpoint %s rejected: %s", dir.c_str(), s.message().c_str());
      rejected.push_back(s.message());
      rejected_steps.push_back(step);
    }
    if (!vanished) break;
  }
  std::string msg = "no valid checkpoint in " + o_.root + ":";
  for (const auto& r : rejected) msg += " [" + r + "]";
  return Status(StatusCode::kCorruption, msg);
}

}  // namespace preempt
