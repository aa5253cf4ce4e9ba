#include "common/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/build_info.h"
#include "common/strings.h"

namespace ncclwatch {
namespace {

struct ProcessStat {
  double cpu_seconds = -1;
  double start_time_seconds = -1;
  double virtual_bytes = -1;
  double resident_bytes = -1;
};

// The system's boot time, seconds since the epoch (/proc/stat's btime), -1 if unknown.
double BootTime() {
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    double btime = 0;
    if (line.rfind("btime ", 0) == 0 &&
        absl::SimpleAtod(Av(std::string_view(line).substr(6)), &btime)) {
      return btime;
    }
  }
  return -1;
}

// /proc/<pid>/stat: the fields after the command name (which may hold spaces and parentheses).
ProcessStat ReadStat(const std::string& proc_self) {
  ProcessStat out;
  std::ifstream in(proc_self + "/stat");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t close = s.rfind(')');
  if (close == std::string::npos) return out;
  // Field 3 (state) is the first after ')': index i here is field i + 3.
  std::vector<std::string> f = absl::StrSplit(s.substr(close + 1), ' ', absl::SkipEmpty());
  const long ticks = sysconf(_SC_CLK_TCK);
  const long page = sysconf(_SC_PAGESIZE);
  double utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
  if (f.size() < 22 || ticks <= 0 || page <= 0) return out;
  if (absl::SimpleAtod(f[11], &utime) && absl::SimpleAtod(f[12], &stime)) {
    out.cpu_seconds = (utime + stime) / static_cast<double>(ticks);
  }
  const double boot = BootTime();
  if (absl::SimpleAtod(f[19], &start) && boot >= 0) {
    out.start_time_seconds = boot + start / static_cast<double>(ticks);
  }
  if (absl::SimpleAtod(f[20], &vsize)) out.virtual_bytes = vsize;
  if (absl::SimpleAtod(f[21], &rss)) out.resident_bytes = rss * static_cast<double>(page);
  return out;
}

void WriteProcessMetrics(const std::string& proc_self, PromTextWriter& w) {
  const ProcessStat stat = ReadStat(proc_self);
  const auto gauge = [&w](const char* name, const char* help, const char* type, double value) {
    if (value < 0) return;
    w.Family(name, help, type);
    w.Sample(name, {}, value);
  };
  gauge("process_cpu_seconds_total", "User and system CPU time spent, in seconds.", "counter",
        stat.cpu_seconds);
  gauge("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge",
        stat.resident_bytes);
  gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge",
        stat.virtual_bytes);
  gauge("process_start_time_seconds", "Start time of the process since the epoch, in seconds.",
        "gauge", stat.start_time_seconds);
  std::error_code ec;
  double fds = 0;
  for (std::filesystem::directory_iterator it(proc_self + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++fds;
  }
  gauge("process_open_fds", "Open file descriptors.", "gauge", ec ? -1 : fds);
  rlimit limit{};
  gauge("process_max_fds", "Limit of open file descriptors.", "gauge",
        getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
            ? static_cast<double>(limit.rlim_cur)
            : -1);
}

}  // namespace

void AddProcessMetrics(MetricRegistry& registry, std::string proc_self) {
  registry.AddCollector(
      [proc_self = std::move(proc_self)](PromTextWriter& w) { WriteProcessMetrics(proc_self, w); });
}

void AddBuildInfo(MetricRegistry& registry, std::string_view prefix) {
  registry
      .GetGauge(absl::StrCat(Av(prefix), "_build_info"),
                "Always 1; its labels say which version and git revision is running.",
                {{"version", BuildVersion()}, {"revision", BuildRevision()}})
      ->Set(1);
}

}  // namespace ncclwatch
