// bench_torch's command line (see bench_options.h).
#include "bench_options.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace bench_torch {
namespace {

constexpr const char* kUsage =
    "usage: bench_torch [--sizes 1,4] [--dir DIR] [--json PATH] [--quick] [--reps N] [--no-torch-save]\n"
    "                   [--cold drop|evict] [--train-sizes 1] [--train-interval-s S] [--train-rounds R]\n"
    "                   [--train-only]\n";

[[noreturn]] void Refuse(const std::string& m) {
  std::fprintf(stderr, "bench_torch: %s\n%s", m.c_str(), kUsage);
  std::exit(2);
}

double Number(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end == v.c_str() || *end || !(d >= lo && d <= hi)) {
    std::ostringstream m;
    m << "bad " << flag << " value '" << v << "' (a number in " << lo << " .. " << hi << ")";
    Refuse(m.str());
  }
  return d;
}

int Integer(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end == v.c_str() || *end || n < lo || n > hi) {
    Refuse("bad " + flag + " value '" + v + "' (an integer in " + std::to_string(lo) + " .. " + std::to_string(hi) + ")");
  }
  return static_cast<int>(n);
}

std::vector<double> Sizes(const std::string& flag, const std::string& v) {
  std::vector<double> out;
  std::stringstream ss(v);
  std::string tok;
  while (std::getline(ss, tok, ',')) out.push_back(Number(flag, tok, 1.0 / 1024, 64));
  if (out.empty()) Refuse(flag + " is empty");
  return out;
}

}  // namespace

Options Parse(int argc, char** argv) {
  Options o;
  const char* env_dir = std::getenv("PREEMPT_BENCH_DIR");
  o.dir = std::string(env_dir ? env_dir : "/tmp/preempt-bench") + "/torch";
  bool sizes_set = false, interval_set = false, rounds_set = false;  // --quick keeps what was given
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Refuse("missing value after " + a);
      return argv[++i];
    };
    if (a == "--sizes") {
      o.sizes_gib = Sizes(a, next());
    } else if (a == "--train-sizes") {
      o.train_sizes_gib = Sizes(a, next());
      sizes_set = true;
    } else if (a == "--dir") {
      o.dir = next();
      if (o.dir.empty()) Refuse("--dir is empty");
    } else if (a == "--json") {
      o.json = next();
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--reps") {
      o.reps = Integer(a, next(), 1, 100);
    } else if (a == "--no-torch-save") {
      o.torch_save = false;
    } else if (a == "--cold") {
      o.cold = next();
      if (o.cold != "drop" && o.cold != "evict") Refuse("bad --cold value '" + o.cold + "' (drop or evict)");
    } else if (a == "--train-interval-s") {
      o.train_interval_s = Number(a, next(), 0.1, 3600);
      interval_set = true;
    } else if (a == "--train-rounds") {
      o.train_rounds = Integer(a, next(), 1, 1000);
      rounds_set = true;
    } else if (a == "--train-only") {
      o.train_only = true;
    } else if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      std::exit(0);
    } else {
      Refuse("unknown argument " + a);
    }
  }
  if (o.quick) {
    o.sizes_gib = {1.0 / 16};
    o.reps = std::min(o.reps, 2);
    o.cold = "evict";
    if (!sizes_set) o.train_sizes_gib = {1.0 / 16};
    if (!interval_set) {
      o.train_interval_s = 2;
      o.train_interval_copies = 5;
    }
    if (!rounds_set) o.train_rounds = 1;
  }
  return o;
}

}  // namespace bench_torch
