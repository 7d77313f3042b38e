// One rank of a gloo job used by coord_test (and the per-step cost benchmark).
//
//   coord_worker <mode> <rank> <world> <store_file> <out_file> [check_every] [steps]
// modes:
//   agree   train-like loop (gradient all_reduce registered with a WorkDrain); stops at the agreed
//           step after a SIGTERM to any rank; writes "stop <step> drained <ok>" to out_file.
//   stuck   like agree, but rank world-1 never reaches the agreement collective after step 5
//           (sleeps); the others must give up at the stop deadline and exit 3.
//   abandon rank 0 calls allreduce_max on its buffer {7, 11, 13} with a 0.3 s deadline and gives
//           up; rank 1 joins 1.5 s later with {100, 200, 300}. Rank 0 then waits 2 s and writes
//           "buffer <v0> <v1> <v2>" (a collective must never write the caller's buffer after it
//           returned); rank 1 writes "result <v0> <v1> <v2>" (what it received).
//   bench   no signal: measures the mean cost of StopCoordinator::check for `steps` steps;
//           writes "check_us <mean> max_us <max> checks <n>" to out_file.
// Exit codes: 0 stopped at an agreed step, 3 agreement/drain deadline missed, 2 usage/other.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include "preempt/coord_c10d.h"
#include "preempt/signal.h"

int main(int argc, char** argv) {
  if (argc < 6) return 2;
  std::string mode = argv[1];
  int rank = std::atoi(argv[2]), world = std::atoi(argv[3]);
  std::string store = argv[4], out = argv[5];
  int64_t every = argc > 6 ? std::atoll(argv[6]) : 1;
  int64_t steps = argc > 7 ? std::atoll(argv[7]) : 100000;
  bool pipelined = argc > 8 && std::string(argv[8]) == "pipelined";

  preempt::SignalOptions so;
  if (!preempt::InstallSignalHandlers(so).ok()) return 2;
  auto pg = preempt::MakeGlooGroup(store, rank, world, 30);
  auto collective = preempt::MakeC10dCollective(pg, "gloo");
  preempt::StopCoordinator coord(collective.get(),
                                 {.check_every = every, .collective_timeout_s = 30, .pipelined = pipelined});
  preempt::WorkDrain drain;
  torch::Tensor grad = torch::ones({4096});
  {
    std::ofstream(out + ".ready") << "ready\n";
  }
  preempt::StopDecision d;
  if (mode == "abandon") {
    std::vector<int64_t> values = rank == 0 ? std::vector<int64_t>{7, 11, 13} : std::vector<int64_t>{100, 200, 300};
    preempt::Status st;
    if (rank == 0) {
      st = collective->allreduce_max(values.data(), 3, preempt::Deadline::InSeconds(0.3), preempt::UntilStop::kNo);
      std::this_thread::sleep_for(std::chrono::seconds(2));  // the peer joins meanwhile
      std::ofstream(out) << "buffer " << values[0] << " " << values[1] << " " << values[2] << " " << st.to_string()
                         << "\n";
      collective->abandon();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      st = collective->allreduce_max(values.data(), 3, preempt::Deadline::InSeconds(30), preempt::UntilStop::kNo);
      std::ofstream(out) << "result " << values[0] << " " << values[1] << " " << values[2] << " " << st.to_string()
                         << "\n";
    }
    return 0;
  }
  if (mode == "bench") {
    // warm up
    for (int64_t s = 0; s < 50; ++s) (void)coord.check(s, false, false, preempt::Deadline::Never(), preempt::UntilStop::kNo, &d);
    preempt::StopCoordinator timed(collective.get(),
                                   {.check_every = every, .collective_timeout_s = 30, .pipelined = pipelined});
    // 1 ms of "compute" per step; only the time inside check() is counted.
    for (int64_t s = 0; s < steps; ++s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!timed.check(s, false, false, preempt::Deadline::Never(), preempt::UntilStop::kNo, &d).ok()) return 3;
    }
    double total = timed.stats().total_check_s;
    // Baseline: the same 3-int64 all_reduce(MAX) straight on the process group, Work::wait().
    torch::Tensor t = torch::zeros({3}, torch::kInt64);
    auto r0 = std::chrono::steady_clock::now();
    int64_t raw_n = steps / every;
    for (int64_t s = 0; s < raw_n; ++s) {
      std::vector<torch::Tensor> ts{t};
      pg->allreduce(ts, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
    }
    double raw = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
    std::ofstream(out) << "check_us " << total / steps * 1e6 << " max_us " << timed.stats().max_check_s * 1e6
                       << " checks " << timed.stats().checks << " raw_allreduce_us " << raw / raw_n * 1e6 << "\n";
    return 0;
  }
  for (int64_t step = 0; step < steps; ++step) {
    // "train": a gradient all_reduce in flight while computing, registered for the drain.
    std::vector<torch::Tensor> ts{grad};
    drain.add(pg->allreduce(ts), "grad allreduce step " + std::to_string(step));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (mode == "stuck" && rank == world - 1 && step >= 5) {
      std::this_thread::sleep_for(std::chrono::seconds(600));  // never reaches the collective
    }
    {
      std::ofstream(out + ".progress") << step << "\n";
    }
    preempt::Status st = coord.check(step, preempt::StopRequested(), false, preempt::StopDeadline(), preempt::UntilStop::kYes, &d);
    if (!st.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, st.to_string().c_str());
      std::ofstream(out) << "failed " << step << " " << st.to_string() << "\n";
      collective->abandon();
      return 3;
    }
    if (d.stop) {
      preempt::Status ds = drain.drain(d.deadline);
      std::ofstream(out) << "stop " << step << " drained " << (ds.ok() ? 1 : 0) << " deadline_left "
                         << d.deadline.remaining_seconds() << "\n";
      return 0;
    }
  }
  std::ofstream(out) << "finished\n";
  return 0;
}
