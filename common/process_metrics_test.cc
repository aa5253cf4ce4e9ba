#include "common/process_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/build_info.h"
#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

// The value of an unlabelled sample `name` in `text`, -1 when absent.
double Value(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = ("\n" + text).find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size() - 1));
}

TEST(ProcessMetricsTest, ReportsThisProcessAsItIsNow) {
  MetricRegistry registry;
  AddProcessMetrics(registry);
  const std::string before = registry.Render();
  EXPECT_NE(before.find("# TYPE process_cpu_seconds_total counter\n"), std::string::npos) << before;
  EXPECT_GT(Value(before, "process_resident_memory_bytes"), 1 << 20) << before;
  EXPECT_GE(Value(before, "process_virtual_memory_bytes"),
            Value(before, "process_resident_memory_bytes"));
  EXPECT_GE(Value(before, "process_cpu_seconds_total"), 0);
  EXPECT_GT(Value(before, "process_max_fds"), 0);
  const double start = Value(before, "process_start_time_seconds");
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 24 * 3600);  // a test process started today

  // Two more open files are two more descriptors at the next scrape.
  const int a = open("/dev/null", O_RDONLY);
  const int b = open("/dev/null", O_RDONLY);
  const double open_fds = Value(registry.Render(), "process_open_fds");
  close(a);
  close(b);
  EXPECT_EQ(open_fds, Value(registry.Render(), "process_open_fds") + 2);
}

TEST(ProcessMetricsTest, AProcDirectoryThatCannotBeReadLeavesItsValuesOut) {
  MetricRegistry registry;
  AddProcessMetrics(registry, "/nonexistent-proc/self");
  const std::string text = registry.Render();
  EXPECT_EQ(text.find("process_resident_memory_bytes"), std::string::npos) << text;
  EXPECT_EQ(text.find("process_open_fds"), std::string::npos) << text;
  EXPECT_NE(text.find("process_max_fds "), std::string::npos) << text;  // from getrlimit
}

TEST(ProcessMetricsTest, BuildInfoNamesTheVersionAndRevision) {
  MetricRegistry registry;
  AddBuildInfo(registry, "t");
  EXPECT_NE(registry.Render().find(absl::StrCat("t_build_info{version=\"", BuildVersion(),
                                                "\",revision=\"", BuildRevision(), "\"} 1\n")),
            std::string::npos)
      << registry.Render();
  EXPECT_FALSE(std::string(BuildVersion()).empty());
  EXPECT_EQ(VersionText("prog"),
            absl::StrCat("prog ", BuildVersion(), " (git ", BuildRevision(), ")"));
}

}  // namespace
}  // namespace ncclwatch
