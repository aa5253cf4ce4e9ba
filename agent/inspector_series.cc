#include "agent/inspector_series.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/inspector.h"

namespace ncclwatch::agent {

NodeInspectorSeries::NodeInspectorSeries(std::string node, absl::Duration stale_after)
    : node_(std::move(node)), stale_after_(stale_after) {}

void NodeInspectorSeries::Update(const ncclwatch::v1::RankReport& report, std::string_view bytes) {
  const auto& id = report.identity();
  Key key{id.job_id(), id.comm_hash(), id.rank()};
  ncclwatch::MutexLock lock(&mu_);
  if (report.final()) {
    latest_.erase(key);
    return;
  }
  if (report.stats_size() == 0) {  // an idle interval: keep showing the last activity
    if (auto it = latest_.find(key); it != latest_.end()) it->second.updated = absl::Now();
    return;
  }
  Latest& latest = latest_[key];
  latest.bytes.assign(bytes.data(), bytes.size());
  latest.updated = absl::Now();
}

void NodeInspectorSeries::Collect(PromTextWriter& writer) {
  std::vector<std::string> reports;
  {
    ncclwatch::MutexLock lock(&mu_);
    const absl::Time cutoff = absl::Now() - stale_after_;
    absl::erase_if(latest_, [&](const auto& entry) { return entry.second.updated < cutoff; });
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
    for (InspectorSample& s : InspectorSamples(report)) {
      LabelPairs labels = whose;
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
