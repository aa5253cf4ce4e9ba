// The aggregator's write path, without gRPC: a batch from an agent is validated, stored durably
// and acknowledged, then analysed (in the order received), and the detection events it causes are
// logged, stored and published; time-driven detection (Tick) and the replay of stored batches at
// start-up go the same way.
//
// Thread safety: every method may be called concurrently (Push from gRPC threads, Tick from the
// ticker); the store and analyzer serialise what they must.
#ifndef NCCLWATCH_AGGREGATOR_INGEST_INGEST_H_
#define NCCLWATCH_AGGREGATOR_INGEST_INGEST_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "aggregator/analysis/analyzer.h"
#include "aggregator/ingest/event_bus.h"
#include "aggregator/store/store.h"
#include "common/metrics.h"
#include "common/sync.h"
#include "ncclwatch/v1/ingest.pb.h"
#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

class Ingest {
 public:
  // All three outlive the Ingest. Registers the aggregator's ingest metrics in `metrics`. The
  // detection series are stored at most every `history_step_ns` (Tick).
  Ingest(Store& store, Analyzer& analyzer, MetricRegistry& metrics,
         int64_t history_step_ns = 1'000'000'000);
  // Answers every push already taken, then stops the committer.
  ~Ingest();

  // Validates, stores (durably) and analyses a batch sent by `source` (PushSource; empty:
  // "agent:<agent_id>"), which is stored with it; returns once it is analysed. Errors:
  // InvalidArgument for a malformed batch (not retried by agents), Unavailable when the store
  // failed (retried). Invalid reports are left out and counted by reason; the ack says how many.
  absl::StatusOr<ncclwatch::v1::BatchAck> Push(const ncclwatch::v1::NodeBatch& batch,
                                               const std::string& source = "");
  // Push without waiting: `done` is called once with the answer, on this thread for a malformed
  // batch and otherwise on the committer thread as soon as the batch is durable (batches received
  // together share one sync of the log). Its analysis follows on the analysis thread, in the order
  // the batches were received; `batch` is held until then. When more than kMaxQueuedReports
  // reports wait for analysis, acknowledgements wait for room: a sender faster than the analysis
  // is slowed down rather than buffered without end. A crash before a batch is analysed loses
  // nothing: the start-up replay analyses it.
  using PushDone = std::function<void(absl::StatusOr<ncclwatch::v1::BatchAck>)>;
  // `wire`, when not empty, is the encoding `batch` was parsed from: stored as it came, not
  // encoded again (needed only during the call).
  void PushAsync(std::shared_ptr<const ncclwatch::v1::NodeBatch> batch, const std::string& source,
                 PushDone done, std::string_view wire = {});
  static constexpr int64_t kMaxQueuedReports = 1 << 17;  // ~1.5 s of a 16,384-rank job
  // Returns once every batch acknowledged before the call is analysed: a query that follows an
  // acknowledgement sees what the batch changed (the Query API waits so).
  void AwaitAnalysed();
  // Time-driven detection (hangs, silent ranks): call about four times a second. Also stores the
  // detection series (ncclwatch_*), at most once per history step, when they change and at least
  // once a minute.
  void Tick(int64_t now_ns);
  // At start-up: feeds the batches stored since `since_ns` to the analyzer again, so that the
  // detectors resume where they were and every acknowledged point is in the store (rewriting one
  // is harmless), then ticks the analyzer once at `now_ns` (start-up time). Events already
  // stored are not stored again: those stored since `events_since_ns` (at most `since_ns`; -1:
  // `since_ns`) are recognised, so that a finding that started before a shortened replay window
  // and is re-derived within it is not announced twice. Returns the batches replayed.
  absl::StatusOr<uint64_t> Replay(int64_t since_ns, int64_t now_ns, int64_t events_since_ns = -1);

  // Where every new detection event is published (the Watch streams subscribe here).
  EventBus& events() { return events_; }
  MetricRegistry& metrics() { return metrics_; }
  // What ingest and correlation have done since start (Query.GetStats).
  ncclwatch::v1::Stats Stats() const;
  // Since when (unix ns) every push has failed to be stored (a full disk, a failed sync); 0 while
  // the last one was stored (or none failed).
  int64_t FailingSinceNs() const { return failing_since_ns_.load(std::memory_order_relaxed); }

 private:
  using EventHandler = std::function<void(const ncclwatch::v1::Event&)>;
  // Logs, stores, counts and publishes one detection event.
  void Handle(const ncclwatch::v1::Event& event);
  // Analyses the reports of a stored batch from `source` received at `received_ns` and stores
  // their points; passes the events it causes to `handle` (live: Handle; replay: the events not
  // stored before).
  void Analyse(const ncclwatch::v1::NodeBatch& batch, const std::string& source,
               int64_t received_ns, const EventHandler& handle);
  void StoreDetectionSeries(int64_t now_ns);
  void StorePoints(const std::vector<SeriesPoint>& points);

  Store& store_;
  Analyzer& analyzer_;
  MetricRegistry& metrics_;
  EventBus events_;
  Counter* batches_stored_;
  Counter* batches_duplicate_;
  Counter* batches_invalid_;
  Counter* reports_ingested_;
  Counter* reports_rejected_;
  Counter* store_errors_;
  Counter* detection_snapshots_;
  Counter* batch_log_syncs_;
  Counter* detection_points_;
  // The last stored value and time of each detection series, by a 64-bit hash of its name and
  // labels (no identity string built for each of the ~20,000 series every second), for change
  // detection; a series last stored non-zero keeps its name and labels, to be stored as 0 once
  // when it goes away.
  struct Snapshot {
    double value = 0;
    int64_t time_ns = 0;
    uint64_t round = 0;  // the last snapshot that had the series
    std::unique_ptr<SeriesPoint> nonzero;
  };
  ncclwatch::Mutex snapshot_mu_;
  absl::flat_hash_map<uint64_t, Snapshot> snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
  uint64_t snapshot_round_ ABSL_GUARDED_BY(snapshot_mu_) = 0;
  int64_t last_snapshot_ns_ ABSL_GUARDED_BY(snapshot_mu_) = 0;
  const int64_t history_step_ns_;
  // Pushes are written to the log concurrently (on gRPC's threads), then made durable, analysed
  // and answered one at a time by the committer, in the order of their receive times, strictly
  // increasing: the order in which a replay reads them back, so that a restart rebuilds exactly
  // the state the live run had. The committer syncs once for every push written since its last
  // sync (group commit).
  struct Commit {
    // The push's, or a copy of its valid reports when some were not.
    std::shared_ptr<const ncclwatch::v1::NodeBatch> batch;
    std::string source;
    int64_t received_ns = 0;
    absl::StatusOr<bool> is_new;
    Store::PendingWrite pending;
    ncclwatch::v1::BatchAck ack;
    PushDone done;
  };
  void CommitLoop();
  // Hands a durable new batch to the analysis thread (waiting for room); `resumed_ns` > 0: the
  // store took pushes again at that time after failing them.
  void QueueAnalysis(Commit& c, int64_t resumed_ns);
  // Store::RecordListeningStart, logged and counted when it fails.
  void RecordListeningStart(int64_t time_ns);
  void AnalysisLoop();
  static constexpr absl::Duration kMinSyncInterval = absl::Milliseconds(5);
  ncclwatch::Mutex order_mu_;
  int64_t last_received_ns_ ABSL_GUARDED_BY(order_mu_) = 0;
  uint64_t next_ticket_ ABSL_GUARDED_BY(order_mu_) = 0;
  uint64_t turn_ ABSL_GUARDED_BY(order_mu_) = 0;
  int writing_ ABSL_GUARDED_BY(order_mu_) = 0;  // pushes with a ticket, not yet in commits_
  std::map<uint64_t, Commit> commits_ ABSL_GUARDED_BY(order_mu_);  // by ticket
  bool stopping_ ABSL_GUARDED_BY(order_mu_) = false;
  absl::Time last_sync_ = absl::InfinitePast();  // the committer's
  std::atomic<int64_t> failing_since_ns_{0};     // FailingSinceNs; written by the committer
  // Acknowledged batches waiting for the analysis thread, oldest first.
  struct Analysis {
    std::shared_ptr<const ncclwatch::v1::NodeBatch> batch;
    std::string source;
    int64_t received_ns = 0;
    int64_t resumed_ns = 0;
  };
  ncclwatch::Mutex analysis_mu_;
  std::deque<Analysis> analyses_ ABSL_GUARDED_BY(analysis_mu_);
  int64_t queued_reports_ ABSL_GUARDED_BY(analysis_mu_) = 0;
  uint64_t queued_total_ ABSL_GUARDED_BY(analysis_mu_) = 0;    // batches ever queued
  uint64_t analysed_total_ ABSL_GUARDED_BY(analysis_mu_) = 0;  // of them, analysed
  bool analysis_stopping_ ABSL_GUARDED_BY(analysis_mu_) = false;
  Gauge* analysis_queue_;
  Counter* analysis_waits_;
  // Last: started when everything above is ready.
  std::thread analyser_;
  std::thread committer_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_INGEST_INGEST_H_
