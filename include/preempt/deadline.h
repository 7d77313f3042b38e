// preempt/deadline.h — an absolute point in (steady) time that every wait in preempt honours.
//
// Thread-safety: a value type; safe to copy and read from any thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace preempt {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline Never() { return Deadline(Clock::time_point::max()); }
  static Deadline At(Clock::time_point t) { return Deadline(t); }
  static Deadline In(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline InSeconds(double s) {
    return In(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s)));
  }

  bool is_never() const { return t_ == Clock::time_point::max(); }
  bool expired() const { return !is_never() && Clock::now() >= t_; }
  Clock::time_point time() const { return t_; }
  // Time left (zero when expired; a very large value when Never).
  std::chrono::nanoseconds remaining() const {
    if (is_never()) return std::chrono::nanoseconds::max();
    auto now = Clock::now();
    return now >= t_ ? std::chrono::nanoseconds(0)
                     : std::chrono::duration_cast<std::chrono::nanoseconds>(t_ - now);
  }
  double remaining_seconds() const {
    return is_never() ? 1e18 : std::chrono::duration<double>(remaining()).count();
  }
  // The earlier of two deadlines.
  Deadline min(const Deadline& o) const { return t_ <= o.t_ ? *this : o; }

 private:
  explicit Deadline(Clock::time_point t) : t_(t) {}
  Clock::time_point t_;
};

}  // namespace preempt
