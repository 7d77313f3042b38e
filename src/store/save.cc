// Store saves: the background save thread, the writer lock, the crash-consistent commit,
// retirement of old steps and removal of what crashed writers left behind.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>

#include "preempt/log.h"
#include "store/checkpoint_check.h"
#include "store/store_impl.h"

namespace preempt {
namespace {

using format::CommitRecord;
using format::Manifest;
using format::StepDirKind;

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::once_flag g_direct_fallback_logged;

// Refused at submission: nothing of a request that cannot be stored faithfully reaches the disk.
Status ValidateRequest(const SaveRequest& req) {
  if (req.step < 0) {
    return Status(StatusCode::kInvalidArgument, "SaveRequest.step is " + std::to_string(req.step) + "; steps are >= 0");
  }
  for (const auto& [key, value] : req.metadata) {
    if (key.find('\0') != std::string::npos || value.find('\0') != std::string::npos) {
      return Status(StatusCode::kInvalidArgument, "SaveRequest.metadata entry '" + std::string(key.c_str()).substr(0, 80) +
                                                      "' contains a NUL byte (keys and values are text)");
    }
  }
  return Status::OK();
}

std::string LockOwner() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  return "pid " + std::to_string(getpid()) + " on host " + host + " (since unix " + std::to_string(time(nullptr)) + ")";
}

}  // namespace

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

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// =============================================================================================
// SaveJob
// =============================================================================================
Status SaveJob::wait(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (deadline.is_never()) {
    cv_.wait(lock, [&] { return done_.load(); });
  } else if (!cv_.wait_until(lock, deadline.time(), [&] { return done_.load(); })) {
    return Status(StatusCode::kDeadlineExceeded,
                  "checkpoint step " + std::to_string(req_.step) + " not committed before the deadline (" +
                      std::to_string(written_.load()) + " of " + std::to_string(total_) + " bytes written" +
                      (durable() ? ", this rank's part durable" : "") + ")");
  }
  return error_;
}

void SaveJob::finish(Status s, SaveStats stats, std::string path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(s);
    stats_ = std::move(stats);
    path_ = std::move(path);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

// =============================================================================================
// Save thread
// =============================================================================================
Store::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<SaveHandle> Store::Impl::enqueue(SaveRequest req) {
  auto job = std::make_shared<SaveJob>(std::move(req));
  Status invalid = ValidateRequest(job->req_);
  if (!invalid.ok()) {
    job->finish(invalid, SaveStats{}, "");
    return job;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
  return job;
}

void Store::Impl::run() {
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

Status Store::Impl::ensure_engine() {
  if (engine_) return Status::OK();
  io::EngineOptions eo;
  eo.depth = o_.queue_depth;
  eo.slot_bytes = o_.chunk_bytes;
  eo.backend = o_.io_backend;
  return io::IoEngine::Create(eo, &engine_);
}

void Store::Impl::execute(SaveJob* job) {
  const auto started_at = std::chrono::steady_clock::now();
  SaveStats stats;
  stats.queued_s = std::chrono::duration<double>(started_at - job->submitted_at_).count();
  stats.bytes = job->total_;
  const int64_t step = job->req_.step;
  const std::string tmp_dir = JoinPath(o_.root, format::StepDirName(step, StepDirKind::kPartial));
  const std::string final_dir = JoinPath(o_.root, format::StepDirName(step));

  uint64_t manifest_xxh3 = 0;
  Manifest written;
  Status s = prepare(job, tmp_dir);
  if (s.ok()) s = write_rank_files(job, tmp_dir, &stats, &manifest_xxh3, &written);
  if (s.ok()) {
    job->mark_durable();
    s = commit(job, tmp_dir, final_dir, manifest_xxh3, &stats);
  }
  if (s.ok()) {
    base_cache_.step = step;
    base_cache_.manifest_xxh3 = manifest_xxh3;
    base_cache_.manifest = std::move(written);
  }
  stats.total_s = SecondsSince(job->submitted_at_);
  if (!s.ok()) {
    // Leave nothing that could be mistaken for a checkpoint; free the space (ENOSPC) now. Only a
    // lock holder touches the step directory, and rank 0 — which alone commits — abandons the
    // step for every rank, so the others stop waiting for a COMMIT that will not come.
    // A rank other than 0 whose part is durable keeps its files: rank 0 may be committing them
    // right now (it decides alone), and a step it gives up is removed by rank 0.
    if (writer_lock_ && (o_.rank == 0 || !job->durable())) {
      (void)fs_->remove_file(JoinPath(tmp_dir, format::RankDataName(o_.rank)));
      (void)fs_->remove_file(JoinPath(tmp_dir, format::RankManifestName(o_.rank)));
      if (o_.rank == 0) (void)fs_->remove_tree(tmp_dir);
    }
    PREEMPT_LOG_ERROR("checkpoint step %lld failed after %.3f s: %s", static_cast<long long>(step), stats.total_s,
                      s.to_string().c_str());
  } else {
    PREEMPT_LOG_INFO("checkpoint step %lld rank %d committed: %.1f MiB (%.1f MiB written, %.1f MiB unchanged and referenced) "
                     "in %.3f s (write %.3f, sync %.3f, commit %.3f; %s)",
                     static_cast<long long>(step), o_.rank, stats.bytes / 1048576.0, stats.written_bytes / 1048576.0,
                     stats.referenced_bytes / 1048576.0, stats.total_s, stats.write_s, stats.sync_s, stats.commit_s,
                     stats.backend.c_str());
  }
  job->finish(s, stats, final_dir);
}

Status Store::Impl::prepare(SaveJob* job, const std::string& tmp_dir) {
  if (!fs_->is_dir(o_.root)) {
    // A new root must itself survive a power loss, or every checkpoint in it would vanish.
    PREEMPT_RETURN_IF_ERROR(fs_->mkdirs(o_.root));
    PREEMPT_RETURN_IF_ERROR(fs_->sync_dir(DirName(o_.root)));
  }
  PREEMPT_RETURN_IF_ERROR(acquire_writer_lock());
  if (o_.rank == 0) PREEMPT_RETURN_IF_ERROR(remove_leftovers(job->req_.step));
  PREEMPT_RETURN_IF_ERROR(check_step_order(*job));
  return fs_->mkdir(tmp_dir);
}

Status Store::Impl::acquire_writer_lock() {
  if (writer_lock_) return Status::OK();
  char name[32];
  snprintf(name, sizeof(name), ".lock.rank-%05d", o_.rank);
  Status s = fs_->lock_exclusive(JoinPath(o_.root, name), LockOwner(), &writer_lock_);
  if (s.code() == StatusCode::kUnavailable) {
    return Status(s.code(), "checkpoint root " + o_.root + " is being written by another process as rank " +
                                std::to_string(o_.rank) + " (" + s.message() + "); refusing to save into it");
  }
  return s;
}

// Only rank 0 runs this, holding its writer lock: the job's other ranks write only the current
// step (they wait for each COMMIT before their next save), so anything else is a leftover.
Status Store::Impl::remove_leftovers(int64_t current_step) {
  std::vector<std::string> names;
  PREEMPT_RETURN_IF_ERROR(fs_->list_dir(o_.root, &names));
  const std::string latest_tmp = std::string(format::kLatestName) + ".tmp.";
  for (const auto& name : names) {
    const std::string path = JoinPath(o_.root, name);
    int64_t step;
    StepDirKind kind;
    if (name.rfind(latest_tmp, 0) == 0) {
      PREEMPT_LOG_INFO("removing %s (left by an interrupted LATEST update)", path.c_str());
      PREEMPT_RETURN_IF_ERROR(fs_->remove_file(path));
      continue;
    }
    if (!format::ParseStepDirName(name, &step, &kind)) continue;
    if (kind == StepDirKind::kPartial && step == current_step) continue;
    if (kind == StepDirKind::kReplaced) {
      // A re-save died between moving the old copy aside and renaming the new one in: the old
      // copy is the committed one; put it back (the new one is still a .tmp, removed below).
      const std::string committed = JoinPath(o_.root, format::StepDirName(step));
      if (!fs_->exists(committed)) {
        PREEMPT_LOG_WARN("restoring %s from %s (a re-save of it was interrupted)", committed.c_str(), path.c_str());
        PREEMPT_RETURN_IF_ERROR(fs_->rename(path, committed));
        PREEMPT_RETURN_IF_ERROR(fs_->sync_dir(o_.root));
        continue;
      }
    }
    if (kind == StepDirKind::kCommitted) continue;
    PREEMPT_LOG_INFO("removing stale %s", path.c_str());
    PREEMPT_RETURN_IF_ERROR(fs_->remove_tree(path));
  }
  return Status::OK();
}

Status Store::Impl::check_step_order(const SaveJob& job) {
  if (job.req_.rewind) return Status::OK();
  std::vector<int64_t> steps;
  PREEMPT_RETURN_IF_ERROR(committed_steps(&steps));
  for (int64_t newer : steps) {
    if (newer <= job.req_.step) break;
    const std::string dir = JoinPath(o_.root, format::StepDirName(newer));
    CommitRecord c;
    Manifest m;
    if (!store_internal::CheckCheckpoint(fs_, dir, newer, o_.rank, o_.world_size, &c, &m, nullptr).ok()) continue;
    return Status(StatusCode::kInvalidArgument,
                  "checkpoint step " + std::to_string(job.req_.step) + " is below step " + std::to_string(newer) +
                      ", the newest valid checkpoint in " + o_.root +
                      ": steps only move forward (set SaveRequest::rewind to retire the newer checkpoints first)");
  }
  return Status::OK();
}

Status Store::Impl::wait_for_manifests(SaveJob* job, const std::string& tmp_dir, Deadline deadline) {
  for (;;) {
    if (job->cancelled_.load()) {
      return Status(StatusCode::kAborted, "checkpoint step " + std::to_string(job->req_.step) +
                                              " cancelled while waiting for the other ranks' manifests");
    }
    // A manifest counts once it parses: its file exists from the moment its rank creates it, and
    // its envelope (length + checksum) tells a complete one from one still being written.
    bool all = true;
    for (int r = 0; r < o_.world_size && all; ++r) {
      const std::string mp = JoinPath(tmp_dir, format::RankManifestName(r));
      std::string text;
      Manifest m;
      all = fs_->exists(mp) && fs_->read_file(mp, format::kMaxManifestBytes, &text).ok() &&
            format::DecodeManifest(text, mp, UINT64_MAX, &m).ok();
    }
    if (all) return Status::OK();
    if (deadline.expired()) {
      return Status(StatusCode::kDeadlineExceeded, "not every rank's complete manifest appeared in " + tmp_dir + " before the deadline");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Status Store::Impl::commit(SaveJob* job, const std::string& tmp_dir, const std::string& final_dir, uint64_t manifest_xxh3,
                           SaveStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  const Deadline deadline = Deadline::InSeconds(o_.commit_timeout_s);
  if (o_.rank == 0 && o_.world_size > 1) PREEMPT_RETURN_IF_ERROR(wait_for_manifests(job, tmp_dir, deadline));
  if (o_.rank == 0) {
    PREEMPT_RETURN_IF_ERROR(write_commit(job, tmp_dir, final_dir));
  } else {
    PREEMPT_RETURN_IF_ERROR(wait_for_commit(job, tmp_dir, final_dir, manifest_xxh3, deadline));
  }
  stats->commit_s = SecondsSince(t0);
  return Status::OK();
}

// Ranks other than 0: the save is committed once the step directory holds a COMMIT of this step
// that records this rank's manifest checksum. Rank 0 removing step-N.tmp without committing
// means it gave the step up.
Status Store::Impl::wait_for_commit(SaveJob* job, const std::string& tmp_dir, const std::string& final_dir,
                                    uint64_t manifest_xxh3, Deadline deadline) {
  const int64_t step = job->req_.step;
  for (;;) {
    if (job->cancelled_.load()) {
      return Status(StatusCode::kAborted, "checkpoint step " + std::to_string(step) + " cancelled while waiting for rank 0's COMMIT");
    }
    const bool partial_there = fs_->is_dir(tmp_dir);  // looked at before the final directory: no gap
    CommitRecord c;
    if (store_internal::CheckCommit(fs_, final_dir, step, o_.world_size, &c).ok() &&
        c.manifest_xxh3[o_.rank] == manifest_xxh3) {
      // Rank 0 may not have synced the rename yet; any process can make it durable.
      return fs_->sync_dir(o_.root);
    }
    if (!partial_there) {
      return Status(StatusCode::kAborted, "checkpoint step " + std::to_string(step) + ": rank 0 gave the step up (" +
                                              tmp_dir + " removed without a COMMIT); see rank 0's log");
    }
    if (deadline.expired()) {
      return Status(StatusCode::kDeadlineExceeded, "checkpoint step " + std::to_string(step) +
                                                       ": rank 0 wrote no COMMIT before the deadline (" + tmp_dir + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Status Store::Impl::write_commit(SaveJob* job, const std::string& tmp_dir, const std::string& final_dir) {
  const int64_t step = job->req_.step;
  if (job->cancelled_.load()) return Status(StatusCode::kAborted, "checkpoint step " + std::to_string(step) + " cancelled");
  if (job->req_.rewind) {
    // Before COMMIT: a crash in between leaves an older step, never the abandoned branch.
    std::vector<int64_t> steps;
    PREEMPT_RETURN_IF_ERROR(committed_steps(&steps));
    for (int64_t newer : steps) {
      if (newer > step) PREEMPT_RETURN_IF_ERROR(retire(newer, "rewind"));
    }
  }
  CommitRecord c;
  c.step = step;
  c.world_size = o_.world_size;
  c.created_unix_ms = UnixMillis();
  PREEMPT_RETURN_IF_ERROR(check_references_for_commit(tmp_dir, step, &c));
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
    // Saving a step that already exists (e.g. re-saved after a resume): replace it. A crash
    // between the two renames is repaired by the next save (remove_leftovers).
    const std::string replaced = JoinPath(o_.root, format::StepDirName(step, StepDirKind::kReplaced));
    PREEMPT_RETURN_IF_ERROR(fs_->remove_tree(replaced));
    PREEMPT_RETURN_IF_ERROR(fs_->rename(final_dir, replaced));
    PREEMPT_RETURN_IF_ERROR(fs_->rename(tmp_dir, final_dir));
    PREEMPT_RETURN_IF_ERROR(fs_->sync_dir(o_.root));
    (void)fs_->remove_tree(replaced);
  } else {
    PREEMPT_RETURN_IF_ERROR(fs_->rename(tmp_dir, final_dir));
    PREEMPT_RETURN_IF_ERROR(fs_->sync_dir(o_.root));
  }
  Status latest = fs_->write_file_atomic(JoinPath(o_.root, format::kLatestName), format::StepDirName(step) + "\n");
  if (!latest.ok()) PREEMPT_LOG_WARN("could not update LATEST (restore does not need it): %s", latest.to_string().c_str());
  Status ret = apply_retention(step);
  if (!ret.ok()) PREEMPT_LOG_WARN("retention: %s", ret.to_string().c_str());
  return Status::OK();
}

// Takes a step out of the committed namespace in one rename (made durable) before deleting it,
// so no reader and no crash ever sees a half-deleted checkpoint.
Status Store::Impl::retire(int64_t step, const char* why) {
  const std::string dir = JoinPath(o_.root, format::StepDirName(step));
  const std::string retired = JoinPath(o_.root, format::StepDirName(step, StepDirKind::kRetired));
  PREEMPT_LOG_INFO("%s: retiring %s", why, dir.c_str());
  PREEMPT_RETURN_IF_ERROR(fs_->remove_tree(retired));
  PREEMPT_RETURN_IF_ERROR(fs_->rename(dir, retired));
  PREEMPT_RETURN_IF_ERROR(fs_->sync_dir(o_.root));
  return fs_->remove_tree(retired);
}

Status Store::Impl::apply_retention(int64_t newest) {
  std::vector<int64_t> steps;
  PREEMPT_RETURN_IF_ERROR(plan_retention(newest, &steps));
  for (int64_t step : steps) {
    PREEMPT_RETURN_IF_ERROR(retire(step, ("retention (keep_last=" + std::to_string(o_.keep_last) + ")").c_str()));
  }
  return Status::OK();
}

}  // namespace preempt
