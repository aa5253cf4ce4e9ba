#include "agent/inspector_series.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/inspector.h"

namespace ncclwatch::agent {

NodeInspectorSeries::NodeInspectorSeries(std::string node, Limits limits)
    : node_(std::move(node)), limits_(limits) {}

void NodeInspectorSeries::Update(const ncclwatch::v1::RankReport& report) {
  const auto& id = report.identity();
  Key key{id.job_id(), id.comm_hash(), id.rank()};
  std::string kept;
  bool trimmed = false;
  if (!report.final() && report.stats_size() > 0) {
    // What Collect needs, and no more: the identity and the (bounded) statistics.
    ncclwatch::v1::RankReport slim;
    *slim.mutable_identity() = id;
    const int n = std::min(report.stats_size(), limits_.max_stats_per_rank);
    for (int i = 0; i < n; ++i) *slim.add_stats() = report.stats(i);
    trimmed = n < report.stats_size();
    kept = slim.SerializeAsString();
  }
  ncclwatch::MutexLock lock(&mu_);
  auto it = latest_.find(key);
  if (report.final()) {
    if (it != latest_.end()) {
      bytes_ -= it->second.bytes.size();
      latest_.erase(it);
    }
    return;
  }
  if (report.stats_size() == 0) {  // an idle interval: keep showing the last activity
    if (it != latest_.end()) it->second.updated = absl::Now();
    return;
  }
  const size_t old_size = it == latest_.end() ? 0 : it->second.bytes.size();
  if (bytes_ - old_size + kept.size() > limits_.max_bytes) {
    ++capped_;  // beyond the budget: this rank keeps what it had (or is not shown)
    return;
  }
  if (trimmed) ++capped_;
  if (it == latest_.end()) it = latest_.try_emplace(key).first;
  bytes_ = bytes_ - old_size + kept.size();
  it->second.bytes = std::move(kept);
  it->second.updated = absl::Now();
}

uint64_t NodeInspectorSeries::capped() const {
  ncclwatch::MutexLock lock(&mu_);
  return capped_;
}

void NodeInspectorSeries::Collect(PromTextWriter& writer) {
  std::vector<std::string> reports;
  {
    ncclwatch::MutexLock lock(&mu_);
    const absl::Time cutoff = absl::Now() - limits_.stale_after;
    for (auto it = latest_.begin(); it != latest_.end();) {
      if (it->second.updated >= cutoff) {
        ++it;
        continue;
      }
      bytes_ -= it->second.bytes.size();
      latest_.erase(it++);
    }
    reports.reserve(latest_.size());
    for (const auto& [key, latest] : latest_) reports.push_back(latest.bytes);
  }
  // Family by family, as the exposition format wants them grouped.
  std::map<std::string, std::vector<std::pair<LabelPairs, double>>> families;
  ncclwatch::v1::RankReport report;
  for (const std::string& bytes : reports) {
    if (!report.ParseFromString(bytes)) continue;  // validated on receipt; cannot happen
    const auto& id = report.identity();
    const LabelPairs whose = {{"job_id", id.job_id()},
                              {"comm_hash", CommHashText(id.comm_hash())},
                              {"comm_name", OrUnknown(id.comm_name())},
                              {"rank", absl::StrCat(id.rank())},
                              {"node", node_},
                              {"gpu", GpuLabel(id.cuda_device())}};
    const LabelPairs inspector = InspectorJobLabels(id.job_id());
    for (InspectorSample& s : InspectorSamples(report)) {
      LabelPairs labels = whose;
      labels.insert(labels.end(), inspector.begin(), inspector.end());
      labels.insert(labels.end(), s.labels.begin(), s.labels.end());
      families[s.name].emplace_back(std::move(labels), s.value);
    }
  }
  for (const InspectorFamily& family : kInspectorFamilies) {
    auto it = families.find(family.name);
    if (it == families.end()) continue;
    writer.Family(family.name, family.help, "gauge");
    for (const auto& [labels, value] : it->second) writer.Sample(family.name, labels, value);
  }
}

size_t NodeInspectorSeries::ranks() const {
  ncclwatch::MutexLock lock(&mu_);
  return latest_.size();
}

}  // namespace ncclwatch::agent
