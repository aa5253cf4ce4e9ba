// The catalogue of every series family ncclwatch exports to Prometheus (the names and label sets
// are the contract: docs/wire-format.md, ARCHITECTURE's "Exported series"): one name, one help
// text and one type per family, used by every exporter -- the aggregator's /federate and
// remote-write, the agent's node-local /metrics and the plugin's offline textfile.
#ifndef NCCLWATCH_PROTO_EXPORTED_SERIES_H_
#define NCCLWATCH_PROTO_EXPORTED_SERIES_H_

#include <span>
#include <string_view>

namespace ncclwatch {

struct SeriesFamily {
  const char* name;
  const char* help;
  const char* type;  // "gauge" or "counter"
  // Computed by the detectors from the aggregator's current state (not measured by a plugin over
  // an interval): /federate gives these no timestamp, so that Prometheus marks them stale the
  // moment they are gone (a job that ended), and alerts on them resolve at once.
  bool live = false;
};

// The NCCL Inspector-compatible families come first (kInspectorFamilies), then ncclwatch's own.
inline constexpr SeriesFamily kExportedSeries[] = {
    {"nccl_bus_bandwidth_gbs", "Collective bus bandwidth in GB/s (geometric mean).", "gauge"},
    {"nccl_collective_exec_time_microseconds", "Mean collective execution time.", "gauge"},
    {"nccl_p2p_bus_bandwidth_gbs", "Point-to-point bus bandwidth in GB/s (geometric mean).",
     "gauge"},
    {"nccl_p2p_exec_time_microseconds", "Mean point-to-point execution time.", "gauge"},
    {"ncclwatch_straggler", "1 while the rank is flagged as consistently late (absent otherwise).",
     "gauge", true},
    {"ncclwatch_origin_not_found",
     "1 while the rank pages as a straggler with no origin found: late beyond its replicas while "
     "no GPU of its job is slow itself (absent otherwise).",
     "gauge", true},
    {"ncclwatch_rank_lateness_seconds",
     "Median time the rank reaches collectives after the first rank of its communicator.", "gauge",
     true},
    {"ncclwatch_hang",
     "1 while a collective of the communicator has made no progress for longer than the hang "
     "threshold, else 0.",
     "gauge", true},
    {"ncclwatch_hang_age_seconds", "Age of the communicator's hung collective (0 when none).",
     "gauge", true},
    {"ncclwatch_rank_missing",
     "1 while the rank is missing from its communicator's hung collective: it never reached it, "
     "or went silent.",
     "gauge", true},
    {"ncclwatch_comm_degraded",
     "1 while the communicator's bus bandwidth stays below the baseline of communicators of its "
     "class (nvlink or hybrid), collective, message size and size, else 0.",
     "gauge", true},
    {"ncclwatch_node_network_suspect",
     "1 while the node's network is the common factor of the job's degraded hybrid "
     "communicators (its NVLink-only communicators being healthy).",
     "gauge", true},
    {"ncclwatch_node_straggler",
     "1 while the node is reported slow: several of its GPUs slow themselves, or every rank the "
     "communicator has on it late (absent otherwise).",
     "gauge", true},
    {"ncclwatch_rank_silent",
     "1 while the rank's reports have stopped and the rest of its communicator carries on.",
     "gauge", true},
    {"ncclwatch_node_silent",
     "1 while every process seen on the node has stopped reporting and the job's processes on "
     "other nodes carry on (absent otherwise).",
     "gauge", true},
    {"ncclwatch_job_ranks_unreported",
     "Ranks of the job that have never reported (in its largest incomplete communicator) while "
     "its other ranks have for a while: plugin not loaded or no agent on their nodes (absent "
     "otherwise).",
     "gauge", true},
    {"ncclwatch_plugin_drops_total",
     "What the rank's plugin could not record since its process started, by kind (events, "
     "records, reports, samples_capped, channel_events_orphaned: a pool, ring or queue was "
     "full; bogus_timings: GPU timestamps that cannot be true, not measured).",
     "counter"},
    {"ncclwatch_tagged_exec_time_microseconds",
     "Mean execution time of the rank's operations that the application tagged (NCCL 2.31 "
     "userProfilerTag: a step, phase or layer), per operation and tag, over its last interval.",
     "gauge"},
};

// The four families NCCL Inspector exports, with Inspector's names.
inline constexpr std::span<const SeriesFamily> kInspectorFamilies(kExportedSeries, 4);

// The family called `name`, or nullptr.
inline const SeriesFamily* FindExportedSeries(std::string_view name) {
  for (const SeriesFamily& f : kExportedSeries) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

}  // namespace ncclwatch

#endif  // NCCLWATCH_PROTO_EXPORTED_SERIES_H_
