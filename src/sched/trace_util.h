// trace_util.h — helpers shared by the trace readers and generators (simulator.h).
#pragma once

#include <string>
#include <vector>

#include "preempt/sched/simulator.h"

namespace preempt::sched {

inline constexpr int kMaxTraceGpus = 1 << 16;
inline constexpr double kMaxTraceSeconds = 1e10;  // ~317 years

// Checkpoint model from a job's state size (docs/sched.md): NVMe persist at 2 GB/s plus a fixed
// 0.5 s commit, staging copy at 20 GB/s, restore read at 4 GB/s plus 10 s process start.
void ApplyCheckpointModel(double bytes, double interval_s, TraceJob* j);

// One CSV line split at commas (no quoting; '\r' dropped).
std::vector<std::string> SplitCsv(const std::string& line);
// The whole string as a finite number.
bool ParseDouble(const std::string& s, double* out);

}  // namespace preempt::sched
