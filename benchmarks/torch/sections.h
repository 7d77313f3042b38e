// The sections of bench_torch. Each prints its figures, adds them to the JSON object and its
// targets to the list; each blocks until its measurements are done (seconds to minutes).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench_models.h"
#include "bench_options.h"
#include "bench_report.h"
#include "preempt/store.h"
#include "preempt/torch/training_state.h"

namespace bench_torch {

// One size: a model with its Adam state, tracked by `state`, checkpointed into `store`.
struct SizeCase {
  std::string label;  // "1gib"
  uint64_t bytes = 0;
  std::shared_ptr<BigModel> model;
  torch::optim::Adam* adam = nullptr;
  preempt::Store* store = nullptr;
  preempt::torch::TrainingState* state = nullptr;
};

struct Report {
  Json json;
  std::vector<Target> targets;
};

// Plain copy, first snapshot, snapshot stall, persist to COMMIT. Leaves a committed checkpoint
// in the store. Returns the snapshot stall (best repetition, seconds).
double RunSnapshotSection(const Options& opt, SizeCase& c, Report* out);

// Cold reads of the same state, interleaved per repetition: TrainingState::restore, the store's
// own restore, torch::load, and plain reads of the same files (the disk's ceiling).
void RunRestoreSection(const Options& opt, SizeCase& c, double stall_s, Report* out);

// The training loop with and without periodic overlapped checkpoints (a size of its own).
void RunTrainingLoop(const Options& opt, double gib, Report* out);

}  // namespace bench_torch
