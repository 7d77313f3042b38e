// Figures of bench_torch: robust statistics of repeated timings, one flat JSON object, and the
// targets list (name, value, target, pass) that benchmarks/report.py reads. Not thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bench_torch {

double Median(std::vector<double> v);
// q in [0, 1], linear between order statistics; 0 for an empty vector.
double Quantile(std::vector<double> v, double q);
double Min(const std::vector<double>& v);
double Max(const std::vector<double>& v);
// "1gib", "256mib".
std::string Label(double gib);

class Json {
 public:
  void num(const std::string& k, double v);
  void str(const std::string& k, const std::string& v);
  void list(const std::string& k, const std::vector<double>& v);
  void raw(const std::string& k, const std::string& v) { kv_.emplace_back(k, v); }
  std::string dump() const;

 private:
  std::vector<std::pair<std::string, std::string>> kv_;
};

struct Target {
  std::string name;
  double value;
  std::string text;  // "<= 0.01"
  bool pass;
};

std::string TargetsJson(const std::vector<Target>& ts);
void PrintTargets(const std::vector<Target>& ts);

}  // namespace bench_torch
