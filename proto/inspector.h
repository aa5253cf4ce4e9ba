// NCCL Inspector's Prometheus series computed from one RankReport, shared by everything that
// exports them (the aggregator's /federate, the agent's node-local /metrics, the plugin's offline
// textfile): the same names, labels and arithmetic everywhere.
//
// Per (operation, message-size bucket[, algo_proto]) of the report's interval, point-to-point
// peers merged: mean execution time, and the geometric mean of bus bandwidth where any operation
// had a bandwidth.
#ifndef NCCLWATCH_PROTO_INSPECTOR_H_
#define NCCLWATCH_PROTO_INSPECTOR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "common/prom_text.h"
#include "ncclwatch/v1/report.pb.h"
#include "proto/exported_series.h"

namespace ncclwatch {

struct InspectorSample {
  const char* name;  // nccl_bus_bandwidth_gbs, nccl_collective_exec_time_microseconds, ...
  // n_nodes, nranks, collective | p2p_operation, message_size[, algo_proto]: the caller puts
  // the labels that say whose rank it is (job, communicator, node, GPU) in front.
  LabelPairs labels;
  double value;
};

std::vector<InspectorSample> InspectorSamples(const ncclwatch::v1::RankReport& report);

// What InspectorSamples computes, before any label is built: one entry per (p2p, operation,
// message size, algo_proto) with operations, in InspectorSamples' order. The views point into
// the report. The aggregator finds the series it keeps for these by a key (InspectorStatKey)
// instead of building or comparing a label set for each, which was a good part of its cost per
// report.
struct InspectorStat {
  bool p2p = false;
  std::string_view op, message_size, algo_proto;  // algo_proto empty for p2p
  double mean_us = 0;
  bool has_bw = false;  // then a bandwidth sample follows the time sample
  double bus_bw_gbs = 0;
  // nccl_p2p_exec_time_microseconds or nccl_collective_exec_time_microseconds; the bandwidth
  // family (nccl_p2p_bus_bandwidth_gbs, nccl_bus_bandwidth_gbs).
  const char* time_family() const;
  const char* bw_family() const;
};
absl::InlinedVector<InspectorStat, 8> InspectorStats(const ncclwatch::v1::RankReport& report);
// The labels of `stat`'s samples (both families have the same), and a 64-bit hash of what they
// are made of: equal for two stats whose samples carry the same labels, and (but for a hash
// collision, odds 2^-64 a pair) different for any two whose labels differ.
LabelPairs InspectorStatLabels(const InspectorStat& stat, const ncclwatch::v1::RankIdentity& id);
uint64_t InspectorStatKey(const InspectorStat& stat, const ncclwatch::v1::RankIdentity& id);

// ncclwatch's per-tag breakdown (ABI v7 userTag: a step, phase or layer the application set per
// call): ncclwatch_tagged_exec_time_microseconds, the mean execution time of the report's tagged
// operations per (collective | p2p_operation, user_tag), message sizes and peers merged. Untagged
// operations are left out. `user_tag` is the tag in decimal, or in hex for NCCL's reserved values
// (top bit set). At most `max_tags` tags per report, the most frequent; the rest are merged as
// user_tag="other", so that a tag per step cannot multiply the series without bound.
std::vector<InspectorSample> UserTagSamples(const ncclwatch::v1::RankReport& report,
                                            size_t max_tags = 16);

// The labels NCCL Inspector puts on its four families that say which job and exporter they come
// from: version (Inspector's exporter version, whose label set we follow) and slurm_job_id (the
// job id). Every exporter adds them, so that Inspector's own dashboards, which filter on
// slurm_job_id, work unchanged.
inline constexpr char kInspectorVersion[] = "v5.1";
LabelPairs InspectorJobLabels(const std::string& job_id);

// The four families, with their help texts, in a fixed order: proto/exported_series.h.
using InspectorFamily = SeriesFamily;

// Label values as every exporter writes them.
std::string CommHashText(uint64_t comm_hash);  // "0x" + 16 hex digits
std::string GpuLabel(int cuda_device);         // "GPU<n>", "unknown" when negative
const std::string& OrUnknown(const std::string& value);

}  // namespace ncclwatch

#endif  // NCCLWATCH_PROTO_INSPECTOR_H_
