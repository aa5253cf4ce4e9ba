#include "proto/inspector.h"

#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ncclwatch {

std::vector<InspectorSample> InspectorSamples(const ncclwatch::v1::RankReport& report) {
  struct Merged {
    uint64_t count = 0;
    double sum_us = 0;
    double bus_log_sum = 0;
    uint64_t bw_samples = 0;
  };
  // (p2p, op, message size, algo_proto): p2p stats arrive per peer, Inspector's are not.
  std::map<std::tuple<bool, std::string, std::string, std::string>, Merged> merged;
  for (const auto& s : report.stats()) {
    Merged& m = merged[{s.p2p(), s.op(), s.message_size(), s.p2p() ? "" : s.algo_proto()}];
    m.count += s.count();
    m.sum_us += s.exec_time_us_sum();
    m.bus_log_sum += s.bus_bw_gbs_log_sum();
    m.bw_samples += s.bw_samples();
  }
  const auto& id = report.identity();
  std::vector<InspectorSample> out;
  for (const auto& [key, m] : merged) {
    const auto& [p2p, op, size, algo_proto] = key;
    if (m.count == 0) continue;
    LabelPairs labels = {{"n_nodes", absl::StrCat(id.n_nodes())},
                         {"nranks", absl::StrCat(id.nranks())},
                         {p2p ? "p2p_operation" : "collective", op},
                         {"message_size", size}};
    if (!p2p) labels.emplace_back("algo_proto", OrUnknown(algo_proto));
    out.push_back(
        {p2p ? "nccl_p2p_exec_time_microseconds" : "nccl_collective_exec_time_microseconds", labels,
         m.sum_us / static_cast<double>(m.count)});
    if (m.bw_samples > 0) {
      out.push_back({p2p ? "nccl_p2p_bus_bandwidth_gbs" : "nccl_bus_bandwidth_gbs",
                     std::move(labels),
                     std::exp(m.bus_log_sum / static_cast<double>(m.bw_samples))});
    }
  }
  return out;
}

std::string CommHashText(uint64_t comm_hash) { return absl::StrFormat("0x%016x", comm_hash); }

std::string GpuLabel(int cuda_device) {
  return cuda_device < 0 ? "unknown" : absl::StrCat("GPU", cuda_device);
}

const std::string& OrUnknown(const std::string& value) {
  static const std::string kUnknown = "unknown";
  return value.empty() ? kUnknown : value;
}

}  // namespace ncclwatch
