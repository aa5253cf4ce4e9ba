#include "proto/inspector.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ncclwatch {

absl::InlinedVector<InspectorStat, 8> InspectorStats(const ncclwatch::v1::RankReport& report) {
  // (p2p, op, message size, algo_proto): p2p stats arrive per peer, Inspector's are not. A
  // report has a handful of these: merged in a small vector of views into the report (this runs
  // for every report the aggregator and the agents take), then ordered as a map would be.
  using Key = std::tuple<bool, std::string_view, std::string_view, std::string_view>;
  struct Merged {
    Key key;
    uint64_t count = 0;
    double sum_us = 0;
    double bus_log_sum = 0;
    uint64_t bw_samples = 0;
  };
  absl::InlinedVector<Merged, 8> merged;
  for (const auto& s : report.stats()) {
    const Key key{s.p2p(), s.op(), s.message_size(),
                  s.p2p() ? std::string_view() : std::string_view(s.algo_proto())};
    auto it =
        std::find_if(merged.begin(), merged.end(), [&](const Merged& m) { return m.key == key; });
    Merged& m = it != merged.end() ? *it : merged.emplace_back(Merged{key});
    m.count += s.count();
    m.sum_us += s.exec_time_us_sum();
    m.bus_log_sum += s.bus_bw_gbs_log_sum();
    m.bw_samples += s.bw_samples();
  }
  std::sort(merged.begin(), merged.end(),
            [](const Merged& a, const Merged& b) { return a.key < b.key; });
  absl::InlinedVector<InspectorStat, 8> out;
  for (const Merged& m : merged) {
    if (m.count == 0) continue;
    InspectorStat& s = out.emplace_back();
    std::tie(s.p2p, s.op, s.message_size, s.algo_proto) = m.key;
    s.mean_us = m.sum_us / static_cast<double>(m.count);
    s.has_bw = m.bw_samples > 0;
    if (s.has_bw) s.bus_bw_gbs = std::exp(m.bus_log_sum / static_cast<double>(m.bw_samples));
  }
  return out;
}

const char* InspectorStat::time_family() const {
  return p2p ? "nccl_p2p_exec_time_microseconds" : "nccl_collective_exec_time_microseconds";
}

const char* InspectorStat::bw_family() const {
  return p2p ? "nccl_p2p_bus_bandwidth_gbs" : "nccl_bus_bandwidth_gbs";
}

LabelPairs InspectorStatLabels(const InspectorStat& stat, const ncclwatch::v1::RankIdentity& id) {
  LabelPairs labels = {{"n_nodes", absl::StrCat(id.n_nodes())},
                       {"nranks", absl::StrCat(id.nranks())},
                       {stat.p2p ? "p2p_operation" : "collective", std::string(stat.op)},
                       {"message_size", std::string(stat.message_size)}};
  if (!stat.p2p) labels.emplace_back("algo_proto", OrUnknown(std::string(stat.algo_proto)));
  return labels;
}

uint64_t InspectorStatKey(const InspectorStat& stat, const ncclwatch::v1::RankIdentity& id) {
  // Exactly what InspectorStatLabels reads, with the algorithm as it is labelled.
  const std::string_view algo_proto = stat.p2p                  ? std::string_view()
                                      : stat.algo_proto.empty() ? std::string_view("unknown")
                                                                : stat.algo_proto;
  return absl::HashOf(stat.p2p, stat.op, stat.message_size, algo_proto, id.n_nodes(), id.nranks());
}

std::vector<InspectorSample> InspectorSamples(const ncclwatch::v1::RankReport& report) {
  const auto& id = report.identity();
  std::vector<InspectorSample> out;
  const auto stats = InspectorStats(report);
  out.reserve(stats.size() * 2);
  for (const InspectorStat& s : stats) {
    LabelPairs labels = InspectorStatLabels(s, id);
    out.push_back({s.time_family(), labels, s.mean_us});
    if (s.has_bw) out.push_back({s.bw_family(), std::move(labels), s.bus_bw_gbs});
  }
  return out;
}

LabelPairs InspectorJobLabels(const std::string& job_id) {
  return {{"version", kInspectorVersion}, {"slurm_job_id", OrUnknown(job_id)}};
}

std::vector<InspectorSample> UserTagSamples(const ncclwatch::v1::RankReport& report,
                                            size_t max_tags) {
  struct Sums {
    uint64_t count = 0;
    double sum_us = 0;
  };
  std::map<uint64_t, uint64_t> per_tag;  // operations per tag: which tags get their own label
  for (const auto& s : report.stats()) {
    if (s.user_tag() != 0) per_tag[s.user_tag()] += s.count();
  }
  if (per_tag.empty()) return {};
  std::vector<std::pair<uint64_t, uint64_t>> by_count(per_tag.begin(), per_tag.end());
  std::stable_sort(by_count.begin(), by_count.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::set<uint64_t> labelled;
  for (size_t i = 0; i < by_count.size() && i < max_tags; ++i) labelled.insert(by_count[i].first);
  // (p2p, op, tag label) -> sums.
  std::map<std::tuple<bool, std::string, std::string>, Sums> merged;
  for (const auto& s : report.stats()) {
    if (s.user_tag() == 0 || s.count() == 0) continue;
    std::string tag = !labelled.contains(s.user_tag()) ? "other"
                      : (s.user_tag() >> 63) != 0      ? absl::StrFormat("0x%x", s.user_tag())
                                                       : absl::StrCat(s.user_tag());
    Sums& m = merged[{s.p2p(), s.op(), std::move(tag)}];
    m.count += s.count();
    m.sum_us += s.exec_time_us_sum();
  }
  std::vector<InspectorSample> out;
  for (const auto& [key, m] : merged) {
    const auto& [p2p, op, tag] = key;
    if (m.count == 0) continue;
    out.push_back({"ncclwatch_tagged_exec_time_microseconds",
                   {{p2p ? "p2p_operation" : "collective", op}, {"user_tag", tag}},
                   m.sum_us / static_cast<double>(m.count)});
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
