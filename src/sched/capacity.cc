// Capacity: the fewest nodes that keep the high-priority p95 wait within a bound (simulator.h).
#include <cmath>

#include "preempt/sched/simulator.h"

namespace preempt::sched {
namespace {

Trace WithNodes(const Trace& trace, int nodes, int gpus_per_node) {
  Trace t;
  t.name = trace.name;
  t.jobs = trace.jobs;
  for (int i = 0; i < nodes; ++i) t.nodes.push_back({"cap-" + std::to_string(i), gpus_per_node});
  return t;
}

}  // namespace

Status FindCapacity(const Trace& trace, const PolicyOptions& policy, const SimOptions& opt, double target_p95_s,
                    int gpus_per_node, CapacityReport* out) {
  *out = CapacityReport{};
  if (gpus_per_node < 1)
    return Status(StatusCode::kInvalidArgument, "capacity: gpus_per_node must be >= 1");
  for (const TraceJob& j : trace.jobs)
    if (j.gpus > gpus_per_node)
      return Status(StatusCode::kInvalidArgument, "capacity: trace " + trace.name + ": job " + j.id + " needs " +
                                                      std::to_string(j.gpus) + " GPUs, more than a node's " +
                                                      std::to_string(gpus_per_node));
  // p95 of the high-priority waits on n nodes (cached: the bisection asks for each n once).
  auto p95_on = [&](int nodes, double* p95) -> Status {
    SimResult r;
    PREEMPT_RETURN_IF_ERROR(Simulate(WithNodes(trace, nodes, gpus_per_node), policy, opt, &r));
    out->simulations++;
    *p95 = r.metrics.high_wait_p95_s;
    return Status::OK();
  };
  // Upper bound: enough nodes for the peak offered demand, doubled until it holds (at most 4 times).
  Trace probe = WithNodes(trace, 1, gpus_per_node);
  int hi = std::max(1, static_cast<int>(std::ceil(MeasureOfferedDemand(probe).peak_gpus / double(gpus_per_node))));
  double hi_p95 = 0;
  PREEMPT_RETURN_IF_ERROR(p95_on(hi, &hi_p95));
  for (int k = 0; hi_p95 > target_p95_s && k < 4; ++k) {
    hi *= 2;
    PREEMPT_RETURN_IF_ERROR(p95_on(hi, &hi_p95));
  }
  out->largest_tried_nodes = hi;
  if (hi_p95 > target_p95_s) return Status::OK();  // found stays false
  int lo = 0;  // lo fails (0 nodes run nothing), hi holds
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    double p95 = 0;
    PREEMPT_RETURN_IF_ERROR(p95_on(mid, &p95));
    if (p95 <= target_p95_s) {
      hi = mid;
      hi_p95 = p95;
    } else {
      lo = mid;
    }
  }
  out->found = true;
  out->nodes = hi;
  out->gpus = hi * gpus_per_node;
  out->high_p95_s = hi_p95;
  return Status::OK();
}

}  // namespace preempt::sched
