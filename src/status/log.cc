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
  if (!v) return LogLevel::kInfo;
  if (!strcmp(v, "debug")) return LogLevel::kDebug;
  if (!strcmp(v, "warn")) return LogLevel::kWarn;
  if (!strcmp(v, "error")) return LogLevel::kError;
  if (!strcmp(v, "off")) return LogLevel::kOff;
  return LogLevel::kInfo;
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
