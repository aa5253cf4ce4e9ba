#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/json_string.h"

namespace ncclwatch {
namespace {

LogSeverity InitialSeverity() {
  const char* env = std::getenv("NCCLWATCH_LOG_LEVEL");
  LogSeverity severity = LogSeverity::kInfo;
  if (env != nullptr) ParseLogSeverity(env, &severity);
  return severity;
}

std::atomic<int> min_severity{static_cast<int>(InitialSeverity())};
std::atomic<int> format{static_cast<int>(LogFormat::kText)};
// Set once at start-up, before other threads exist.
std::string* component = new std::string("ncclwatch");

}  // namespace

bool ParseLogSeverity(std::string_view text, LogSeverity* out) {
  const std::string level = absl::AsciiStrToLower(std::string(text));
  if (level == "debug") {
    *out = LogSeverity::kDebug;
  } else if (level == "info") {
    *out = LogSeverity::kInfo;
  } else if (level == "warning" || level == "warn") {
    *out = LogSeverity::kWarning;
  } else if (level == "error") {
    *out = LogSeverity::kError;
  } else {
    return false;
  }
  return true;
}

void SetMinLogSeverity(LogSeverity severity) { min_severity = static_cast<int>(severity); }

void SetLogComponent(std::string_view name) { *component = std::string(name); }

void SetLogFormat(LogFormat f) { format = static_cast<int>(f); }

bool ParseLogFormat(std::string_view text, LogFormat* out) {
  const std::string name = absl::AsciiStrToLower(std::string(text));
  if (name == "text") {
    *out = LogFormat::kText;
  } else if (name == "json") {
    *out = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

std::string FormatLogLine(LogSeverity severity, std::string_view message, const LogFields& fields) {
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  static constexpr const char* kNames[] = {"debug", "info", "warning", "error"};
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm utc;
  gmtime_r(&secs, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  if (static_cast<LogFormat>(format.load(std::memory_order_relaxed)) == LogFormat::kJson) {
    std::string line = absl::StrFormat("{\"time\":\"%s.%03dZ\",\"level\":\"%s\",\"component\":\"",
                                       stamp, millis, kNames[static_cast<int>(severity)]);
    AppendJsonString(&line, *component);
    line.append("\",\"message\":\"");
    AppendJsonString(&line, message);
    line.append("\"");
    if (!fields.empty()) {
      line.append(",\"fields\":{");
      for (size_t i = 0; i < fields.size(); ++i) {
        line.append(i == 0 ? "\"" : ",\"");
        AppendJsonString(&line, fields[i].first);
        line.append("\":\"");
        AppendJsonString(&line, fields[i].second);
        line.append("\"");
      }
      line.append("}");
    }
    line.append("}");
    return line;
  }
  std::string line = absl::StrFormat("%s.%03dZ %c %s] %s", stamp, millis,
                                     kLetters[static_cast<int>(severity)], *component, message);
  for (const auto& [name, value] : fields) {
    const bool quote = value.empty() || value.find_first_of(" \"=") != std::string::npos;
    absl::StrAppend(
        &line, " ", name, "=",
        quote ? absl::StrCat("\"", absl::StrReplaceAll(value, {{"\"", "\\\""}}), "\"") : value);
  }
  return line;
}

void LogLine(LogSeverity severity, std::string_view message, const LogFields& fields) {
  if (static_cast<int>(severity) < min_severity.load(std::memory_order_relaxed)) return;
  std::string line = FormatLogLine(severity, message, fields);
  line.push_back('\n');
  // One write per line keeps lines from different threads whole.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace ncclwatch
