#include "preempt/store.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>

#include <xxhash.h>

#include "format/format.h"
#include "io/io_engine.h"
#include "preempt/log.h"

namespace preempt {
namespace {

using format::Manifest;
using format::CommitRecord;

// Piece of a chunk copied then hashed while still in cache.
constexpr uint64_t kHashPiece = 256 << 10;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::once_flag g_direct_fallback_logged;

// Opens `path` honouring the DirectIo policy; *direct tells which mode was obtained.
Status OpenData(FileSystem* fs, const std::string& path, bool write, DirectIo mode, std::unique_ptr<File>* out, bool* direct) {
  OpenOptions o;
  o.write = write;
  o.create = write;
  if (mode != DirectIo::kOff) {
    o.direct = true;
    Status s = fs->open(path, o, out);
    if (s.ok()) {
      *direct = true;
      return s;
    }
    if (mode == DirectIo::kOn || s.sys_errno() != EINVAL) return s;
    std::call_once(g_direct_fallback_logged, [&] {
      PREEMPT_LOG_WARN("O_DIRECT refused on %s (EINVAL); using buffered I/O + fdatasync", path.c_str());
    });
  }
  o.direct = false;
  *direct = false;
  return fs->open(path, o, out);
}

// Committed (non-.tmp) step directories under root, newest first.
Status ListStepDirs(FileSystem* fs, const std::string& root, std::vector<std::pair<int64_t, bool>>* out) {
  out->clear();
  std::vector<std::string> names;
  if (!fs->is_dir(root)) return Status::OK();
  PREEMPT_RETURN_IF_ERROR(fs->list_dir(root, &names));
  for (const auto& n : names) {
    int64_t step;
    bool tmp;
    if (format::ParseStepDirName(n, &step, &tmp)) out->emplace_back(step, tmp);
  }
  std::sort(out->begin(), out->end(), [](auto& a, auto& b) { return a.first > b.first; });
  return Status::OK();
}

}  // namespace

// =============================================================================================
// Save handle
// =============================================================================================
class SaveJob final : public SaveHandle {
 public:
  explicit SaveJob(SaveRequest req) : req_(std::move(req)), submitted_(std::chrono::steady_clock::now()) {
    for (const auto& it : req_.items) total_ += it.nbytes;
  }
  int64_t step() const override { return req_.step; }
  bool done() const override { return done_.load(std::memory_order_acquire); }
  Status wait(Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (deadline.is_never()) {
      cv_.wait(lock, [&] { return done_.load(); });
    } else if (!cv_.wait_until(lock, deadline.time(), [&] { return done_.load(); })) {
      return Status(StatusCode::kDeadlineExceeded,
                    "checkpoint step " + std::to_string(req_.step) + " not committed before the deadline (" +
                        std::to_string(written_.load()) + " of " + std::to_string(total_) + " bytes written)");
    }
    return error_;
  }
  Status status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  uint64_t bytes_total() const override { return total_; }
  uint64_t bytes_written() const override { return written_.load(std::memory_order_relaxed); }
  void cancel() override { cancelled_.store(true); }
  SaveStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  std::string path() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return path_;
  }

  void finish(Status s, SaveStats stats, std::string path) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::move(s);
      stats_ = std::move(stats);
      path_ = std::move(path);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

  SaveRequest req_;
  std::chrono::steady_clock::time_point submitted_;
  uint64_t total_ = 0;
  std::atomic<uint64_t> written_{0};
  std::atomic<bool> cancelled_{false};

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  Status error_;
  SaveStats stats_;
  std::string path_;
};

// =============================================================================================
// Store implementation
// =============================================================================================
class Store::Impl {
 public:
  explicit Impl(const StoreOptions& o) : o_(o), fs_(o.fs ? o.fs : FileSystem::Default()) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  std::shared_ptr<SaveHandle> enqueue(SaveRequest req) {
    auto job = std::make_shared<SaveJob>(std::move(req));
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(job);
      if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
    }
    cv_.notify_all();
    return job;
  }

  Status cleanup_tmp(int64_t below_step) {
    std::vector<std::pair<int64_t, bool>> dirs;
    PREEMPT_RETURN_IF_ERROR(ListStepDirs(fs_, o_.root, &dirs));
    for (auto& [step, tmp] : dirs) {
      if (!tmp || step >= below_step) continue;
      std::string p = JoinPath(o_.root, StepDirName(step) + ".tmp");
      PREEMPT_LOG_INFO("removing stale partial checkpoint %s", p.c_str());
      PREEMPT_RETURN_IF_ERROR(fs_->remove_tree(p));
    }
    return Status::OK();
  }

  Status restore(const std::vector<RestoreTarget>& targets, const RestoreOptions& opts, RestoreResult* out);
  Status list(std::vector<CheckpointInfo>* out);
  Status check_checkpoint(const std::string& dir, int64_t step, Manifest* m, CommitRecord* c, uint64_t* data_size);

  const StoreOptions o_;
  FileSystem* const fs_;

 private:
  void run() {
    for (;;) {
      std::shared_ptr<SaveJob> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = queue_.front();
        queue_.pop_front();
      }
      execute(job.get());
    }
  }

  Status ensure_engine() {
    if (engine_) return Status::OK();
    io::EngineOptions eo;
    eo.depth = o_.queue_depth;
    eo.slot_bytes = o_.chunk_bytes;
    eo.backend = o_.io_backend;
    return io::IoEngine::Create(eo, &engine_);
  }

  void execute(SaveJob* job);
  Status write_rank_files(SaveJob* job, const std::string& tmp_dir, SaveStats* stats);
  Status commit(SaveJob* job, const std::string& tmp_dir, const std::string& final_dir, SaveStats* stats);
  Status wait_for_manifests(SaveJob* job, const std::string& tmp_dir, Deadline deadline);
  Status apply_retention(int64_t newest);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<SaveJob>> queue_;
  bool stop_ = false;
  std::thread worker_;
  std::unique_ptr<io::IoEngine> engine_;  // owned by the worker thread
  struct HashStateFree {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, HashStateFree> hash_state_{XXH3_createState()};

 public:
  // Restores reuse one engine (staging is allocated and pre-faulted once); a restore that finds
  // it busy (concurrent restores) makes its own.
  std::mutex restore_engine_mu_;
  std::unique_ptr<io::IoEngine> restore_engine_;
};

void Store::Impl::execute(SaveJob* job) {
  const auto t_start = std::chrono::steady_clock::now();
  SaveStats stats;
  stats.queued_s = std::chrono::duration<double>(t_start - job->submitted_).count();
  stats.bytes = job->total_;
  const int64_t step = job->req_.step;
  const std::string tmp_dir = JoinPath(o_.root, StepDirName(step) + ".tmp");
  const std::string final_dir = JoinPath(o_.root, StepDirName(step));

  Status s;
  if (!fs_->is_dir(o_.root)) {
    // A new root must itself survive a power loss, or every checkpoint in it would vanish.
    s = fs_->mkdirs(o_.root);
    if (s.ok()) s = fs_->sync_dir(DirName(o_.root));
  }
  if (s.ok() && o_.rank == 0) s = cleanup_tmp(step);
  if (s.ok()) s = fs_->mkdir(tmp_dir);
  if (s.ok()) s = write_rank_files(job, tmp_dir, &stats);
  if (s.ok()) s = commit(job, tmp_dir, final_dir, &stats);
  stats.total_s = SecondsSince(job->submitted_);
  if (!s.ok()) {
    // Leave nothing that could be mistaken for a checkpoint; free the space (ENOSPC) now.
    (void)fs_->remove_file(JoinPath(tmp_dir, format::RankDataName(o_.rank)));
    (void)fs_->remove_file(JoinPath(tmp_dir, format::RankManifestName(o_.rank)));
    if (o_.world_size == 1) (void)fs_->remove_tree(tmp_dir);
    PREEMPT_LOG_ERROR("checkpoint step %lld failed after %.3f s: %s", static_cast<long long>(step), stats.total_s,
                      s.ToString().c_str());
  } else {
    PREEMPT_LOG_INFO("checkpoint step %lld rank %d committed: %.1f MiB in %.3f s (write %.3f, sync %.3f, commit %.3f; %s)",
                     static_cast<long long>(step), o_.rank, stats.bytes / 1048576.0, stats.total_s, stats.write_s,
                     stats.sync_s, stats.commit_s, stats.backend.c_str());
  }
  job->finish(s, stats, final_dir);
}

Status Store::Impl::write_rank_files(SaveJob* job, const std::string& tmp_dir, SaveStats* stats) {
  const auto& req = job->req_;
  Manifest m;
  m.step = req.step;
  m.rank = o_.rank;
  m.world_size = o_.world_size;
  m.created_unix_ms = UnixMillis();
  m.data_file = format::RankDataName(o_.rank);
  m.chunk_bytes = o_.chunk_bytes;
  m.metadata = req.metadata;
  PREEMPT_RETURN_IF_ERROR(format::LayoutItems(req.items, &m.tensors, &m.data_bytes));
  m.file_bytes = AlignUp(m.data_bytes, kIoAlignment);
  PREEMPT_RETURN_IF_ERROR(ensure_engine());

  const std::string data_path = JoinPath(tmp_dir, m.data_file);
  std::unique_ptr<File> file;
  bool direct = false;
  PREEMPT_RETURN_IF_ERROR(OpenData(fs_, data_path, true, o_.direct_io, &file, &direct));
  PREEMPT_RETURN_IF_ERROR(file->allocate(m.file_bytes));
  auto t0 = std::chrono::steady_clock::now();
  {
    auto queue = engine_->open_queue(file.get());
    stats->backend = std::string(queue->backend_name()) + (direct ? "+direct" : "+buffered");
    const uint64_t chunks = (m.data_bytes + m.chunk_bytes - 1) / m.chunk_bytes;
    m.chunk_xxh3.resize(chunks);
    size_t item = 0;  // first item that may overlap the current chunk
    for (uint64_t c = 0; c < chunks; ++c) {
      if (job->cancelled_.load(std::memory_order_relaxed)) {
        (void)queue->drain(Deadline::Never());
        return Status(StatusCode::kAborted, "checkpoint step " + std::to_string(req.step) + " cancelled");
      }
      io::Slot* slot = nullptr;
      PREEMPT_RETURN_IF_ERROR(queue->acquire(Deadline::Never(), &slot));
      const uint64_t begin = c * m.chunk_bytes;
      const uint64_t len = std::min<uint64_t>(m.chunk_bytes, m.data_bytes - begin);
      const uint64_t end = begin + len;
      // Gather the bytes of [begin, end) from the items (alignment gaps are zero) in cache-sized
      // pieces, hashing each piece right after copying it, while it is still in cache.
      while (item < m.tensors.size() && m.tensors[item].offset + m.tensors[item].nbytes <= begin) ++item;
      XXH3_state_t* hash = hash_state_.get();
      XXH3_64bits_reset(hash);
      uint64_t payload = 0;
      size_t i = item;
      for (uint64_t piece = begin; piece < end; piece += kHashPiece) {
        const uint64_t piece_end = std::min(end, piece + kHashPiece);
        uint64_t filled = piece;  // file offset filled so far
        for (; i < m.tensors.size() && m.tensors[i].offset < piece_end; ++i) {
          const TensorInfo& t = m.tensors[i];
          const uint64_t from = std::max(piece, t.offset);
          const uint64_t to = std::min(piece_end, t.offset + t.nbytes);
          if (to <= from) continue;
          if (from > filled) std::memset(slot->data + (filled - begin), 0, from - filled);
          std::memcpy(slot->data + (from - begin), static_cast<const uint8_t*>(req.items[i].data) + (from - t.offset), to - from);
          filled = to;
          payload += to - from;
          if (to < t.offset + t.nbytes) break;  // the tensor continues into the next piece
        }
        if (piece_end > filled) std::memset(slot->data + (filled - begin), 0, piece_end - filled);
        XXH3_64bits_update(hash, slot->data + (piece - begin), piece_end - piece);
      }
      const uint64_t padded = AlignUp(len, kIoAlignment);
      if (padded > len) std::memset(slot->data + len, 0, padded - len);
      m.chunk_xxh3[c] = XXH3_64bits_digest(hash);
      PREEMPT_RETURN_IF_ERROR(queue->submit_write(slot, padded, begin));
      job->written_.fetch_add(payload, std::memory_order_relaxed);
    }
    stats->write_s = SecondsSince(t0);
    auto t1 = std::chrono::steady_clock::now();
    PREEMPT_RETURN_IF_ERROR(queue->sync(Deadline::Never()));
    stats->sync_s = SecondsSince(t1);
  }
  PREEMPT_RETURN_IF_ERROR(file->close());

  // The manifest is written only once the data it describes is durable.
  auto t2 = std::chrono::steady_clock::now();
  const std::string text = format::EncodeManifest(m);
  std::unique_ptr<File> mf;
  OpenOptions mo;
  mo.write = mo.create = true;
  const std::string manifest_path = JoinPath(tmp_dir, format::RankManifestName(o_.rank));
  PREEMPT_RETURN_IF_ERROR(fs_->open(manifest_path, mo, &mf));
  PREEMPT_RETURN_IF_ERROR(mf->write_at(text.data(), text.size(), 0));
  PREEMPT_RETURN_IF_ERROR(mf->sync());
  PREEMPT_RETURN_IF_ERROR(mf->close());
  stats->sync_s += SecondsSince(t2);
  return Status::OK();
}

Status Store::Impl::wait_for_manifests(SaveJob* job, const std::string& tmp_dir, Deadline deadline) {
  for (;;) {
    if (job->cancelled_.load()) {
      return Status(StatusCode::kAborted, "checkpoint step " + std::to_string(job->req_.step) +
                                              " cancelled while waiting for the other ranks' manifests");
    }
    bool all = true;
    for (int r = 0; r < o_.world_size && all; ++r) all = fs_->exists(JoinPath(tmp_dir, format::RankManifestName(r)));
    if (all) return Status::OK();
    if (deadline.expired()) {
      return Status(StatusCode::kDeadlineExceeded, "not every rank's manifest appeared in " + tmp_dir + " before the deadline");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Status Store::Impl::commit(SaveJob* job, const std::string& tmp_dir, const std::string& final_dir, SaveStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  const Deadline deadline = Deadline::InSeconds(o_.commit_timeout_s);
  if (o_.commit_barrier) {
    PREEMPT_RETURN_IF_ERROR(o_.commit_barrier(deadline).WithContext("commit barrier (manifests durable)"));
  } else if (o_.rank == 0 && o_.world_size > 1) {
    PREEMPT_RETURN_IF_ERROR(wait_for_manifests(job, tmp_dir, deadline));
  }
  if (o_.rank == 0) {
    if (job->cancelled_.load()) return Status(StatusCode::kAborted, "checkpoint step " + std::to_string(job->req_.step) + " cancelled");
    CommitRecord c;
    c.step = job->req_.step;
    c.world_size = o_.world_size;
    c.created_unix_ms = UnixMillis();
    for (int r = 0; r < o_.world_size; ++r) {
      std::string text;
      const std::string mp = JoinPath(tmp_dir, format::RankManifestName(r));
      PREEMPT_RETURN_IF_ERROR(fs_->read_file(mp, format::kMaxManifestBytes, &text));
      c.manifest_xxh3.push_back(format::Hash64(text.data(), text.size()));
    }
    const std::string commit_text = format::EncodeCommit(c);
    std::unique_ptr<File> f;
    OpenOptions o;
    o.write = o.create = true;
    const std::string commit_path = JoinPath(tmp_dir, format::kCommitName);
    PREEMPT_RETURN_IF_ERROR(fs_->open(commit_path, o, &f));
    PREEMPT_RETURN_IF_ERROR(f->write_at(commit_text.data(), commit_text.size(), 0));
    PREEMPT_RETURN_IF_ERROR(f->sync());
    PREEMPT_RETURN_IF_ERROR(f->close());
    PREEMPT_RETURN_IF_ERROR(fs_->sync_dir(tmp_dir));
    if (fs_->exists(final_dir)) {
      // Saving a step that already exists (e.g. re-saved after a resume): replace it.
      const std::string replaced = final_dir + ".replaced.tmp";
      PREEMPT_RETURN_IF_ERROR(fs_->remove_tree(replaced));
      PREEMPT_RETURN_IF_ERROR(fs_->rename(final_dir, replaced));
      PREEMPT_RETURN_IF_ERROR(fs_->rename(tmp_dir, final_dir));
      PREEMPT_RETURN_IF_ERROR(fs_->sync_dir(o_.root));
      (void)fs_->remove_tree(replaced);
    } else {
      PREEMPT_RETURN_IF_ERROR(fs_->rename(tmp_dir, final_dir));
      PREEMPT_RETURN_IF_ERROR(fs_->sync_dir(o_.root));
    }
    Status latest = fs_->write_file_atomic(JoinPath(o_.root, format::kLatestName), StepDirName(job->req_.step) + "\n");
    if (!latest.ok()) PREEMPT_LOG_WARN("could not update LATEST (restore does not need it): %s", latest.ToString().c_str());
    Status ret = apply_retention(job->req_.step);
    if (!ret.ok()) PREEMPT_LOG_WARN("retention: %s", ret.ToString().c_str());
  }
  if (o_.commit_barrier) {
    PREEMPT_RETURN_IF_ERROR(o_.commit_barrier(deadline).WithContext("commit barrier (COMMIT durable)"));
  }
  stats->commit_s = SecondsSince(t0);
  return Status::OK();
}

Status Store::Impl::apply_retention(int64_t newest) {
  std::vector<std::pair<int64_t, bool>> dirs;
  PREEMPT_RETURN_IF_ERROR(ListStepDirs(fs_, o_.root, &dirs));
  int kept = 0;
  const int keep = std::max(1, o_.keep_last);
  for (auto& [step, tmp] : dirs) {
    if (tmp) continue;
    if (step == newest || kept < keep) {
      ++kept;
      continue;
    }
    if (step > newest) continue;  // never delete a newer checkpoint than the one just written
    std::string p = JoinPath(o_.root, StepDirName(step));
    PREEMPT_LOG_INFO("retention: removing %s (keep_last=%d)", p.c_str(), keep);
    // Make it invalid first (COMMIT gone) so a crash mid-removal leaves nothing restorable-looking.
    PREEMPT_RETURN_IF_ERROR(fs_->remove_file(JoinPath(p, format::kCommitName)));
    PREEMPT_RETURN_IF_ERROR(fs_->remove_tree(p));
  }
  return Status::OK();
}

// Reads and validates COMMIT + this rank's manifest of a committed directory.
Status Store::Impl::check_checkpoint(const std::string& dir, int64_t step, Manifest* m, CommitRecord* c, uint64_t* data_size) {
  const std::string commit_path = JoinPath(dir, format::kCommitName);
  if (!fs_->exists(commit_path)) return Status(StatusCode::kCorruption, commit_path + ": COMMIT missing");
  std::string text;
  PREEMPT_RETURN_IF_ERROR(fs_->read_file(commit_path, format::kMaxCommitBytes, &text));
  PREEMPT_RETURN_IF_ERROR(format::DecodeCommit(text, commit_path, c));
  if (c->step != step) {
    return Status(StatusCode::kCorruption, commit_path + ": field step is " + std::to_string(c->step) + " in directory of step " + std::to_string(step));
  }
  if (c->world_size != o_.world_size) {
    return Status(StatusCode::kMismatch, commit_path + ": checkpoint was written by " + std::to_string(c->world_size) +
                                             " ranks; this job has world_size " + std::to_string(o_.world_size));
  }
  const std::string mp = JoinPath(dir, format::RankManifestName(o_.rank));
  PREEMPT_RETURN_IF_ERROR(fs_->read_file(mp, format::kMaxManifestBytes, &text));
  const std::string dp = JoinPath(dir, format::RankDataName(o_.rank));
  Status st = fs_->file_size(dp, data_size);
  if (!st.ok()) return Status(StatusCode::kCorruption, st.message());
  // Decoding first reports the most specific problem (version, field) before the COMMIT cross-check.
  PREEMPT_RETURN_IF_ERROR(format::DecodeManifest(text, mp, *data_size, m));
  if (format::Hash64(text.data(), text.size()) != c->manifest_xxh3[o_.rank]) {
    return Status(StatusCode::kCorruption, mp + ": checksum differs from the one recorded in COMMIT");
  }
  if (m->step != step || m->rank != o_.rank || m->world_size != o_.world_size) {
    return Status(StatusCode::kCorruption, mp + ": fields step/rank/world_size disagree with the directory");
  }
  return Status::OK();
}

Status Store::Impl::list(std::vector<CheckpointInfo>* out) {
  out->clear();
  std::vector<std::pair<int64_t, bool>> dirs;
  PREEMPT_RETURN_IF_ERROR(ListStepDirs(fs_, o_.root, &dirs));
  for (auto& [step, tmp] : dirs) {
    if (tmp) continue;
    CheckpointInfo info;
    info.step = step;
    info.path = JoinPath(o_.root, StepDirName(step));
    Manifest m;
    CommitRecord c;
    uint64_t size = 0;
    Status s = check_checkpoint(info.path, step, &m, &c, &size);
    info.valid = s.ok();
    info.world_size = s.ok() ? c.world_size : 0;
    info.bytes = s.ok() ? m.data_bytes : 0;
    if (!s.ok()) info.problem = s.message();
    out->push_back(std::move(info));
  }
  return Status::OK();
}

namespace {

// Where each checkpoint entry goes while reading: a caller target or an owned buffer.
struct Destination {
  const TensorInfo* info;
  uint8_t* data;
};

}  // namespace

Status Store::Impl::restore(const std::vector<RestoreTarget>& targets, const RestoreOptions& opts, RestoreResult* out) {
  std::vector<std::pair<int64_t, bool>> dirs;
  PREEMPT_RETURN_IF_ERROR(ListStepDirs(fs_, o_.root, &dirs));
  std::vector<int64_t> candidates;
  for (auto& [step, tmp] : dirs) {
    if (tmp) continue;
    if (opts.step && *opts.step != step) continue;
    candidates.push_back(step);
  }
  if (candidates.empty()) {
    return Status(StatusCode::kNotFound, opts.step ? "no committed checkpoint for step " + std::to_string(*opts.step) + " in " + o_.root
                                                   : "no committed checkpoint in " + o_.root);
  }
  std::vector<std::string> rejected;
  for (int64_t step : candidates) {
    const std::string dir = JoinPath(o_.root, StepDirName(step));
    auto t0 = std::chrono::steady_clock::now();
    RestoreResult r;
    Manifest m;
    CommitRecord c;
    uint64_t data_size = 0;
    Status s = check_checkpoint(dir, step, &m, &c, &data_size);
    if (s.ok()) {
      // Match entries to targets.
      std::map<std::string, const RestoreTarget*> by_name;
      for (const auto& t : targets) by_name[t.name] = &t;
      std::vector<Destination> dest;
      std::vector<std::string> untargeted;
      for (const auto& t : m.tensors) {
        auto it = by_name.find(t.name);
        if (it == by_name.end()) {
          untargeted.push_back(t.name);
          continue;
        }
        const RestoreTarget& tg = *it->second;
        by_name.erase(it);
        if (tg.owned) {
          auto& buf = r.owned[t.name];
          buf = AlignedBuffer(t.nbytes, /*prefault=*/false);
          dest.push_back({&t, buf.data()});
          continue;
        }
        if (tg.nbytes != t.nbytes || tg.dtype != t.dtype || (tg.check_shape && tg.shape != t.shape)) {
          auto desc = [](DType d, const std::vector<int64_t>& sh, uint64_t n) {
            std::string s = std::string(DTypeName(d)) + "[";
            for (size_t i = 0; i < sh.size(); ++i) s += (i ? "," : "") + std::to_string(sh[i]);
            return s + "] (" + std::to_string(n) + " bytes)";
          };
          return Status(StatusCode::kMismatch, dir + ": tensor " + t.name + ": checkpoint has " +
                                                   desc(t.dtype, t.shape, t.nbytes) + ", target is " +
                                                   desc(tg.dtype, tg.shape, tg.nbytes));
        }
        if (t.nbytes > 0 && tg.data == nullptr) return Status(StatusCode::kInvalidArgument, "restore target " + t.name + " has no data pointer");
        dest.push_back({&t, static_cast<uint8_t*>(tg.data)});
      }
      std::vector<std::string> missing;
      for (auto& [name, tg] : by_name)
        if (!tg->optional) missing.push_back(name);
      if (opts.strict && (!untargeted.empty() || !missing.empty())) {
        std::string msg = dir + ": strict restore: ";
        auto join = [](const std::vector<std::string>& v) {
          std::string s;
          for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
          if (v.size() > 8) s += " and " + std::to_string(v.size() - 8) + " more";
          return s;
        };
        if (!missing.empty()) msg += "missing in checkpoint: " + join(missing);
        if (!untargeted.empty()) msg += std::string(missing.empty() ? "" : "; ") + "unexpected in checkpoint: " + join(untargeted);
        return Status(StatusCode::kMismatch, msg);
      }
      if (opts.allocate_untargeted) {
        for (const auto& name : untargeted) {
          for (const auto& t : m.tensors) {
            if (t.name != name) continue;
            auto& buf = r.owned[name];
            buf = AlignedBuffer(t.nbytes, /*prefault=*/false);
            dest.push_back({&t, buf.data()});
          }
        }
      }
      std::sort(dest.begin(), dest.end(), [](auto& a, auto& b) { return a.info->offset < b.info->offset; });
      r.missing = std::move(missing);
      r.unexpected = std::move(untargeted);

      // Read every chunk (checksums cover all of them), scatter the overlapping bytes.
      std::unique_lock<std::mutex> engine_lock(restore_engine_mu_, std::try_to_lock);
      std::unique_ptr<io::IoEngine> own_engine;
      std::unique_ptr<io::IoEngine>& engine = engine_lock.owns_lock() ? restore_engine_ : own_engine;
      if (!engine || engine->slot_bytes() != m.chunk_bytes) {
        io::EngineOptions eo;
        eo.depth = o_.queue_depth;
        eo.slot_bytes = m.chunk_bytes;
        eo.backend = o_.io_backend;
        engine.reset();
        s = io::IoEngine::Create(eo, &engine);
      }
      std::unique_ptr<File> file;
      bool direct = false;
      const std::string dp = JoinPath(dir, m.data_file);
      if (s.ok()) s = OpenData(fs_, dp, false, o_.direct_io, &file, &direct);
      if (s.ok()) {
        auto queue = engine->open_queue(file.get());
        r.backend = std::string(queue->backend_name()) + (direct ? "+direct" : "+buffered");
        std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> restore_hash(XXH3_createState(), &XXH3_freeState);
        queue->set_read_done([&](io::Slot* slot, size_t got) -> Status {
          const uint64_t c = slot->tag;
          const uint64_t begin = c * m.chunk_bytes;
          const uint64_t len = std::min<uint64_t>(m.chunk_bytes, m.data_bytes - begin);
          if (got < len) {
            return Status(StatusCode::kCorruption, dp + ": chunk " + std::to_string(c) + " truncated (tensors " +
                                                       format::TensorsInRange(m, begin, begin + len) + ")");
          }
          // Verify and scatter piece by piece while each piece is in cache. A mismatch is only
          // known at the end of the chunk: targets may then hold unverified bytes, which the
          // contract allows (a failed restore leaves targets unspecified; a fallback rewrites all).
          XXH3_state_t* hash = restore_hash.get();
          XXH3_64bits_reset(hash);
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
          if (XXH3_64bits_digest(hash) != m.chunk_xxh3[c]) {
            return Status(StatusCode::kCorruption, dp + ": chunk " + std::to_string(c) + " (bytes " + std::to_string(begin) +
                                                       ".." + std::to_string(begin + len) + ", tensors " +
                                                       format::TensorsInRange(m, begin, begin + len) + ") checksum mismatch");
          }
          return Status::OK();
        });
        const uint64_t chunks = m.chunk_xxh3.size();
        for (uint64_t ci = 0; ci < chunks && s.ok(); ++ci) {
          io::Slot* slot = nullptr;
          s = queue->acquire(Deadline::Never(), &slot);
          if (!s.ok()) break;
          slot->tag = ci;
          const uint64_t begin = ci * m.chunk_bytes;
          const uint64_t len = std::min<uint64_t>(m.chunk_bytes, m.data_bytes - begin);
          s = queue->submit_read(slot, AlignUp(len, kIoAlignment), begin);
        }
        Status d = queue->drain(Deadline::Never());
        if (s.ok()) s = d;
      }
      if (s.ok()) {
        r.step = step;
        r.path = dir;
        r.metadata = m.metadata;
        r.tensors = m.tensors;
        r.bytes = m.data_bytes;
        r.read_s = SecondsSince(t0);
        r.rejected = rejected;
        PREEMPT_LOG_INFO("restored step %lld rank %d: %.1f MiB in %.3f s (%s)%s", static_cast<long long>(step), o_.rank,
                         r.bytes / 1048576.0, r.read_s, r.backend.c_str(),
                         rejected.empty() ? "" : " after skipping newer invalid checkpoints");
        *out = std::move(r);
        return Status::OK();
      }
    }
    if (s.code() == StatusCode::kMismatch || s.code() == StatusCode::kInvalidArgument || !opts.fallback) return s;
    PREEMPT_LOG_WARN("checkpoint %s rejected: %s", dir.c_str(), s.message().c_str());
    rejected.push_back(s.message());
  }
  std::string msg = "no valid checkpoint in " + o_.root + ":";
  for (const auto& r : rejected) msg += " [" + r + "]";
  return Status(StatusCode::kCorruption, msg);
}

// =============================================================================================
// Public façade
// =============================================================================================
Store::Store(StoreOptions options) : options_(std::move(options)) {
  if (options_.root.empty()) throw Error(Status(StatusCode::kInvalidArgument, "StoreOptions.root is empty"));
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
    throw Error(Status(StatusCode::kInvalidArgument, "StoreOptions rank " + std::to_string(options_.rank) +
                                                         " is not in [0, world_size=" + std::to_string(options_.world_size) + ")"));
  }
  if (options_.chunk_bytes < format::kMinChunkBytes || options_.chunk_bytes > format::kMaxChunkBytes ||
      options_.chunk_bytes % format::kMinChunkBytes) {
    throw Error(Status(StatusCode::kInvalidArgument, "StoreOptions.chunk_bytes must be a multiple of 4096 in [4 KiB, 1 GiB]"));
  }
  if (options_.queue_depth < 1 || options_.queue_depth > 256) {
    throw Error(Status(StatusCode::kInvalidArgument, "StoreOptions.queue_depth must be in [1, 256]"));
  }
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
  out->clear();
  std::vector<CheckpointInfo> all;
  PREEMPT_RETURN_IF_ERROR(list(&all));
  for (const auto& c : all)
    if (c.valid) out->push_back(c.step);
  return Status::OK();
}

Status Store::cleanup_tmp() { return impl_->cleanup_tmp(std::numeric_limits<int64_t>::max()); }

}  // namespace preempt
