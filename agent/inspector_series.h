// NCCL Inspector's series for the ranks on this node, on the agent's own /metrics: a node-local
// Prometheus (or whoever scraped Inspector's textfiles) gets them without the aggregator.
//
// Each (job, communicator, rank) keeps the series of its latest report that carried statistics,
// rendered (exposition text, one chunk per family), so that a scrape only strings them together
// and what is kept is exactly what a scrape returns. A communicator's
// series go away with its final report, or when its rank has been silent for `stale_after`
// (Inspector, too, shows live communicators). The labels are the aggregator's: job_id, comm_hash,
// comm_name, rank, node, gpu, then Inspector's own.
//
// Bounded whatever the plugins send, in the bytes a scrape returns: at most `max_stats_per_rank`
// statistics per rank, and at most `max_bytes` of rendered series in all (every label copied into
// every sample: a budget on the reports' own bytes let 16.5 MB of reports render as a 70 MB page);
// a rank that would go beyond, or with a label value longer than `max_label_bytes`, is not shown
// and is counted (ncclwatch_agent_inspector_series_capped_total).
//
// Thread safety: all methods may be called from any thread.
#ifndef NCCLWATCH_AGENT_INSPECTOR_SERIES_H_
#define NCCLWATCH_AGENT_INSPECTOR_SERIES_H_

#include <array>
#include <string>
#include <string_view>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/prom_text.h"
#include "common/sync.h"
#include "ncclwatch/v1/report.pb.h"
#include "proto/exported_series.h"
#include "proto/validate.h"

namespace ncclwatch::agent {

class NodeInspectorSeries {
 public:
  struct Limits {
    absl::Duration stale_after = absl::Minutes(5);
    int max_stats_per_rank = 512;
    size_t max_bytes = 16 << 20;               // rendered
    size_t max_label_bytes = kMaxLabelLength;  // what a report's own labels may be (validate.h)
  };
  NodeInspectorSeries(std::string node, Limits limits);
  explicit NodeInspectorSeries(std::string node) : NodeInspectorSeries(std::move(node), Limits{}) {}

  // Keeps what Collect needs of a (validated) report.
  void Update(const ncclwatch::v1::RankReport& report);
  // Ranks (or statistics beyond max_stats_per_rank) left out by the limits so far.
  uint64_t capped() const;
  // Bytes of rendered series kept: what Collect adds to a scrape.
  size_t bytes() const;
  // Writes the series (for MetricRegistry::AddCollector).
  void Collect(PromTextWriter& writer);
  size_t ranks() const;

 private:
  using Key = std::tuple<std::string, uint64_t, int>;  // job id, communicator, rank
  struct Latest {
    // The rank's samples of each Inspector family, as exposition lines.
    std::array<std::string, kInspectorFamilies.size()> text;
    size_t bytes = 0;  // of `text`
    absl::Time updated;
  };

  const std::string node_;
  const Limits limits_;
  mutable ncclwatch::Mutex mu_;
  absl::flat_hash_map<Key, Latest> latest_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of every Latest::text
  uint64_t capped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_INSPECTOR_SERIES_H_
