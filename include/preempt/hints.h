// preempt/hints.h — the contract between a training job (producer) and a scheduler (consumer).
//
// A job's rank 0 publishes one JSON file, schema "preempt.hints/1", replaced atomically (temp
// file, fsync, rename, fsync dir) at every checkpoint and state change. The scheduler reads it to
// learn what preempting the job would cost. See docs/hints.md for the field-by-field contract.
//
// The reverse direction is the checkpoint-request channel: the scheduler atomically writes
// `{"schema":"preempt.request/1","action":"checkpoint","id":N}` to a request file (default
// "<hints path>.request", or $PREEMPT_REQUEST_FILE); the job polls it cheaply with
// RequestChannel::poll(), checkpoints without stopping, and acknowledges by publishing
// `request_ack = N` in its hints after the resulting commit is durable.
//
// Thread-safety: the free functions are thread-safe (they share no state). CostTracker is
// internally synchronized. RequestChannel is not: one thread polls it (the training loop).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "preempt/status.h"

namespace preempt {

inline constexpr const char* kHintsSchema = "preempt.hints/1";
inline constexpr const char* kRequestSchema = "preempt.request/1";

enum class JobState { kTraining, kCheckpointing, kStopping, kStopped };
const char* JobStateName(JobState s);                          // "training", ...
bool ParseJobState(const std::string& name, JobState* out);    // false when unknown

struct Hints {
  std::string job;            // job name (free text, non-empty)
  double updated_unix = 0;    // wall-clock seconds when this file was written
  JobState state = JobState::kTraining;
  int64_t step = 0;           // last completed training step
  double step_time_s = 0;     // recent mean step time
  struct Commit {
    int64_t step = -1;        // -1: nothing committed yet
    double committed_at = 0;  // unix seconds when the commit became durable (JSON key "unix")
    std::string path;         // committed checkpoint directory
  } last_commit;
  struct Cost {               // recent p95s of one checkpoint
    uint64_t bytes = 0;
    double drain_s = 0;       // waiting for in-flight collectives
    double stall_s = 0;       // copy into staging (training blocked)
    double persist_s = 0;     // background write + fsync + commit
  } cost;
  struct Grace {
    double needed_s = 0;      // what this job needs between SIGTERM and a durable commit
    double granted_s = 0;     // what the environment grants (0 = unknown)
  } grace;
  double lost_work_s = 0;     // seconds of training since the last commit, as of updated_unix
  int gpus = 1;
  int64_t request_ack = 0;    // id of the last checkpoint request whose commit is durable (0 = none)

  // Seconds from a checkpoint request to a durable commit: drain + stall + persist.
  double checkpoint_s() const { return cost.drain_s + cost.stall_s + cost.persist_s; }
  // lost_work_s extrapolated to `now_unix` while the job is training.
  double lost_work_at(double now_unix) const;
};

// Wall-clock seconds since the epoch (double precision).
double NowUnix();

// Serializes to one JSON object (schema first). Never fails.
std::string HintsToJson(const Hints& h);
// Parses and validates; `origin` (a path) names the source in errors, which also name the field:
// "hints /x/h.json: field 'cost.persist_s': expected a number". Unknown fields are ignored.
Status HintsFromJson(const std::string& json, const std::string& origin, Hints* out);

// Writes `data` to `path` durably and atomically: <path>.tmp.<pid>, fsync, rename, fsync parent.
Status WriteFileAtomic(const std::string& path, const std::string& data);

// Publishes hints atomically; a reader sees either the old or the new file, never a mix.
Status WriteHintsAtomic(const std::string& path, const Hints& h);

// Reads `path`. kNotFound when it does not exist (the caller treats that as "unknown cost"),
// kCorruption when it is not valid preempt.hints/1. `age_s` (optional) receives
// NowUnix() - updated_unix, so the caller can decide it is stale.
Status ReadHints(const std::string& path, Hints* out, double* age_s = nullptr);

// $PREEMPT_HINTS_FILE, or "" when unset.
std::string HintsPathFromEnv();

// ---- cost tracking (fed by the runtime after each checkpoint) ----------------------------------

struct CostSample {
  uint64_t bytes = 0;
  double drain_s = 0, stall_s = 0, persist_s = 0;
};

// EWMA and p95 over the last `window` samples of each cost component.
class CostTracker {
 public:
  explicit CostTracker(size_t window = 32, double ewma_alpha = 0.3);
  void add(const CostSample& s);
  void clear();              // forgets every sample
  size_t count() const;
  CostSample ewma() const;   // zeros before the first sample
  CostSample p95() const;    // nearest-rank p95 of each component over the window
  // p95() as the hints' cost block.
  Hints::Cost p95_cost() const;
  // The samples in the window, oldest first (add()ing them to a new tracker restores the p95s).
  std::vector<CostSample> samples() const;

 private:
  mutable std::mutex mu_;
  size_t window_;
  double alpha_;
  size_t count_ = 0;
  CostSample ewma_;
  std::deque<CostSample> recent_;
};

// ---- checkpoint-request channel -----------------------------------------------------------------

struct CheckpointRequest {
  int64_t id = 0;                     // strictly increasing per job, > 0
  std::string action = "checkpoint";  // the only action of preempt.request/1
};

// $PREEMPT_REQUEST_FILE if set, else hints_path + ".request".
std::string RequestPathFor(const std::string& hints_path);

std::string RequestToJson(const CheckpointRequest& r);
Status RequestFromJson(const std::string& json, const std::string& origin, CheckpointRequest* out);
// Scheduler side: atomically replaces the request file.
Status WriteCheckpointRequest(const std::string& path, const CheckpointRequest& r);
Status ReadCheckpointRequest(const std::string& path, CheckpointRequest* out);

// Job side. poll() costs one clock read when called again within `min_interval`, otherwise one
// stat(); the file is read only when its (inode, size, mtime) changed. It returns each request
// with an id greater than every id seen before exactly once. A malformed file is logged once and
// ignored (a scheduler may be mid-way through an unusual write; the next valid one is seen).
// A request is fulfilled by the first checkpoint that commits after it was written, even one
// whose snapshot was taken before (a save already in flight answers it).
class RequestChannel {
 public:
  // `last_handled`: requests with id <= this are ignored (pass the request_ack a restored job
  // published before it stopped, so a resumed job does not redo an old request).
  // `fulfilled_before_unix`: a request file last written before this time (the COMMIT time of
  // the checkpoint a job resumed from) is also taken as handled: that commit answered it.
  explicit RequestChannel(std::string path,
                          std::chrono::milliseconds min_interval = std::chrono::milliseconds(5),
                          int64_t last_handled = 0, double fulfilled_before_unix = 0);
  std::optional<CheckpointRequest> poll();
  const std::string& path() const { return path_; }
  int64_t last_id() const { return last_id_; }
  // The newest request taken as answered by the resumed commit (0: none).
  int64_t fulfilled_id() const { return fulfilled_id_; }

 private:
  std::string path_;
  std::chrono::steady_clock::duration min_interval_;
  std::chrono::steady_clock::time_point next_check_{};
  int64_t last_id_;
  double fulfilled_before_unix_;
  int64_t fulfilled_id_ = 0;
  bool have_stat_ = false;
  ino_t ino_ = 0;
  off_t size_ = 0;
  int64_t mtime_ns_ = 0;
  bool warned_ = false;
};

}  // namespace preempt
