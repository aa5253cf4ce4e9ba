#include "common/metrics.h"

#include <map>
#include <vector>

namespace ncclwatch {

MetricRegistry::Series* MetricRegistry::FindOrAdd(std::string_view name, std::string_view help,
                                                  std::string_view type,
                                                  const LabelPairs& labels) {
  for (Series& s : series_) {
    if (s.name == name && s.labels == labels) return &s;
  }
  Series& s = series_.emplace_back();
  s.name = std::string(name);
  s.help = std::string(help);
  s.type = std::string(type);
  s.labels = labels;
  return &s;
}

Counter* MetricRegistry::GetCounter(std::string_view name, std::string_view help,
                                    const LabelPairs& labels) {
  absl::MutexLock lock(&mu_);
  Series* s = FindOrAdd(name, help, "counter", labels);
  if (!s->counter) s->counter = std::make_unique<Counter>();
  return s->counter.get();
}

Gauge* MetricRegistry::GetGauge(std::string_view name, std::string_view help,
                                const LabelPairs& labels) {
  absl::MutexLock lock(&mu_);
  Series* s = FindOrAdd(name, help, "gauge", labels);
  if (!s->gauge) s->gauge = std::make_unique<Gauge>();
  return s->gauge.get();
}

void MetricRegistry::AddCollector(std::function<void(PromTextWriter&)> collector) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricRegistry::Render() const {
  PromTextWriter writer;
  absl::MutexLock lock(&mu_);
  // Group series of one family together, families in first-registration order.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Series*>> families;
  for (const Series& s : series_) {
    auto [it, inserted] = families.try_emplace(s.name);
    if (inserted) order.push_back(s.name);
    it->second.push_back(&s);
  }
  for (const std::string& name : order) {
    const auto& members = families[name];
    writer.Family(name, members.front()->help, members.front()->type);
    for (const Series* s : members) {
      double v = s->counter ? static_cast<double>(s->counter->value()) : s->gauge->value();
      writer.Sample(name, s->labels, v);
    }
  }
  for (const auto& collector : collectors_) collector(writer);
  return writer.Take();
}

}  // namespace ncclwatch
