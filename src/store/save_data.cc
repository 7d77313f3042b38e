// Store saves, data part: one rank's data file and manifest. Each chunk of the items' layout is
// checksummed; an unchanged chunk (same length and XXH3 as the same chunk of the dedup base) is
// referenced where the base found it, every other chunk is appended to this step's data file
// (those expected to change first, see InPlaceHashes).
#include <algorithm>
#include <cstring>
#include <thread>

#include "store/store_impl.h"

namespace preempt {
namespace {

using format::Manifest;

// Piece of a chunk copied then hashed while still in cache.
constexpr uint64_t kHashPiece = 256 << 10;

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The bytes of the logical data layout, read from the request's items; the alignment gaps
// between items read as zeros.
class LayoutBytes {
 public:
  LayoutBytes(const std::vector<TensorInfo>& layout, const std::vector<SaveItem>& items) : layout_(layout), items_(items) {}

  // Calls fn(src, offset, len) for consecutive segments covering [begin, end): src points at item
  // bytes, or is null for a gap of zeros.
  template <class Fn>
  void for_each_segment(uint64_t begin, uint64_t end, Fn&& fn) const {
    auto it = std::lower_bound(layout_.begin(), layout_.end(), begin,
                               [](const TensorInfo& t, uint64_t b) { return t.offset + t.nbytes <= b; });
    uint64_t at = begin;
    for (; it != layout_.end() && it->offset < end && at < end; ++it) {
      const uint64_t from = std::max(at, it->offset);
      const uint64_t to = std::min(end, it->offset + it->nbytes);
      if (to <= from) continue;
      if (from > at) fn(nullptr, at, from - at);
      const auto* src = static_cast<const uint8_t*>(items_[it - layout_.begin()].data);
      fn(src + (from - it->offset), from, to - from);
      at = to;
    }
    if (at < end) fn(nullptr, at, end - at);
  }

  // Item bytes in [begin, end) (the rest are alignment gaps).
  uint64_t Payload(uint64_t begin, uint64_t end) const {
    uint64_t n = 0;
    for_each_segment(begin, end, [&](const uint8_t* src, uint64_t, uint64_t len) { n += src ? len : 0; });
    return n;
  }

  // XXH3 of [begin, end) read straight from the items (nothing copied).
  uint64_t Hash(uint64_t begin, uint64_t end, XXH3_state_t* h) const {
    static const uint8_t kZeros[256] = {};
    XXH3_64bits_reset(h);
    for_each_segment(begin, end, [&](const uint8_t* src, uint64_t, uint64_t len) {
      if (src) {
        XXH3_64bits_update(h, src, len);
        return;
      }
      for (uint64_t done = 0; done < len;) {
        const uint64_t n = std::min<uint64_t>(sizeof(kZeros), len - done);
        XXH3_64bits_update(h, kZeros, n);
        done += n;
      }
    });
    return XXH3_64bits_digest(h);
  }

  // The memory of [begin, end) when it lies inside one item, else nullptr.
  const uint8_t* Contiguous(uint64_t begin, uint64_t end) const {
    const uint8_t* out = nullptr;
    int segments = 0;
    for_each_segment(begin, end, [&](const uint8_t* src, uint64_t off, uint64_t len) {
      ++segments;
      if (src && off == begin && len == end - begin) out = src;
    });
    return segments == 1 ? out : nullptr;
  }

  // Copies [begin, end) to dst and returns its XXH3, hashing each piece right after copying it,
  // while it is still in cache: the checksum covers exactly the bytes written.
  uint64_t CopyAndHash(uint64_t begin, uint64_t end, uint8_t* dst, XXH3_state_t* h) const {
    XXH3_64bits_reset(h);
    for (uint64_t piece = begin; piece < end; piece += kHashPiece) {
      const uint64_t piece_end = std::min(end, piece + kHashPiece);
      for_each_segment(piece, piece_end, [&](const uint8_t* src, uint64_t off, uint64_t len) {
        if (src) std::memcpy(dst + (off - begin), src, len);
        else std::memset(dst + (off - begin), 0, len);
      });
      XXH3_64bits_update(h, dst + (piece - begin), piece_end - piece);
    }
    return XXH3_64bits_digest(h);
  }

 private:
  const std::vector<TensorInfo>& layout_;
  const std::vector<SaveItem>& items_;
};

// Whether chunk c of `m` may be referenced from `base`: same chunk size, same length.
bool SameChunk(const Manifest* base, const Manifest& m, uint64_t c) {
  return base && base->chunk_bytes == m.chunk_bytes && c < base->chunk_xxh3.size() &&
         format::ChunkLength(*base, c) == format::ChunkLength(m, c);
}

// Hashes, in place, the chunks expected unchanged, on helper threads, while the save thread
// writes the others; the save thread then helps with what is left (finish()).
class InPlaceHashes {
 public:
  InPlaceHashes(const LayoutBytes& bytes, const Manifest& m, std::vector<uint64_t> chunks, const std::atomic<bool>& cancelled)
      : bytes_(bytes), m_(m), cancelled_(cancelled), chunks_(std::move(chunks)), hashes_(chunks_.size()) {
    const unsigned hw = std::max(2u, std::thread::hardware_concurrency());
    const size_t threads = std::min<size_t>({kMaxHashThreads, hw - 1, chunks_.size() / 2});
    for (size_t t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  // On an early return (an I/O error): the helpers stop at their next chunk.
  ~InPlaceHashes() {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& w : workers_) w.join();
  }
  // Hashes what no helper took yet on the calling thread, then waits for the helpers.
  void finish() {
    work();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }
  // The chunks, ascending, and (after finish) their checksums.
  const std::vector<uint64_t>& chunks() const { return chunks_; }
  uint64_t hash(size_t i) const { return hashes_[i]; }

 private:
  static constexpr size_t kMaxHashThreads = 4;
  void work() {
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> h(XXH3_createState(), &XXH3_freeState);
    for (size_t i = next_++; i < chunks_.size(); i = next_++) {
      if (cancelled_.load(std::memory_order_relaxed) || stop_.load(std::memory_order_relaxed)) return;
      const uint64_t begin = chunks_[i] * m_.chunk_bytes;
      hashes_[i] = bytes_.Hash(begin, begin + format::ChunkLength(m_, chunks_[i]), h.get());
    }
  }
  const LayoutBytes& bytes_;
  const Manifest& m_;
  const std::atomic<bool>& cancelled_;
  const std::vector<uint64_t> chunks_;
  std::vector<uint64_t> hashes_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

// Puts chunks of the layout into the data file being written, or references them in the base.
class ChunkWriter {
 public:
  ChunkWriter(SaveJob* job, Manifest* m, const Manifest* base, const LayoutBytes& bytes, io::IoQueue* queue,
              XXH3_state_t* hash, SaveStats* stats, bool from_items)
      : job_(job), m_(*m), base_(base), bytes_(bytes), queue_(queue), hash_(hash), stats_(stats), from_items_(from_items) {}

  // Chunk `c`; `in_place_hash`: its checksum computed from the items (nullptr: not computed).
  // Unchanged: referenced. Changed: copied to a staging slot, hashed and written.
  Status put(uint64_t c, const uint64_t* in_place_hash) {
    if (job_->cancelled_.load(std::memory_order_relaxed)) {
      (void)queue_->drain(Deadline::Never());
      return Status(StatusCode::kAborted, "checkpoint step " + std::to_string(m_.step) + " cancelled");
    }
    const uint64_t begin = c * m_.chunk_bytes;
    const uint64_t len = format::ChunkLength(m_, c);
    const uint64_t payload = bytes_.Payload(begin, begin + len);
    job_->written_.fetch_add(payload, std::memory_order_relaxed);
    if (in_place_hash && *in_place_hash == base_->chunk_xxh3[c]) return reference(c, payload);
    const uint8_t* src = from_items_ ? bytes_.Contiguous(begin, begin + len) : nullptr;
    if (src && len % kIoAlignment == 0 && reinterpret_cast<uintptr_t>(src) % kIoAlignment == 0) {
      return put_from_item(c, src, len, payload, in_place_hash);
    }
    if (slot_ == nullptr) PREEMPT_RETURN_IF_ERROR(queue_->acquire(Deadline::Never(), &slot_));
    const uint64_t h = bytes_.CopyAndHash(begin, begin + len, slot_->data, hash_);
    if (SameChunk(base_, m_, c) && h == base_->chunk_xxh3[c]) return reference(c, payload);  // slot kept
    const uint64_t padded = AlignUp(len, kIoAlignment);
    if (padded > len) std::memset(slot_->data + len, 0, padded - len);
    m_.chunk_xxh3[c] = h;
    m_.chunk_offset[c] = m_.file_bytes;
    PREEMPT_RETURN_IF_ERROR(queue_->submit_write(slot_, padded, m_.file_bytes));
    slot_ = nullptr;
    m_.file_bytes += padded;
    stats_->written_bytes += payload;
    return Status::OK();
  }

 private:
  // Chunk c, whole pages of one item at `src`: hashed and written there, no copy.
  Status put_from_item(uint64_t c, const uint8_t* src, uint64_t len, uint64_t payload, const uint64_t* in_place_hash) {
    uint64_t h = 0;
    if (in_place_hash) {
      h = *in_place_hash;
    } else {
      XXH3_64bits_reset(hash_);
      XXH3_64bits_update(hash_, src, len);
      h = XXH3_64bits_digest(hash_);
    }
    if (SameChunk(base_, m_, c) && h == base_->chunk_xxh3[c]) return reference(c, payload);
    io::Slot* slot = slot_;  // a slot kept from a referenced chunk, or a new one
    slot_ = nullptr;
    if (slot == nullptr) PREEMPT_RETURN_IF_ERROR(queue_->acquire(Deadline::Never(), &slot));
    slot->source = src;
    m_.chunk_xxh3[c] = h;
    m_.chunk_offset[c] = m_.file_bytes;
    PREEMPT_RETURN_IF_ERROR(queue_->submit_write(slot, len, m_.file_bytes));
    m_.file_bytes += len;
    stats_->written_bytes += payload;
    stats_->from_items_bytes += payload;
    return Status::OK();
  }

  // The base's location of chunk c: the step that wrote the bytes, never a reference to a reference.
  Status reference(uint64_t c, uint64_t payload) {
    m_.chunk_xxh3[c] = base_->chunk_xxh3[c];
    m_.chunk_step[c] = base_->chunk_step[c];
    m_.chunk_offset[c] = base_->chunk_offset[c];
    stats_->referenced_bytes += payload;
    return Status::OK();
  }

  SaveJob* const job_;
  Manifest& m_;
  const Manifest* const base_;
  const LayoutBytes& bytes_;
  io::IoQueue* const queue_;
  XXH3_state_t* const hash_;
  SaveStats* const stats_;
  const bool from_items_;
  io::Slot* slot_ = nullptr;  // acquired and not yet submitted: kept across referenced chunks
};

Status WriteManifest(FileSystem* fs, const std::string& path, const Manifest& m, uint64_t* manifest_xxh3) {
  const std::string text = format::EncodeManifest(m);
  *manifest_xxh3 = format::Hash64(text.data(), text.size());
  std::unique_ptr<File> mf;
  OpenOptions mo;
  mo.write = mo.create = true;
  PREEMPT_RETURN_IF_ERROR(fs->open(path, mo, &mf));
  PREEMPT_RETURN_IF_ERROR(mf->write_at(text.data(), text.size(), 0));
  PREEMPT_RETURN_IF_ERROR(mf->sync());
  return mf->close();
}

}  // namespace

Status Store::Impl::write_rank_files(SaveJob* job, const std::string& tmp_dir, SaveStats* stats, uint64_t* manifest_xxh3,
                                     Manifest* written) {
  const auto& req = job->req_;
  Manifest& m = *written;
  m = Manifest();
  m.step = req.step;
  m.rank = o_.rank;
  m.world_size = o_.world_size;
  m.created_unix_ms = UnixMillis();
  m.data_file = format::RankDataName(o_.rank);
  m.chunk_bytes = o_.chunk_bytes;
  m.metadata = req.metadata;
  PREEMPT_RETURN_IF_ERROR(format::LayoutItems(req.items, &m.tensors, &m.data_bytes));
  const Manifest* base = nullptr;
  PREEMPT_RETURN_IF_ERROR(find_dedup_base(req.step, &base));
  PREEMPT_RETURN_IF_ERROR(ensure_engine());
  const uint64_t chunks = (m.data_bytes + m.chunk_bytes - 1) / m.chunk_bytes;
  m.chunk_xxh3.assign(chunks, 0);
  m.chunk_step.assign(chunks, m.step);
  m.chunk_offset.assign(chunks, 0);
  // A chunk the base already referenced was unchanged last time: it is hashed from the items
  // first and copied only if it changed. Every other chunk is copied and hashed in one pass (and
  // still referenced if it turns out unchanged). Space is reserved for the chunks expected to be written.
  auto expect_unchanged = [&](uint64_t c) { return SameChunk(base, m, c) && !format::IsOwnChunk(*base, c); };
  uint64_t expected_bytes = 0;
  for (uint64_t c = 0; c < chunks; ++c) {
    if (!expect_unchanged(c)) expected_bytes += AlignUp(format::ChunkLength(m, c), kIoAlignment);
  }

  const std::string data_path = JoinPath(tmp_dir, m.data_file);
  std::unique_ptr<File> file;
  bool direct = false;
  PREEMPT_RETURN_IF_ERROR(OpenData(fs_, data_path, true, o_.direct_io, &file, &direct));
  if (expected_bytes > 0) PREEMPT_RETURN_IF_ERROR(file->allocate(expected_bytes));
  const LayoutBytes bytes(m.tensors, req.items);
  auto t0 = std::chrono::steady_clock::now();
  {
    auto queue = engine_->open_queue(file.get());
    stats->backend = std::string(queue->backend_name()) + (direct ? "+direct" : "+buffered");
    std::vector<uint64_t> expected_written, expected_unchanged;
    for (uint64_t c = 0; c < chunks; ++c) (expect_unchanged(c) ? expected_unchanged : expected_written).push_back(c);
    InPlaceHashes in_place(bytes, m, std::move(expected_unchanged), job->cancelled_);
    ChunkWriter writer(job, &m, base, bytes, queue.get(), hash_state_.get(), stats, o_.write_from_items);
    for (uint64_t c : expected_written) PREEMPT_RETURN_IF_ERROR(writer.put(c, nullptr));
    in_place.finish();
    for (size_t i = 0; i < in_place.chunks().size(); ++i) {
      const uint64_t h = in_place.hash(i);
      PREEMPT_RETURN_IF_ERROR(writer.put(in_place.chunks()[i], &h));
    }
    stats->write_s = SecondsSince(t0);
    auto t1 = std::chrono::steady_clock::now();
    if (expected_bytes > m.file_bytes) {
      // More chunks were unchanged than expected: give back the space reserved for them.
      PREEMPT_RETURN_IF_ERROR(queue->drain(Deadline::Never()));
      PREEMPT_RETURN_IF_ERROR(file->truncate(m.file_bytes));
    }
    PREEMPT_RETURN_IF_ERROR(queue->sync(Deadline::Never()));
    stats->sync_s = SecondsSince(t1);
  }
  PREEMPT_RETURN_IF_ERROR(file->close());

  // The manifest is written only once the data it describes is durable.
  auto t2 = std::chrono::steady_clock::now();
  PREEMPT_RETURN_IF_ERROR(WriteManifest(fs_, JoinPath(tmp_dir, format::RankManifestName(o_.rank)), m, manifest_xxh3));
  stats->sync_s += SecondsSince(t2);
  return Status::OK();
}

}  // namespace preempt
