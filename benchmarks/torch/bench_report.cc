// Statistics and JSON output of bench_torch (see bench_report.h).
#include "bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace bench_torch {

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }
double Min(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }
double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

std::string Label(double gib) {
  char b[32];
  if (gib >= 1 && gib == static_cast<int>(gib)) std::snprintf(b, sizeof b, "%dgib", static_cast<int>(gib));
  else std::snprintf(b, sizeof b, "%dmib", static_cast<int>(gib * 1024 + 0.5));
  return b;
}

void Json::num(const std::string& k, double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", std::isfinite(v) ? v : 0.0);
  kv_.emplace_back(k, b);
}

void Json::str(const std::string& k, const std::string& v) { kv_.emplace_back(k, "\"" + v + "\""); }

void Json::list(const std::string& k, const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char b[64];
    std::snprintf(b, sizeof b, "%s%.6g", i ? ", " : "", v[i]);
    s += b;
  }
  kv_.emplace_back(k, s + "]");
}

std::string Json::dump() const {
  std::string s = "{\n";
  for (size_t i = 0; i < kv_.size(); ++i)
    s += "  \"" + kv_[i].first + "\": " + kv_[i].second + (i + 1 < kv_.size() ? ",\n" : "\n");
  return s + "}\n";
}

std::string TargetsJson(const std::vector<Target>& ts) {
  std::string s = "[";
  for (size_t i = 0; i < ts.size(); ++i) {
    char b[512];
    std::snprintf(b, sizeof b, "%s{\"name\": \"%s\", \"value\": %.4g, \"target\": \"%s\", \"pass\": %s}", i ? ", " : "",
                  ts[i].name.c_str(), std::isfinite(ts[i].value) ? ts[i].value : 0.0, ts[i].text.c_str(),
                  ts[i].pass ? "true" : "false");
    s += b;
  }
  return s + "]";
}

void PrintTargets(const std::vector<Target>& ts) {
  for (const auto& t : ts)
    std::printf("  %-44s %8.4g  target %-8s %s\n", t.name.c_str(), t.value, t.text.c_str(), t.pass ? "PASS" : "MISS");
}

}  // namespace bench_torch
