// NCCL Inspector's series for the ranks on this node, on the agent's own /metrics: a node-local
// Prometheus (or whoever scraped Inspector's textfiles) gets them without the aggregator.
//
// Each (job, communicator, rank) keeps its latest report that carried statistics (identity and
// statistics only, serialized); the series are computed from those at scrape time. A communicator's
// series go away with its final report, or when its rank has been silent for `stale_after`
// (Inspector, too, shows live communicators). The labels are the aggregator's: job_id, comm_hash,
// comm_name, rank, node, gpu, then Inspector's own.
//
// Bounded whatever the plugins send: only a report's identity and statistics are kept (not its
// samples), at most `max_stats_per_rank` statistics each, and at most `max_bytes` in all; a rank
// that would go beyond is not shown and is counted (ncclwatch_agent_inspector_series_capped_total),
// so a flood of huge reports cannot make one scrape hundreds of megabytes.
//
// Thread safety: all methods may be called from any thread.
#ifndef NCCLWATCH_AGENT_INSPECTOR_SERIES_H_
#define NCCLWATCH_AGENT_INSPECTOR_SERIES_H_

#include <string>
#include <string_view>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/prom_text.h"
#include "common/sync.h"
#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch::agent {

class NodeInspectorSeries {
 public:
  struct Limits {
    absl::Duration stale_after = absl::Minutes(5);
    int max_stats_per_rank = 512;
    size_t max_bytes = 16 << 20;
  };
  NodeInspectorSeries(std::string node, Limits limits);
  explicit NodeInspectorSeries(std::string node) : NodeInspectorSeries(std::move(node), Limits{}) {}

  // Keeps what Collect needs of a (validated) report.
  void Update(const ncclwatch::v1::RankReport& report);
  // Ranks (or statistics beyond max_stats_per_rank) left out by the limits so far.
  uint64_t capped() const;
  // Writes the series (for MetricRegistry::AddCollector).
  void Collect(PromTextWriter& writer);
  size_t ranks() const;

 private:
  using Key = std::tuple<std::string, uint64_t, int>;  // job id, communicator, rank
  struct Latest {
    std::string bytes;
    absl::Time updated;
  };

  const std::string node_;
  const Limits limits_;
  mutable ncclwatch::Mutex mu_;
  absl::flat_hash_map<Key, Latest> latest_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of every Latest::bytes
  uint64_t capped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_INSPECTOR_SERIES_H_
