// The simulator's bill per queue (simulator.h: QueueBill).
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "sim_job.h"

namespace preempt::sched {

void FinishBill(const std::vector<SimJob>& jobs, double end, const PolicyOptions& policy, SimMetrics* m) {
  std::map<std::string, QueueBill> by_queue;
  for (const SimJob& s : jobs) {
    double gpu_s = s.allocated_gpu_s;
    if (s.placed) gpu_s += s.t->gpus * (end - s.seg_start);  // still running at the horizon
    QueueBill& b = by_queue[s.t->queue];
    b.queue = s.t->queue;
    b.gpu_hours[static_cast<int>(s.t->cls)] += gpu_s / 3600.0;
  }
  m->bill.clear();
  for (auto& [queue, b] : by_queue) {
    for (int c = 0; c < kNumClasses; ++c) b.cost += b.gpu_hours[c] * policy.gpu_hour_price[c];
    m->bill.push_back(b);
  }
}

std::string BillTable(const std::vector<SimMetrics>& rows) {
  std::ostringstream o;
  char buf[256];
  snprintf(buf, sizeof buf, "%-13s %-20s %12s %12s %12s %14s\n", "policy", "queue", "low_GPUh", "medium_GPUh",
           "high_GPUh", "cost");
  o << buf;
  for (const SimMetrics& m : rows) {
    for (const QueueBill& b : m.bill) {
      snprintf(buf, sizeof buf, "%-13s %-20.20s %12.1f %12.1f %12.1f %14.2f\n", m.policy.c_str(), b.queue.c_str(),
               b.gpu_hours[0], b.gpu_hours[1], b.gpu_hours[2], b.cost);
      o << buf;
    }
  }
  return o.str();
}

std::string BillJson(const SimMetrics& m) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < m.bill.size(); ++i) {
    const QueueBill& b = m.bill[i];
    std::string q;
    for (char ch : b.queue) {
      if (ch == '"' || ch == '\\') q += '\\';
      if (static_cast<unsigned char>(ch) >= 0x20) q += ch;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "\"gpu_hours\":[%.4f,%.4f,%.4f],\"cost\":%.4f}", b.gpu_hours[0], b.gpu_hours[1],
             b.gpu_hours[2], b.cost);
    o << (i ? "," : "") << "{\"queue\":\"" << q << "\"," << buf;
  }
  o << "]";
  return o.str();
}

}  // namespace preempt::sched
