// Pieces shared by the runtime's source files (runtime.cc, restore.cc, stop.cc, record.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "preempt/deadline.h"
#include "preempt/hints.h"
#include "preempt/signal.h"
#include "preempt/status.h"

namespace preempt::runtime_internal {

inline double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The stop path's deadline plus half the reserve: how long a rank waits for a save it cancelled
// at the deadline to settle, and for the exchange that tells every rank whether it committed.
// The other half of the reserve is left for exiting.
inline Deadline SettleDeadline(Deadline stop_deadline, const GraceConfig& grace) {
  if (stop_deadline.is_never()) return stop_deadline;
  return Deadline::At(stop_deadline.time() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::duration<double>(grace.reserve_s / 2)));
}

// What the runtime keeps about itself in every checkpoint (entry kRecordEntry), so that a
// restarted job gets it back from the checkpoint it restores: hints are output only.
inline constexpr const char* kRecordEntry = "preempt.runtime";
struct Record {
  int64_t request_ack = 0;         // the last checkpoint request this checkpoint fulfils
  std::vector<CostSample> costs;   // measured checkpoint costs (the window behind the p95s)
};
std::string EncodeRecord(const Record& r);
// kCorruption naming the entry when `bytes` is not a record this build understands.
Status DecodeRecord(const std::string& bytes, Record* out);

}  // namespace preempt::runtime_internal
