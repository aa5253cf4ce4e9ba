#include "aggregator/analysis/series_table.h"

#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/inspector.h"

namespace ncclwatch::aggregator {
namespace {

// A series' name and labels as one string, each part preceded by its length: unambiguous
// whatever the label values hold, and the only copy of them the table keeps (a series is decoded
// back when exported), which is most of its memory at thousands of ranks.
void AppendPart(std::string* key, const std::string& part) {
  absl::StrAppend(key, part.size(), ":", part);
}

std::string SeriesKey(const std::string& name, const LabelPairs& labels) {
  std::string key;
  AppendPart(&key, name);
  for (const auto& [k, v] : labels) {
    AppendPart(&key, k);
    AppendPart(&key, v);
  }
  return key;
}

// The next part of `key` from `*at`, advancing it.
std::string NextPart(const std::string& key, size_t* at) {
  const size_t colon = key.find(':', *at);
  const size_t length = std::stoul(key.substr(*at, colon - *at));
  std::string part = key.substr(colon + 1, length);
  *at = colon + 1 + length;
  return part;
}

SeriesPoint DecodeSeries(const std::string& key, double value, int64_t time_ms) {
  SeriesPoint p;
  size_t at = 0;
  p.name = NextPart(key, &at);
  while (at < key.size()) {
    std::string k = NextPart(key, &at);
    p.labels.emplace_back(std::move(k), NextPart(key, &at));
  }
  p.value = value;
  p.time_ms = time_ms;
  return p;
}

}  // namespace

void SeriesTable::Set(std::string name, LabelPairs labels, double value, int64_t sample_ns,
                      int64_t now_ns, std::vector<SeriesPoint>* points) {
  std::string key = SeriesKey(name, labels);
  auto it = series_.find(key);
  if (it == series_.end()) {
    if (series_.size() >= max_series_) {  // neither exported nor stored
      ++capped_;
      return;
    }
    it = series_.try_emplace(std::move(key)).first;
  }
  const int64_t sample_ms = sample_ns / 1'000'000;
  if (points != nullptr) points->push_back({std::move(name), std::move(labels), value, sample_ms});
  Entry& e = it->second;
  e.value = value;
  e.time_ms = sample_ms;
  e.updated_ns = now_ns;
}

void SeriesTable::AddReport(const LabelPairs& rank_labels, const ncclwatch::v1::RankReport& report,
                            int64_t now_ns, std::vector<SeriesPoint>* points) {
  const auto end_ns = static_cast<int64_t>(report.interval_end_unix_ns());
  const int64_t sample_ns = end_ns > 0 ? end_ns : now_ns;
  const LabelPairs inspector = InspectorJobLabels(report.identity().job_id());
  for (InspectorSample& sample : InspectorSamples(report)) {
    LabelPairs labels = rank_labels;
    labels.insert(labels.end(), inspector.begin(), inspector.end());
    labels.insert(labels.end(), std::make_move_iterator(sample.labels.begin()),
                  std::make_move_iterator(sample.labels.end()));
    Set(sample.name, std::move(labels), sample.value, sample_ns, now_ns, points);
  }
  for (InspectorSample& sample : UserTagSamples(report)) {
    LabelPairs labels = rank_labels;
    labels.insert(labels.end(), std::make_move_iterator(sample.labels.begin()),
                  std::make_move_iterator(sample.labels.end()));
    Set(sample.name, std::move(labels), sample.value, sample_ns, now_ns, points);
  }
  // What the plugin could not record (cumulative since the training process started): a pool,
  // ring or queue was full. Anything above zero means findings may miss operations.
  if (report.has_drops()) {
    const auto& d = report.drops();
    const std::pair<const char*, uint64_t> kinds[] = {
        {"events", d.events_dropped()},
        {"records", d.records_dropped()},
        {"reports", d.reports_dropped()},
        {"samples_capped", d.samples_capped()},
        {"channel_events_orphaned", d.channel_events_orphaned()}};
    for (const auto& [kind, value] : kinds) {
      LabelPairs labels = rank_labels;
      labels.emplace_back("kind", kind);
      Set("ncclwatch_plugin_drops_total", std::move(labels), static_cast<double>(value), sample_ns,
          now_ns, points);
    }
  }
}

void SeriesTable::Expire(int64_t now_ns) {
  if (now_ns - last_expire_ns_ < ttl_ns_ / 60) return;
  last_expire_ns_ = now_ns;
  for (auto it = series_.begin(); it != series_.end();) {
    if (now_ns - it->second.updated_ns > ttl_ns_) {
      series_.erase(it++);
    } else {
      ++it;
    }
  }
}

void SeriesTable::AppendTo(std::vector<SeriesPoint>* out) const {
  out->reserve(out->size() + series_.size());
  for (const auto& [key, e] : series_) out->push_back(DecodeSeries(key, e.value, e.time_ms));
}

}  // namespace ncclwatch::aggregator
