// The aggregator's in-memory view of every job: which ranks of which communicators live on which
// node and GPU, the latest per-interval statistics of each rank (exported as NCCL
// Inspector-compatible series), and the detectors fed by the correlator.
//
// Thread safety: all public methods may be called concurrently; one mutex serialises them (the
// work per report is small and bounded).
#ifndef NCCLWATCH_AGGREGATOR_ANALYZER_H_
#define NCCLWATCH_AGGREGATOR_ANALYZER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/sync.h"
#include "aggregator/correlator.h"
#include "aggregator/degraded.h"
#include "aggregator/hang.h"
#include "aggregator/store.h"
#include "aggregator/straggler.h"
#include "common/prom_text.h"
#include "ncclwatch/v1/query.pb.h"
#include "ncclwatch/v1/report.pb.h"
#include "proto/inspector.h"

namespace ncclwatch::aggregator {

struct AnalyzerOptions {
  CorrelatorOptions correlator;
  StragglerOptions straggler;
  HangOptions hang;
  DegradedOptions degraded;
  int64_t series_ttl_ns = 600'000'000'000;  // forget a rank's series after 10 min of silence
  // Cardinality caps: a report of a job (or communicator) beyond them is not analysed, and a
  // series beyond them is not exported; each is counted. They bound memory whatever the input.
  size_t max_jobs = 4096;
  size_t max_comms_per_job = 16384;
  size_t max_series = 2'000'000;
};

// One exported sample; `timestamp_ms` is when the aggregator last updated it.
struct ExportedSample {
  std::string name;
  LabelPairs labels;
  double value = 0;
  int64_t timestamp_ms = 0;
};

class Analyzer {
 public:
  explicit Analyzer(AnalyzerOptions options = {});

  // Takes one validated report received at `now_ns` (aggregator clock). Returns the detection
  // events it caused (e.g. a rank flagged as a straggler); appends the series points it set to
  // `points` when given (what the store keeps).
  std::vector<ncclwatch::v1::Event> Ingest(const ncclwatch::v1::RankReport& report,
                                           int64_t now_ns,
                                           std::vector<SeriesPoint>* points = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Re-evaluates hangs and silent ranks, expires incomplete collective groups and forgotten
  // series. Returns the detection events it caused. Call about four times a second.
  std::vector<ncclwatch::v1::Event> Tick(int64_t now_ns) ABSL_LOCKS_EXCLUDED(mu_);

  // Every exported series, current values; with `detection_only`, just the ncclwatch_* families
  // computed from the detectors (not the per-report statistics).
  std::vector<ExportedSample> Series(bool detection_only = false) const ABSL_LOCKS_EXCLUDED(mu_);
  // Ranks flagged slow right now; `job_id` empty means every job.
  std::vector<ncclwatch::v1::StragglerInfo> Stragglers(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Hung collectives and silent ranks right now; `job_id` empty means every job.
  ncclwatch::v1::ListHangsResponse Hangs(const std::string& job_id, int64_t now_ns) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Degraded communicators and network suspects right now; `job_id` empty means every job.
  ncclwatch::v1::ListDegradedResponse Degraded(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Communicators (for `job_id`, or all) with their ranks and health now, by job then name.
  std::vector<ncclwatch::v1::CommInfo> Comms(const std::string& job_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Jobs, summarised from their communicators.
  std::vector<ncclwatch::v1::JobInfo> Jobs() const ABSL_LOCKS_EXCLUDED(mu_);

  struct Counters {
    uint64_t reports = 0;
    uint64_t groups_completed = 0;
    uint64_t groups_expired = 0;
    uint64_t open_groups = 0;
    uint64_t capped_jobs = 0;    // reports not analysed: their job is beyond max_jobs
    uint64_t capped_comms = 0;   // ... their communicator is beyond max_comms_per_job
    uint64_t capped_series = 0;  // series updates refused: beyond max_series
  };
  Counters counters() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct RankMeta {
    std::string node;
    int cuda_device = -1;
    std::string gpu_uuid;
    // Where the agent found the GPU allocated (kubelet pod-resources); empty outside Kubernetes.
    std::string pod;
    std::string pod_namespace;
    std::string container;
    int64_t last_seen_ns = 0;
  };
  struct CommMeta {
    std::string comm_name;
    int nranks = 0;
    int n_nodes = 0;
    std::vector<RankMeta> ranks;
    std::map<int, int64_t> flagged_since_ns;  // rank -> when flagged
    std::set<std::string> slow_nodes;         // nodes all of whose ranks are flagged
  };
  struct SeriesEntry {
    ExportedSample sample;
    CommKey comm;
    int64_t updated_ns = 0;
  };

  void UpdateStatsSeries(const CommKey& key, const CommMeta& meta,
                         const ncclwatch::v1::RankReport& report, int64_t now_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets a series to `value` at `sample_ns` (its timestamp); `now_ns` is when it was updated.
  void SetSeries(const CommKey& comm, std::string name, LabelPairs labels, double value,
                 int64_t sample_ns, int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LabelPairs RankLabels(const CommKey& key, const CommMeta& meta, int rank) const;
  ncclwatch::v1::Event StragglerEvent(const CommKey& key, CommMeta& meta, const FlagChange& change,
                                      int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Node-level verdicts after the rank flags of `key` changed.
  void UpdateSlowNodes(const CommKey& key, CommMeta& meta, int64_t now_ns,
                       std::vector<ncclwatch::v1::Event>* events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ncclwatch::v1::StragglerInfo MakeStragglerInfo(const CommKey& key, const CommMeta& meta,
                                                 const RankScore& score) const;
  ncclwatch::v1::HangInfo MakeHangInfo(const HangView& hang, int64_t now_ns) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ncclwatch::v1::SilentRankInfo MakeSilentInfo(const SilentView& silent) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ncclwatch::v1::Event HangEvent(const HangChange& change, int64_t now_ns) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ncclwatch::v1::DegradedCommInfo MakeDegradedInfo(const DegradedView& view) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ncclwatch::v1::Event DegradedEvent(const DegradedChange& change, int64_t now_ns) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillRank(const CommKey& key, int rank, ncclwatch::v1::RankRef* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A communicator's findings now, counted (for jobs) and named (CommInfo.health).
  struct CommHealth {
    uint32_t stragglers = 0;
    uint32_t silent_ranks = 0;
    bool hung = false;
    bool degraded = false;
  };
  ncclwatch::v1::CommInfo MakeCommInfo(const CommKey& key, const CommMeta& meta,
                                       CommHealth* health) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AnalyzerOptions options_;
  mutable ncclwatch::Mutex mu_;
  Correlator correlator_ ABSL_GUARDED_BY(mu_);
  StragglerDetector stragglers_ ABSL_GUARDED_BY(mu_);
  HangDetector hangs_ ABSL_GUARDED_BY(mu_);
  DegradedDetector degraded_ ABSL_GUARDED_BY(mu_);
  std::map<CommKey, CommMeta> comms_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, SeriesEntry> series_ ABSL_GUARDED_BY(mu_);
  std::vector<SeriesPoint>* points_out_ ABSL_GUARDED_BY(mu_) = nullptr;  // during Ingest
  uint64_t reports_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t clock_ns_ ABSL_GUARDED_BY(mu_) = 0;  // the latest now of Ingest or Tick
  // comms_ counted by job: the caps' checks stay O(log n) when a flood of new job ids arrives.
  std::map<std::string, size_t> comms_per_job_ ABSL_GUARDED_BY(mu_);
  uint64_t capped_jobs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t capped_comms_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t capped_series_ ABSL_GUARDED_BY(mu_) = 0;
};

// HELP text of every exported family ("" for an unknown name).
std::string_view ExportedSeriesHelp(std::string_view name);

// The job a detection event is about, whatever its kind ("" if it names none).
const std::string& EventJobId(const ncclwatch::v1::Event& event);

// "AllReduce #12", or "Send/Recv" for a point-to-point hang (no seqNumber).
std::string HangOpText(const ncclwatch::v1::HangInfo& hang);

// Label values shared with every exporter (proto/inspector.h).
using ::ncclwatch::CommHashText;
using ::ncclwatch::GpuLabel;

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYZER_H_
