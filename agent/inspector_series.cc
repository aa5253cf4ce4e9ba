#include "agent/inspector_series.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/inspector.h"

namespace ncclwatch::agent {

NodeInspectorSeries::NodeInspectorSeries(std::string node, Limits limits)
    : node_(std::move(node)), limits_(limits) {}

void NodeInspectorSeries::Update(const ncclwatch::v1::RankReport& report) {
  const auto& id = report.identity();
  Key key{id.job_id(), id.comm_hash(), id.rank()};
  Latest fresh;
  bool trimmed = false;
  bool label_too_long = false;
  if (!report.final() && report.stats_size() > 0) {
    // Rendered now, outside the lock: the (bounded) statistics only.
    ncclwatch::v1::RankReport slim;
    *slim.mutable_identity() = id;
    const int n = std::min(report.stats_size(), limits_.max_stats_per_rank);
    for (int i = 0; i < n; ++i) *slim.add_stats() = report.stats(i);
    trimmed = n < report.stats_size();
    const LabelPairs whose = {{"job_id", id.job_id()},
                              {"comm_hash", CommHashText(id.comm_hash())},
                              {"comm_name", OrUnknown(id.comm_name())},
                              {"rank", absl::StrCat(id.rank())},
                              {"node", node_},
                              {"gpu", GpuLabel(id.cuda_device())}};
    const LabelPairs inspector = InspectorJobLabels(id.job_id());
    auto too_long = [this](const LabelPairs& labels) {
      return std::any_of(labels.begin(), labels.end(), [this](const auto& l) {
        return l.second.size() > limits_.max_label_bytes;
      });
    };
    label_too_long = too_long(whose) || too_long(inspector);
    std::array<PromTextWriter, kInspectorFamilies.size()> writers;
    for (InspectorSample& s : InspectorSamples(slim)) {
      if (label_too_long || too_long(s.labels)) {
        label_too_long = true;
        break;
      }
      size_t f = 0;
      while (f < kInspectorFamilies.size() &&
             std::string_view(kInspectorFamilies[f].name) != s.name) {
        ++f;
      }
      if (f == kInspectorFamilies.size()) continue;  // not an Inspector family
      LabelPairs labels = whose;
      labels.insert(labels.end(), inspector.begin(), inspector.end());
      labels.insert(labels.end(), s.labels.begin(), s.labels.end());
      writers[f].Sample(s.name, labels, s.value);
    }
    for (size_t f = 0; f < writers.size(); ++f) {
      fresh.text[f] = writers[f].Take();
      fresh.bytes += fresh.text[f].size();
    }
  }
  ncclwatch::MutexLock lock(&mu_);
  auto it = latest_.find(key);
  if (report.final()) {
    if (it != latest_.end()) {
      bytes_ -= it->second.bytes;
      latest_.erase(it);
    }
    return;
  }
  if (report.stats_size() == 0) {  // an idle interval: keep showing the last activity
    if (it != latest_.end()) it->second.updated = absl::Now();
    return;
  }
  const size_t old_size = it == latest_.end() ? 0 : it->second.bytes;
  if (label_too_long || bytes_ - old_size + fresh.bytes > limits_.max_bytes) {
    ++capped_;  // beyond the budget: this rank keeps what it had (or is not shown)
    return;
  }
  if (trimmed) ++capped_;
  if (it == latest_.end()) it = latest_.try_emplace(key).first;
  bytes_ = bytes_ - old_size + fresh.bytes;
  fresh.updated = absl::Now();
  it->second = std::move(fresh);
}

uint64_t NodeInspectorSeries::capped() const {
  ncclwatch::MutexLock lock(&mu_);
  return capped_;
}

size_t NodeInspectorSeries::bytes() const {
  ncclwatch::MutexLock lock(&mu_);
  return bytes_;
}

void NodeInspectorSeries::Collect(PromTextWriter& writer) {
  ncclwatch::MutexLock lock(&mu_);
  const absl::Time cutoff = absl::Now() - limits_.stale_after;
  for (auto it = latest_.begin(); it != latest_.end();) {
    if (it->second.updated >= cutoff) {
      ++it;
      continue;
    }
    bytes_ -= it->second.bytes;
    latest_.erase(it++);
  }
  // Family by family, as the exposition format wants them grouped: appended as rendered, the
  // page grows by exactly what is kept (at most max_bytes) and nothing else is built.
  for (size_t f = 0; f < kInspectorFamilies.size(); ++f) {
    bool any = false;
    for (const auto& [key, latest] : latest_) {
      if (latest.text[f].empty()) continue;
      if (!any) {
        writer.Family(kInspectorFamilies[f].name, kInspectorFamilies[f].help, "gauge");
        any = true;
      }
      writer.Append(latest.text[f]);
    }
  }
}

size_t NodeInspectorSeries::ranks() const {
  ncclwatch::MutexLock lock(&mu_);
  return latest_.size();
}

}  // namespace ncclwatch::agent
