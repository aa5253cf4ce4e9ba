// Minimal leveled logging for the daemons and tools: one line per message on stderr, as text,
// "2026-11-21T11:22:33.456Z I agent] text", or (--log-format json, for Loki or Elasticsearch) as
// one JSON object, {"time":"2026-11-21T11:22:33.456Z","level":"info","component":"agent",
// "message":"text"}. Thread-safe (one write(2) per line).
// Never used on the plugin's callback path.
#ifndef NCCLWATCH_COMMON_LOG_H_
#define NCCLWATCH_COMMON_LOG_H_

#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace ncclwatch {

enum class LogSeverity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this severity are discarded. Default kInfo, or NCCLWATCH_LOG_LEVEL when it names
// a level; the daemons validate the variable (and --log-level) through ConfigTable.
void SetMinLogSeverity(LogSeverity severity);
// "debug", "info", "warning" (or "warn"), "error", any case; false for anything else.
bool ParseLogSeverity(std::string_view text, LogSeverity* out);
// The component name printed in every line, e.g. "agent".
void SetLogComponent(std::string_view component);

enum class LogFormat { kText, kJson };
// Set once at start-up (ConfigTable::ParseDaemonCommandLine), before other threads log.
void SetLogFormat(LogFormat format);
// "text" or "json", any case; false for anything else.
bool ParseLogFormat(std::string_view text, LogFormat* out);
// The line LogLine writes for a message (without the newline), in the current format.
std::string FormatLogLine(LogSeverity severity, std::string_view message);
void LogLine(LogSeverity severity, std::string_view message);

template <typename... Args>
void LogInfo(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogSeverity::kInfo, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogWarning(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogSeverity::kWarning, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogError(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogSeverity::kError, absl::StrFormat(format, args...));
}
template <typename... Args>
void LogDebug(const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(LogSeverity::kDebug, absl::StrFormat(format, args...));
}

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_LOG_H_
