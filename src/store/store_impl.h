// store_impl — the private side of preempt::Store: the save job behind a SaveHandle and the
// Store's implementation (background save thread, writer lock, restore engine).
//
// Thread-safety: SaveJob is shared between the save thread and callers (mutex + atomics);
// Store::Impl's save methods run only on its save thread, restore/list on any thread.
#pragma once

#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "format/format.h"
#include "io/io_engine.h"
#include "preempt/store.h"

namespace preempt {

class SaveJob final : public SaveHandle {
 public:
  explicit SaveJob(SaveRequest req) : req_(std::move(req)), submitted_at_(std::chrono::steady_clock::now()) {
    for (const auto& it : req_.items) total_ += it.nbytes;
  }
  int64_t step() const override { return req_.step; }
  bool durable() const override { return durable_.load(std::memory_order_acquire); }
  bool done() const override { return done_.load(std::memory_order_acquire); }
  Status wait(Deadline deadline) override;
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

  void mark_durable() { durable_.store(true, std::memory_order_release); }
  void finish(Status s, SaveStats stats, std::string path);

  const SaveRequest req_;
  const std::chrono::steady_clock::time_point submitted_at_;
  uint64_t total_ = 0;
  std::atomic<uint64_t> written_{0};
  std::atomic<bool> cancelled_{false};

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> durable_{false};
  std::atomic<bool> done_{false};
  Status error_;
  SaveStats stats_;
  std::string path_;
};

class Store::Impl {
 public:
  explicit Impl(const StoreOptions& o) : o_(o), fs_(o.fs ? o.fs : FileSystem::Default()) {}
  ~Impl();

  std::shared_ptr<SaveHandle> enqueue(SaveRequest req);
  Status restore(const std::vector<RestoreTarget>& targets, const RestoreOptions& opts, RestoreResult* out);
  Status list(std::vector<CheckpointInfo>* out);

  const StoreOptions o_;
  FileSystem* const fs_;

 private:
  // ---- save thread (save.cc) ----
  void run();
  void execute(SaveJob* job);
  Status prepare(SaveJob* job, const std::string& tmp_dir);
  Status acquire_writer_lock();
  Status remove_leftovers(int64_t current_step);
  Status check_step_order(const SaveJob& job);
  Status ensure_engine();
  // Writes this rank's data file and manifest (save_data.cc); *written: the manifest.
  Status write_rank_files(SaveJob* job, const std::string& tmp_dir, SaveStats* stats, uint64_t* manifest_xxh3,
                          format::Manifest* written);
  // ---- deduplication (dedup.cc) ----
  // The manifest unchanged chunks of `step` may reference: this rank's manifest of the newest
  // committed step below `step`, when that checkpoint is valid (else, or with dedup off, null).
  Status find_dedup_base(int64_t step, const format::Manifest** base);
  // Rank 0, before COMMIT: every rank's manifest of `tmp_dir` references only committed steps
  // holding the referenced bytes; c->referenced_steps gets their union.
  Status check_references_for_commit(const std::string& tmp_dir, int64_t step, format::CommitRecord* c);
  // Committed steps that retention retires after `newest` committed, in the order to retire
  // them (newest first, so a checkpoint never outlives the data it references).
  Status plan_retention(int64_t newest, std::vector<int64_t>* retire_steps);
  Status commit(SaveJob* job, const std::string& tmp_dir, const std::string& final_dir, uint64_t manifest_xxh3,
                SaveStats* stats);
  Status write_commit(SaveJob* job, const std::string& tmp_dir, const std::string& final_dir);
  Status wait_for_manifests(SaveJob* job, const std::string& tmp_dir, Deadline deadline);
  Status wait_for_commit(SaveJob* job, const std::string& tmp_dir, const std::string& final_dir,
                         uint64_t manifest_xxh3, Deadline deadline);
  Status retire(int64_t step, const char* why);
  Status apply_retention(int64_t newest);
  // ---- restore (restore.cc) ----
  Status restore_step(int64_t step, const std::vector<RestoreTarget>& targets, const RestoreOptions& opts,
                      RestoreResult* r);
  // Committed step directories under root, newest first.
  Status committed_steps(std::vector<int64_t>* out);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<SaveJob>> queue_;
  bool stop_ = false;
  std::thread worker_;
  // Owned by the save thread.
  std::unique_ptr<FileLock> writer_lock_;
  std::unique_ptr<io::IoEngine> engine_;
  struct HashStateFree {
    void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
  };
  std::unique_ptr<XXH3_state_t, HashStateFree> hash_state_{XXH3_createState()};
  // This rank's manifest of the last dedup base read or step committed, reused while that step's
  // COMMIT records the same manifest checksum: the base is read and parsed at most once.
  struct BaseCache {
    int64_t step = -1;
    uint64_t manifest_xxh3 = 0;
    format::Manifest manifest;
  };
  BaseCache base_cache_;
  // Restores reuse one engine (staging is allocated and pre-faulted once); a restore that finds
  // it busy (concurrent restores) makes its own.
  std::mutex restore_engine_mu_;
  std::unique_ptr<io::IoEngine> restore_engine_;
};

// Opens `path` honouring the DirectIo policy; *direct tells which mode was obtained.
Status OpenData(FileSystem* fs, const std::string& path, bool write, DirectIo mode, std::unique_ptr<File>* out,
                bool* direct);
double SecondsSince(std::chrono::steady_clock::time_point t0);

}  // namespace preempt
