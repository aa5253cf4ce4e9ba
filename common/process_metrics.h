// The process_* metrics every Prometheus exporter is expected to have (CPU time, resident and
// virtual memory, open and allowed file descriptors, start time), read from /proc/self at each
// scrape, and the daemon's build-info metric.
#ifndef NCCLWATCH_COMMON_PROCESS_METRICS_H_
#define NCCLWATCH_COMMON_PROCESS_METRICS_H_

#include <string>
#include <string_view>

#include "common/metrics.h"

namespace ncclwatch {

// Registers a collector writing process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds and
// process_start_time_seconds. A value that cannot be read is left out, never made up.
void AddProcessMetrics(MetricRegistry& registry, std::string proc_self = "/proc/self");

// Sets `<prefix>_build_info{version, revision}` to 1 (common/build_info.h).
void AddBuildInfo(MetricRegistry& registry, std::string_view prefix);

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_PROCESS_METRICS_H_
