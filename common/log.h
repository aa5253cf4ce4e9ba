// Minimal leveled logging for the daemons and tools: one line per message on stderr, as text,
// "2026-11-21T11:22:33.456Z I agent] text", or (--log-format json, for Loki or Elasticsearch) as
// one JSON object, {"time":"2026-11-21T11:22:33.456Z","level":"info","component":"agent",
// "message":"text"}. A message may carry fields (LogInfoWith, ...: the job, node, peer it is
// about), which a JSON line holds as "fields":{"job_id":"..."} after the message and a text line
// appends as ` job_id=...` (quoted when they hold a space, quote or '='), so that a log
// pipeline can select on them. Thread-safe (one write(2) per line).
// Never used on the plugin's callback path.
#ifndef NCCLWATCH_COMMON_LOG_H_
#define NCCLWATCH_COMMON_LOG_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
// A message's fields, in order: (name, value).
using LogFields = std::vector<std::pair<std::string, std::string>>;

// The line LogLine writes for a message (without the newline), in the current format.
std::string FormatLogLine(LogSeverity severity, std::string_view message,
                          const LogFields& fields = {});
void LogLine(LogSeverity severity, std::string_view message, const LogFields& fields = {});

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

template <typename... Args>
void LogInfoWith(const LogFields& fields, const absl::FormatSpec<Args...>& format,
                 const Args&... args) {
  LogLine(LogSeverity::kInfo, absl::StrFormat(format, args...), fields);
}
template <typename... Args>
void LogWarningWith(const LogFields& fields, const absl::FormatSpec<Args...>& format,
                    const Args&... args) {
  LogLine(LogSeverity::kWarning, absl::StrFormat(format, args...), fields);
}

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_LOG_H_
