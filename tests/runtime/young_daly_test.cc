// The adaptive checkpoint interval (Young/Daly): sqrt(2 · cost · MTBP), clamped.
#include <gtest/gtest.h>

#include <cmath>

#include "preempt/runtime.h"

namespace preempt {
namespace {

TEST(YoungDaly, Table) {
  struct Row {
    double cost_s, mtbp_s, min_s, max_s, want;
  };
  const Row rows[] = {
      {2.0, 3600.0, 10, 3600, std::sqrt(2.0 * 2.0 * 3600.0)},  // 120 s
      {0.05, 3600.0, 10, 3600, std::sqrt(2.0 * 0.05 * 3600.0)},  // 19 s
      {0.001, 3600.0, 10, 3600, 10},    // clamped up to min
      {100.0, 86400.0, 10, 3600, 3600},  // sqrt(2·100·86400) = 4157 s: clamped down to max
      {0.0, 3600.0, 10, 3600, 3600},    // no cost measured yet: the longest interval
      {2.0, 0.0, 10, 3600, 3600},       // no preemptions expected
      {NAN, 3600.0, 10, 3600, 3600},
  };
  for (const auto& r : rows) {
    EXPECT_NEAR(YoungDalyInterval(r.cost_s, r.mtbp_s, r.min_s, r.max_s), r.want, 1e-9)
        << "cost " << r.cost_s << " mtbp " << r.mtbp_s;
  }
}

TEST(YoungDaly, CheaperCheckpointsOrMorePreemptionsShortenTheInterval) {
  EXPECT_LT(YoungDalyInterval(0.5, 3600, 1, 1e6), YoungDalyInterval(2.0, 3600, 1, 1e6));
  EXPECT_LT(YoungDalyInterval(2.0, 600, 1, 1e6), YoungDalyInterval(2.0, 3600, 1, 1e6));
}

}  // namespace
}  // namespace preempt
