#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <string>

#include "absl/strings/ascii.h"

namespace ncclwatch {
namespace {

LogSeverity InitialSeverity() {
  const char* env = std::getenv("NCCLWATCH_LOG_LEVEL");
  LogSeverity severity = LogSeverity::kInfo;
  if (env != nullptr) ParseLogSeverity(env, &severity);
  return severity;
}

std::atomic<int> min_severity{static_cast<int>(InitialSeverity())};
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

void LogLine(LogSeverity severity, std::string_view message) {
  if (static_cast<int>(severity) < min_severity.load(std::memory_order_relaxed)) return;
  static constexpr char kLetters[] = {'D', 'I', 'W', 'E'};
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm utc;
  gmtime_r(&secs, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  std::string line = absl::StrFormat("%s.%03dZ %c %s] %s\n", stamp, millis,
                                     kLetters[static_cast<int>(severity)], *component, message);
  // One write per line keeps lines from different threads whole.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace ncclwatch
