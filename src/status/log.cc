#include "preempt/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace preempt {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("PREEMPT_LOG_LEVEL");
  LogLevel level = LogLevel::kInfo;
  if (v && !ParseLogLevel(v, &level))
    fprintf(stderr, "[preempt] W pid=%d ignoring PREEMPT_LOG_LEVEL=\"%.64s\": expected debug, info, warn, error or off; "
                    "logging at info\n", static_cast<int>(getpid()), v);
  return level;
}

std::atomic<int>& Threshold() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

std::mutex& SinkMutex() {
  static std::mutex mu;
  return mu;
}

std::function<void(LogLevel, const std::string&)>& Sink() {
  static std::function<void(LogLevel, const std::string&)> sink;
  return sink;
}

}  // namespace

bool ParseLogLevel(const char* name, LogLevel* out) {
  static const struct {
    const char* name;
    LogLevel level;
  } kLevels[] = {{"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo}, {"warn", LogLevel::kWarn},
                 {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  if (name == nullptr) return false;
  for (const auto& l : kLevels) {
    if (strcmp(name, l.name) == 0) {
      *out = l.level;
      return true;
    }
  }
  return false;
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= Threshold().load(std::memory_order_relaxed); }

void SetLogLevel(LogLevel level) { Threshold().store(static_cast<int>(level)); }

void SetLogSink(std::function<void(LogLevel, const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(SinkMutex());
  Sink() = std::move(sink);
}

void Log(LogLevel level, const char* fmt, ...) {
  if (!LogEnabled(level) || level == LogLevel::kOff) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  static const char kLetters[] = "DIWE";
  char line[2300];
  snprintf(line, sizeof(line), "[preempt] %c %04d-%02d-%02dT%02d:%02d:%02d.%03ldZ pid=%d %s\n",
           kLetters[static_cast<int>(level)], tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
           tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, static_cast<int>(getpid()), msg);
  std::lock_guard<std::mutex> lock(SinkMutex());
  if (Sink()) {
    Sink()(level, line);
  } else {
    fputs(line, stderr);
  }
}

}  // namespace preempt
