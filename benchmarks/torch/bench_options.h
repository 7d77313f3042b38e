// The command line of bench_torch: what it measures, how long, where. Parse() refuses unknown
// flags and out-of-range values with a message naming the flag (exit code 2).
#pragma once

#include <string>
#include <vector>

namespace bench_torch {

struct Options {
  std::vector<double> sizes_gib{1, 4};   // model + Adam state per size section
  std::string dir;                       // checkpoints and torch::save files
  std::string json;                      // results file ("" = stdout only)
  bool quick = false;                    // 64 MiB everywhere, few repetitions (a smoke test)
  int reps = 5;                          // repetitions of each timed operation (medians reported)
  bool torch_save = true;                // torch::save / torch::load baselines
  std::string cold = "drop";             // cold reads: drop (page cache, root) or evict (the files only)
  // Training loop: one section per size; a checkpoint every `train_interval_s` of training (or
  // every `train_interval_copies` plain copies of the state, whichever is longer),
  // `train_rounds` pairs of segments with and without, alternating ABBA.
  std::vector<double> train_sizes_gib{1};
  double train_interval_s = 20;
  double train_interval_copies = 100;  // not a flag; --quick lowers it
  int train_rounds = 6;
  bool train_only = false;
};

// Exits with a usage line on -h, and with an error naming the flag on bad input.
Options Parse(int argc, char** argv);

}  // namespace bench_torch
