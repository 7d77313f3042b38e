// Simulation metrics: per-job outcomes into SimMetrics, and their CSV and table forms (simulator.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "sim_job.h"

namespace preempt::sched {
namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size()) - 1;
  return v[rank];
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// Time from submit to finish (or `end`) not spent training: queueing, waits after preemptions,
// restores and redone work.
double TotalDelay(const SimJob& s, double end) {
  if (s.finish >= 0) return std::max(0.0, s.finish - s.t->submit - s.t->duration_s);
  return std::max(0.0, end - s.t->submit - s.p0);
}

}  // namespace

void FinishMetrics(const std::vector<SimJob>& jobs, const std::vector<std::array<double, SimMetrics::kCauses>>& wait_by,
                   double end, double first_submit, int total_gpus, int largest_node_gpus, double decide_total_us,
                   const SimOptions& opt, SimResult* res) {
  SimMetrics& m = res->metrics;
  constexpr int kCauses = SimMetrics::kCauses;
  std::vector<double> hw, hw_whole, mw, lw, per_job;
  double alloc = 0, lost = 0;
  res->first_start.resize(jobs.size());
  res->finish.resize(jobs.size());
  res->preemptions.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const SimJob& s = jobs[i];
    double a = s.allocated_gpu_s, l = s.lost_gpu_s;
    if (s.placed) {  // still running at the horizon: account the partial run
      a += s.t->gpus * (end - s.seg_start);
    }
    alloc += a;
    lost += l;
    m.lost_restore_gpu_hours += s.lost_restore_gpu_s / 3600.0;
    m.lost_discarded_gpu_hours += s.lost_discarded_gpu_s / 3600.0;
    m.lost_stopped_gpu_hours += s.lost_stopped_gpu_s / 3600.0;
    if (s.finish >= 0) m.work_conservation_error_s += std::fabs(s.allocated_gpu_s - s.lost_gpu_s - s.t->gpus * s.t->duration_s);
    double wait = s.first_start >= 0 ? s.first_start - s.t->submit : std::max(0.0, end - s.t->submit);
    if (s.t->submit > end) continue;
    per_job.push_back(s.preemptions + s.moves);
    m.preemptions_per_job_max = std::max(m.preemptions_per_job_max, s.preemptions + s.moves);
    switch (s.t->cls) {
      case PriorityClass::kHigh:
        hw.push_back(wait);
        if (s.t->gpus >= largest_node_gpus) hw_whole.push_back(wait);
        break;
      case PriorityClass::kMedium: mw.push_back(wait); break;
      case PriorityClass::kLow:
        lw.push_back(wait);
        m.low_total++;
        if (s.finish >= 0) m.low_completed++;
        if (wait > opt.starvation_s) m.low_starved++;
        if (TotalDelay(s, end) > std::max(opt.starvation_s, opt.starvation_runtime_factor * s.t->duration_s))
          m.low_starved_delay++;
        break;
    }
    res->first_start[i] = s.first_start;
    res->finish[i] = s.finish;
    res->preemptions[i] = s.preemptions;
  }
  m.high_wait_mean_s = Mean(hw);
  m.high_wait_p95_s = Percentile(hw, 0.95);
  m.high_whole_node_jobs = static_cast<int>(hw_whole.size());
  m.high_whole_node_wait_mean_s = Mean(hw_whole);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const SimJob& s = jobs[i];
    if (s.t->cls != PriorityClass::kHigh || s.t->submit > end) continue;
    double wait = s.first_start >= 0 ? s.first_start - s.t->submit : std::max(0.0, end - s.t->submit);
    bool tail = wait > 0 && wait >= m.high_wait_p95_s;
    if (tail) m.high_tail_jobs++;
    for (int k = 0; k < kCauses; ++k) {
      m.high_wait_cause_s[k] += wait_by[i][k];
      if (tail) m.high_tail_wait_cause_s[k] += wait_by[i][k];
    }
  }
  m.medium_wait_mean_s = Mean(mw);
  m.medium_wait_p95_s = Percentile(mw, 0.95);
  m.preemptions_per_job_mean = Mean(per_job);
  m.preemptions_per_job_p99 = Percentile(per_job, 0.99);
  m.low_wait_mean_s = Mean(lw);
  m.low_wait_max_s = lw.empty() ? 0 : *std::max_element(lw.begin(), lw.end());
  m.lost_gpu_hours = lost / 3600.0;
  m.makespan_s = first_submit < kSimInf ? end - first_submit : 0;
  m.utilization = m.makespan_s > 0 ? alloc / (static_cast<double>(total_gpus) * m.makespan_s) : 0;
  m.decide_mean_us = m.decisions ? decide_total_us / m.decisions : 0;
  if (m.work_conservation_error_s > 1e-3 * std::max(1, m.completed) && res->violations.size() < 20)
    res->violations.push_back("work not conserved: error " + std::to_string(m.work_conservation_error_s) + " GPU-s");
}

const char* SimWaitCauseName(int k) {
  if (k == 0) return "victims-saving";
  if (k == kNumWaitCauses) return "victims-exiting";
  if (k < 0 || k > kNumWaitCauses) return "?";
  return WaitCauseName(static_cast<WaitCause>(k));
}

std::string MetricsCsvHeader() {
  return "trace,policy,jobs,completed,high_wait_mean_s,high_wait_p95_s,medium_wait_mean_s,low_wait_mean_s,"
         "low_wait_max_s,low_total,low_completed,low_starved,lost_gpu_hours,preemptions,checkpoint_requests,"
         "thrash_cycles,utilization,makespan_s,decisions,decide_mean_us,decide_max_us,capacity_violations,"
         "lost_restore_gpu_hours,lost_discarded_gpu_hours,lost_stopped_gpu_hours,moves,move_restart_wait_mean_s,"
         "preemptions_per_job_mean,preemptions_per_job_p99,preemptions_per_job_max,repreemptions,"
         "medium_wait_p95_s,low_starved_delay,bill_cost,bill_by_queue\n";
}

namespace {

// The bill per queue in one CSV field: "queue=cost;queue=cost" (a queue name's ',', ';', '=' and
// control characters become '_', so the field never splits).
std::string BillCsvField(const SimMetrics& m) {
  std::string out;
  char buf[64];
  for (const QueueBill& b : m.bill) {
    if (!out.empty()) out += ';';
    for (char ch : b.queue) out += (ch == ',' || ch == ';' || ch == '=' || static_cast<unsigned char>(ch) < 0x20) ? '_' : ch;
    snprintf(buf, sizeof buf, "=%.2f", b.cost);
    out += buf;
  }
  return out;
}

}  // namespace

std::string MetricsCsvRow(const std::string& trace, const SimMetrics& m) {
  char buf[1024];
  snprintf(buf, sizeof buf,
           "%s,%s,%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%d,%d,%d,%.3f,%d,%d,%d,%.4f,%.0f,%d,%.1f,%.1f,%d,%.3f,%.3f,%.3f,%d,%.1f,"
           "%.4f,%.0f,%d,%d,%.1f,%d,",
           trace.c_str(),
           m.policy.c_str(), m.jobs, m.completed, m.high_wait_mean_s, m.high_wait_p95_s, m.medium_wait_mean_s,
           m.low_wait_mean_s, m.low_wait_max_s, m.low_total, m.low_completed, m.low_starved, m.lost_gpu_hours,
           m.preemptions, m.checkpoint_requests, m.thrash_cycles, m.utilization, m.makespan_s, m.decisions,
           m.decide_mean_us, m.decide_max_us, m.capacity_violations, m.lost_restore_gpu_hours,
           m.lost_discarded_gpu_hours, m.lost_stopped_gpu_hours, m.moves,
           m.move_restarts ? m.move_restart_wait_s / m.move_restarts : 0.0, m.preemptions_per_job_mean,
           m.preemptions_per_job_p99, m.preemptions_per_job_max, m.repreemptions, m.medium_wait_p95_s,
           m.low_starved_delay);
  double cost = 0;
  for (const QueueBill& b : m.bill) cost += b.cost;
  char tail[64];
  snprintf(tail, sizeof tail, "%.2f,", cost);
  return buf + std::string(tail) + BillCsvField(m) + "\n";
}

std::string MetricsTable(const std::string& trace, const std::vector<SimMetrics>& rows) {
  std::ostringstream o;
  char buf[512];
  snprintf(buf, sizeof buf, "%-26s %-13s %10s %10s %10s %8s %6s %8s %7s %9s %9s %7s %6s %14s %6s %9s %10s  %s\n",
           "trace", "policy", "hi_mean_s", "hi_p95_s", "lost_GPUh", "preempt", "moves", "ckpt_req", "thrash",
           "lo_mean_s", "lo_starv", "util", "dec_us", "per_job_m/99/mx", "re_1h", "lo_starvD", "med_p95_s",
           "lost=restore+discarded+stopped");
  o << buf;
  for (const auto& m : rows) {
    char per_job[48];
    snprintf(per_job, sizeof per_job, "%.2f/%.0f/%d", m.preemptions_per_job_mean, m.preemptions_per_job_p99,
             m.preemptions_per_job_max);
    snprintf(buf, sizeof buf,
             "%-26.26s %-13s %10.0f %10.0f %10.2f %8d %6d %8d %7d %9.0f %9d %7.3f %6.0f %14s %6d %9d %10.0f  %.1f+%.1f+%.1f\n",
             trace.c_str(), m.policy.c_str(), m.high_wait_mean_s, m.high_wait_p95_s, m.lost_gpu_hours,
             m.preemptions, m.moves, m.checkpoint_requests, m.thrash_cycles, m.low_wait_mean_s, m.low_starved, m.utilization,
             m.decide_mean_us, per_job, m.repreemptions, m.low_starved_delay, m.medium_wait_p95_s,
             m.lost_restore_gpu_hours, m.lost_discarded_gpu_hours, m.lost_stopped_gpu_hours);
    o << buf;
  }
  return o.str();
}

std::string MetricsJson(const SimMetrics& m) {
  char buf[2048];
  snprintf(buf, sizeof buf,
           "{\"policy\":\"%s\",\"jobs\":%d,\"completed\":%d,\"high_wait_mean_s\":%.3f,\"high_wait_p95_s\":%.3f,"
           "\"medium_wait_mean_s\":%.3f,\"medium_wait_p95_s\":%.3f,\"low_wait_mean_s\":%.3f,\"low_wait_max_s\":%.3f,"
           "\"low_completed\":%d,\"low_total\":%d,\"low_starved\":%d,\"low_starved_delay\":%d,"
           "\"lost_gpu_hours\":%.4f,\"preemptions\":%d,\"preemptions_per_job_mean\":%.4f,"
           "\"preemptions_per_job_p99\":%.0f,\"preemptions_per_job_max\":%d,\"repreemptions\":%d,"
           "\"checkpoint_requests\":%d,\"thrash_cycles\":%d,\"utilization\":%.4f,\"makespan_s\":%.0f,"
           "\"decide_mean_us\":%.2f,\"decide_max_us\":%.2f,\"capacity_violations\":%d,\"lost_restore_gpu_hours\":%.4f,"
           "\"lost_discarded_gpu_hours\":%.4f,\"lost_stopped_gpu_hours\":%.4f,\"moves\":%d,"
           "\"move_restart_wait_mean_s\":%.1f",
           m.policy.c_str(), m.jobs, m.completed, m.high_wait_mean_s, m.high_wait_p95_s, m.medium_wait_mean_s,
           m.medium_wait_p95_s, m.low_wait_mean_s, m.low_wait_max_s, m.low_completed, m.low_total, m.low_starved,
           m.low_starved_delay, m.lost_gpu_hours, m.preemptions, m.preemptions_per_job_mean, m.preemptions_per_job_p99,
           m.preemptions_per_job_max, m.repreemptions, m.checkpoint_requests, m.thrash_cycles, m.utilization,
           m.makespan_s, m.decide_mean_us, m.decide_max_us, m.capacity_violations, m.lost_restore_gpu_hours,
           m.lost_discarded_gpu_hours, m.lost_stopped_gpu_hours, m.moves,
           m.move_restarts ? m.move_restart_wait_s / m.move_restarts : 0.0);
  std::string out = buf;
  for (int tail = 0; tail < 2; ++tail) {
    out += tail ? ",\"high_tail_wait_by_cause_s\":{" : ",\"high_wait_by_cause_s\":{";
    for (int k = 0; k < SimMetrics::kCauses; ++k) {
      snprintf(buf, sizeof buf, "%s\"%s\":%.1f", k ? "," : "", SimWaitCauseName(k),
               tail ? m.high_tail_wait_cause_s[k] : m.high_wait_cause_s[k]);
      out += buf;
    }
    out += "}";
  }
  return out + "}";
}

}  // namespace preempt::sched
