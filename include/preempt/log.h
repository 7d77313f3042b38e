// preempt/log.h — one line per event, to stderr (or a sink a test installs).
//
// Format: "[preempt] I 2026-12-02T13:34:00.123Z pid=123 <message>". The threshold comes from
// PREEMPT_LOG_LEVEL (debug|info|warn|error|off; default info).
// Thread-safety: Log() may be called from any thread (not from a signal handler).
#pragma once

#include <functional>
#include <string>

namespace preempt {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// printf-style; the message should be one line and say what happened.
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// "debug" | "info" | "warn" | "error" | "off" → *out; false (and *out untouched) for anything else.
// An unknown PREEMPT_LOG_LEVEL is not silently ignored: the first log call warns on stderr
// and keeps the default (info).
bool ParseLogLevel(const char* name, LogLevel* out);

bool LogEnabled(LogLevel level);
void SetLogLevel(LogLevel level);
// Replaces the output (nullptr restores stderr). The sink gets the fully formatted line.
void SetLogSink(std::function<void(LogLevel, const std::string&)> sink);

}  // namespace preempt

#define PREEMPT_LOG_DEBUG(...) ::preempt::Log(::preempt::LogLevel::kDebug, __VA_ARGS__)
#define PREEMPT_LOG_INFO(...) ::preempt::Log(::preempt::LogLevel::kInfo, __VA_ARGS__)
#define PREEMPT_LOG_WARN(...) ::preempt::Log(::preempt::LogLevel::kWarn, __VA_ARGS__)
#define PREEMPT_LOG_ERROR(...) ::preempt::Log(::preempt::LogLevel::kError, __VA_ARGS__)
