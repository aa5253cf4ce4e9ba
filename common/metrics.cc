#include "common/metrics.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ncclwatch {

MetricRegistry::Series* MetricRegistry::FindOrAdd(std::string_view name, std::string_view help,
                                                  std::string_view type, const LabelPairs& labels) {
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
  ncclwatch::MutexLock lock(&mu_);
  Series* s = FindOrAdd(name, help, "counter", labels);
  if (!s->counter) s->counter = std::make_unique<Counter>();
  return s->counter.get();
}

Gauge* MetricRegistry::GetGauge(std::string_view name, std::string_view help,
                                const LabelPairs& labels) {
  ncclwatch::MutexLock lock(&mu_);
  Series* s = FindOrAdd(name, help, "gauge", labels);
  if (!s->gauge) s->gauge = std::make_unique<Gauge>();
  return s->gauge.get();
}

void MetricRegistry::AddCollector(std::function<void(PromTextWriter&)> collector) {
  ncclwatch::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

namespace {

// _bucket{le=...} (cumulative), _sum and _count, as Prometheus expects of a histogram.
void RenderHistogram(PromTextWriter& writer, const std::string& name, const LabelPairs& labels,
                     const Histogram& h) {
  const std::vector<uint64_t> counts = h.counts();
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    LabelPairs with_le = labels;
    with_le.emplace_back("le", i < h.bounds().size() ? absl::StrCat(h.bounds()[i]) : "+Inf");
    writer.Sample(name + "_bucket", with_le, static_cast<double>(cumulative));
  }
  writer.Sample(name + "_sum", labels, h.sum());
  writer.Sample(name + "_count", labels, static_cast<double>(cumulative));
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  const size_t bucket =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.Add(v);
}

std::vector<uint64_t> Histogram::counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

Histogram* MetricRegistry::GetHistogram(std::string_view name, std::string_view help,
                                        std::vector<double> bounds, const LabelPairs& labels) {
  ncclwatch::MutexLock lock(&mu_);
  Series* s = FindOrAdd(name, help, "histogram", labels);
  if (!s->histogram) s->histogram = std::make_unique<Histogram>(std::move(bounds));
  return s->histogram.get();
}

std::string MetricRegistry::Render() const {
  PromTextWriter writer;
  ncclwatch::MutexLock lock(&mu_);
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
      if (s->histogram) {
        RenderHistogram(writer, name, s->labels, *s->histogram);
        continue;
      }
      double v = s->counter ? static_cast<double>(s->counter->value()) : s->gauge->value();
      writer.Sample(name, s->labels, v);
    }
  }
  for (const auto& collector : collectors_) collector(writer);
  return writer.Take();
}

}  // namespace ncclwatch
