// NCCL Inspector's series for the ranks on this node, on the agent's own /metrics: a node-local
// Prometheus (or whoever scraped Inspector's textfiles) gets them without the aggregator.
//
// Each (job, communicator, rank) keeps the bytes of its latest report that carried statistics;
// the series are computed from those at scrape time, so the per-report cost on the agent's
// ingest path is one map lookup and a copy. A communicator's series go away with its final report,
// or when its rank has been silent for `stale_after` (Inspector, too, shows live communicators).
// The labels are the aggregator's: job_id, comm_hash, comm_name, rank, node, gpu, then
// Inspector's own.
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
  NodeInspectorSeries(std::string node, absl::Duration stale_after = absl::Minutes(5));

  // `report` decoded, `bytes` its serialized form (kept, not the decoded copy).
  void Update(const ncclwatch::v1::RankReport& report, std::string_view bytes);
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
  const absl::Duration stale_after_;
  mutable ncclwatch::Mutex mu_;
  absl::flat_hash_map<Key, Latest> latest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_INSPECTOR_SERIES_H_
