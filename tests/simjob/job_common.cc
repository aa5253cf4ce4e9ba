// The real-time clock and the communicator names shared by simjob's parent and ranks; the
// contract is in job_common.h.
#include "tests/simjob/job_common.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace ncclwatch::simjob {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void SleepUntil(int64_t deadline_ns) {
  if (NowNs() >= deadline_ns) return;  // late already: no system call, no timer
  const timespec ts = {static_cast<time_t>(deadline_ns / 1'000'000'000),
                       static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

int64_t SecondsToNs(double s) { return std::llround(s * 1e9); }

std::string StrFormat(const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

std::string CommName(CommScope scope, int instance, bool layout_3d) {
  switch (scope) {
    case CommScope::kWorld:
      return "world";
    case CommScope::kNode:
      return (layout_3d ? "tp" : "node") + std::to_string(instance);
    case CommScope::kDp:
      return "dp" + std::to_string(instance);
    case CommScope::kPp:
      return "pp" + std::to_string(instance);
    case CommScope::kSplit:
      return "split" + std::to_string(instance);
  }
  return "invalid";
}

std::vector<CommScope> ScopesOf(const TimelineConfig& config) {
  std::vector<CommScope> scopes;
  for (const StepSpec& s : config.workload) {
    if (std::find(scopes.begin(), scopes.end(), s.scope) == scopes.end()) {
      scopes.push_back(s.scope);
    }
  }
  if (config.split_at_ns != kNever) scopes.push_back(CommScope::kSplit);
  return scopes;
}

}  // namespace ncclwatch::simjob
