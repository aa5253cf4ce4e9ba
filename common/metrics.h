// A small registry for a daemon's own health metrics (counters, gauges and histograms, optionally
// labelled), rendered in Prometheus text format on /metrics. Increments are lock-free;
// registration takes a mutex and may happen at any time (e.g. the first time a rejection reason is
// seen).
#ifndef NCCLWATCH_COMMON_METRICS_H_
#define NCCLWATCH_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/prom_text.h"
#include "common/sync.h"

namespace ncclwatch {

class Counter {
 public:
  void Increment(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d) {
    double cur = value_.load(std::memory_order_relaxed);
    while (!value_.compare_exchange_weak(cur, cur + d, std::memory_order_relaxed)) {
    }
  }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Cumulative histogram over fixed upper bounds (seconds, bytes, ...), Prometheus style.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Counts per bucket (not cumulative), the last one for +Inf; and the sum of observations.
  std::vector<uint64_t> counts() const;
  double sum() const { return sum_.value(); }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  Gauge sum_;
};

class MetricRegistry {
 public:
  // Returns the counter for (name, labels), creating it on first use. Same name => same help.
  // The pointer stays valid for the registry's lifetime.
  Counter* GetCounter(std::string_view name, std::string_view help, const LabelPairs& labels = {});
  Gauge* GetGauge(std::string_view name, std::string_view help, const LabelPairs& labels = {});
  // `bounds` are the buckets' upper bounds, ascending; they count on first registration only.
  Histogram* GetHistogram(std::string_view name, std::string_view help, std::vector<double> bounds,
                          const LabelPairs& labels = {});
  // Adds text produced at render time (e.g. gauges read from another component's state).
  void AddCollector(std::function<void(PromTextWriter&)> collector);

  std::string Render() const;

 private:
  struct Series {
    std::string name;
    std::string help;
    std::string type;
    LabelPairs labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  Series* FindOrAdd(std::string_view name, std::string_view help, std::string_view type,
                    const LabelPairs& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable ncclwatch::Mutex mu_;
  std::deque<Series> series_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void(PromTextWriter&)>> collectors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_METRICS_H_
