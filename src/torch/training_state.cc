// preempt::torch::TrainingState: registration of tracked objects, snapshot into staging, persist
// through the store, restore into the live objects. The kinds live in tracked_*.cc, the staging
// memory in staging.cc.
#include "preempt/torch/training_state.h"

#include <algorithm>
#include <chrono>

#include <c10/util/Exception.h>

#include "preempt/log.h"
#include "torch/kinds.h"
#include "torch/staging.h"

namespace preempt::torch {
namespace {

using Clock = std::chrono::steady_clock;
double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

[[noreturn]] void Fail(StatusCode code, const std::string& msg) { throw Error(Status(code, msg)); }

// Runs one step of `what` for tracked object `t`: an exception from LibTorch or cereal becomes an
// Error naming the object (this layer's one error type).
template <class Fn>
void Guard(const char* what, const Tracked& t, Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    Fail(StatusCode::kInternal, std::string(what) + " '" + t.name() + "': " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    Fail(StatusCode::kInternal, std::string(what) + " '" + t.name() + "': " + e.what());
  }
}

}  // namespace

TrainingState::TrainingState(TrainingStateOptions options) : options_(std::move(options)) {
  if (options_.staging_buffers < 1 || options_.staging_buffers > 2)
    Fail(StatusCode::kInvalidArgument, "TrainingStateOptions.staging_buffers must be 1 or 2");
  pool_ = std::make_unique<internal::StagingPool>(options_.staging_buffers, options_.pin_memory);
  if (options_.capture_rng) track(internal::TrackDefaultGenerators());
}

TrainingState::~TrainingState() {
  Status s = wait_all();
  if (!s.ok()) PREEMPT_LOG_WARN("TrainingState: a save failed: %s", s.to_string().c_str());
}

// ---- registration ---------------------------------------------------------------------------
void TrainingState::track(std::unique_ptr<Tracked> object) {
  if (!object) Fail(StatusCode::kInvalidArgument, "track: null object");
  const std::string& name = object->name();
  if (name.empty() || name.find(':') != std::string::npos || !IsValidEntryName(name + ":x"))
    Fail(StatusCode::kInvalidArgument, "track: invalid name '" + name + "' (entry name characters, no ':')");
  for (const auto& t : tracked_)
    if (t->name() == name) Fail(StatusCode::kInvalidArgument, "track: name '" + name + "' is already tracked");
  // Ordered by stage, then registration: restore applies them in this order.
  auto pos = std::find_if(tracked_.begin(), tracked_.end(),
                          [&](const std::unique_ptr<Tracked>& t) { return t->stage() > object->stage(); });
  tracked_.insert(pos, std::move(object));
}

void TrainingState::track(const std::string& name, ::torch::nn::Module& module) {
  track(internal::TrackModule(name, module));
}
void TrainingState::track(const std::string& name, ::torch::optim::Optimizer& optimizer) {
  track(internal::TrackOptimizer(name, optimizer));
}
void TrainingState::track(const std::string& name, ::torch::optim::LRScheduler& scheduler) {
  track(internal::TrackLrScheduler(name, scheduler));
}
void TrainingState::track(const std::string& name, ::torch::data::samplers::SequentialSampler& s) {
  track(internal::TrackSampler(name, s));
}
void TrainingState::track(const std::string& name, ::torch::data::samplers::DistributedSequentialSampler& s) {
  track(internal::TrackSampler(name, s));
}
void TrainingState::track(const std::string& name, ::torch::data::samplers::DistributedRandomSampler& s) {
  track(internal::TrackSampler(name, s));
}
void TrainingState::track(const std::string& name, ResumableRandomSampler& s) {
  track(internal::TrackSampler(name, s));
}
void TrainingState::track_blob(const std::string& name, std::function<std::string()> save,
                               std::function<void(const std::string&)> load) {
  track(internal::TrackBlob(name, std::move(save), std::move(load)));
}

// ---- checkpointing --------------------------------------------------------------------------
std::vector<Entry> TrainingState::collect() const {
  std::vector<Entry> entries;
  for (const auto& t : tracked_) Guard("snapshot: collecting", *t, [&] { t->collect(&entries); });
  return entries;
}

SnapshotResult TrainingState::snapshot(int64_t step, WhenBusy when_busy, Deadline deadline) {
  SnapshotResult res;
  res.step = step;
  internal::StagingBuffer* buf = pool_->acquire(when_busy, deadline, &res.wait_s);
  if (!buf) {
    res.skipped = true;
    skipped_++;
    return res;
  }
  (void)pool_->take_staged();  // an older snapshot that was never persisted is superseded
  const std::vector<Entry> entries = collect();
  res.alloc_s = pool_->ensure_capacity(buf, internal::LayoutBytes(entries));
  const auto t0 = Clock::now();  // the stall: copying every entry into staging
  try {
    res.bytes = pool_->copy_into(buf, entries);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    Fail(StatusCode::kInternal, std::string("snapshot: copy into staging: ") + e.what());
  }
  res.stall_s = SecondsSince(t0);
  res.entries = entries.size();
  buf->step = step;
  pool_->set_staged(buf);
  snapshots_++;
  return res;
}

std::shared_ptr<SaveHandle> TrainingState::persist_async(Store& store) {
  internal::SaveSlot* slot = pool_->take_staged();
  if (!slot) Fail(StatusCode::kInvalidArgument, "persist_async: no snapshot is staged");
  SaveRequest req;
  req.step = slot->step;
  req.items = slot->items;  // points into the slot: valid until the handle is done
  req.metadata = options_.metadata;
  req.metadata["preempt.torch.format"] = "1";
  std::string names;
  for (const auto& t : tracked_) names += (names.empty() ? "" : ",") + t->name();
  req.metadata["preempt.torch.tracked"] = names;
  slot->handle = store.save_async(std::move(req));
  return slot->handle;
}

CheckpointResult TrainingState::checkpoint_async(Store& store, int64_t step, WhenBusy when_busy, Deadline deadline) {
  CheckpointResult res;
  res.snapshot = snapshot(step, when_busy, deadline);
  if (!res.snapshot.skipped) res.handle = persist_async(store);
  return res;
}

CheckpointResult TrainingState::checkpoint_in_place(Store& store, int64_t step, Deadline deadline) {
  // Saves already queued are written first by the store; nothing to wait for here.
  std::vector<Entry> entries = collect();
  const size_t count = entries.size();
  const auto t0 = Clock::now();  // the stall: pointing the save at the live entries
  internal::SaveSlot* slot = pool_->fill_in_place(std::move(entries), deadline);
  if (!slot) return checkpoint_async(store, step, WhenBusy::kWait, deadline);
  CheckpointResult res;
  res.snapshot.step = step;
  res.snapshot.in_place = true;
  res.snapshot.bytes = slot->bytes;
  res.snapshot.entries = count;
  res.snapshot.stall_s = SecondsSince(t0);
  slot->step = step;
  pool_->set_staged(slot);
  snapshots_++;
  res.handle = persist_async(store);
  return res;
}

Status TrainingState::wait_all(Deadline deadline) { return pool_->wait_all(deadline); }

void TrainingState::reserve() { pool_->reserve(internal::LayoutBytes(collect())); }

// ---- restore --------------------------------------------------------------------------------
std::optional<int64_t> TrainingState::restore(Store& store, const RestoreOptions& opts, RestoreResult* result) {
  RestoreResult local;
  RestoreResult* r = result ? result : &local;
  if (!opts.step) {
    std::vector<int64_t> steps;
    ThrowIfError(store.valid_steps(&steps));
    if (steps.empty()) return std::nullopt;
  }
  std::vector<RestoreTarget> targets;
  for (const auto& t : tracked_) Guard("restore", *t, [&] { t->expect(&targets); });
  RestoreOptions o = opts;
  o.allocate_untargeted = false;  // what nothing tracks is not read (strict: the store refuses it)
  ThrowIfError(store.restore(targets, o, r).with_context("restore"));
  for (const auto& name : r->missing)
    PREEMPT_LOG_WARN("restore: checkpoint step %lld has no entry '%s'; left as is (non-strict)",
                     static_cast<long long>(r->step), name.c_str());
  for (const auto& name : r->unexpected)
    PREEMPT_LOG_WARN("restore: checkpoint entry '%s' ignored (non-strict)", name.c_str());
  RestoreContext ctx(r);
  for (const auto& t : tracked_) Guard("restore", *t, [&] { t->apply(ctx); });
  return r->step;
}

// ---- introspection --------------------------------------------------------------------------
TrainingStateStats TrainingState::stats() const {
  TrainingStateStats s;
  s.snapshots = snapshots_;
  s.skipped = skipped_;
  s.staging_bytes = pool_->staging_bytes();
  s.first_error = pool_->first_error();
  return s;
}

uint64_t TrainingState::state_bytes() const {
  uint64_t n = 0;
  for (const auto& e : collect()) n += e.nbytes();
  return n;
}

std::vector<std::string> TrainingState::entry_names() const {
  std::vector<std::string> out;
  for (const auto& e : collect()) out.push_back(e.name);
  return out;
}

}  // namespace preempt::torch
