// The aggregator's gRPC services: Ingest (agents push batches) and Query (ListStragglers,
// GetStats and a server-streaming Watch of detection events). Thin adapters over AggregatorCore,
// the plain handler that tests call directly.
#ifndef NCCLWATCH_AGGREGATOR_SERVICES_H_
#define NCCLWATCH_AGGREGATOR_SERVICES_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/sync.h"
#include "aggregator/analyzer.h"
#include "aggregator/store.h"
#include "common/metrics.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/query.grpc.pb.h"
#include "proto/security.h"

namespace ncclwatch::aggregator {

// Receives every detection event as it happens.
class EventWatcher {
 public:
  virtual ~EventWatcher() = default;
  virtual void Deliver(const ncclwatch::v1::Event& event) = 0;
};

// Ingest path and query answers, without gRPC.
class AggregatorCore {
 public:
  AggregatorCore(Store& store, Analyzer& analyzer, MetricRegistry& metrics);
  MetricRegistry& metrics() { return metrics_; }

  // Validates, stores (durably) and analyses a batch. Errors: InvalidArgument for a malformed
  // batch (not retried by agents), Unavailable when the store failed (retried).
  absl::StatusOr<ncclwatch::v1::BatchAck> Push(const ncclwatch::v1::NodeBatch& batch);
  // Time-driven detection (hangs, silent ranks): call about four times a second. Also stores the
  // detection series (ncclwatch_*), at most once a second, when they change and at least once a
  // minute.
  void Tick(int64_t now_ns);
  // At start-up: feeds the batches stored since `since_ns` to the analyzer again, so that the
  // detectors resume where they were and every acknowledged point is in the store (rewriting one
  // is harmless). Events already stored are not stored again. Returns the batches replayed.
  absl::StatusOr<uint64_t> Replay(int64_t since_ns);
  // The sampled collectives of one communicator, per rank, from the batch log (clocks aligned).
  absl::StatusOr<ncclwatch::v1::GetTraceResponse> GetTrace(
      const ncclwatch::v1::GetTraceRequest& request, int64_t now_ns) const;
  // Stored points of the series matching `request.selector()`.
  absl::StatusOr<ncclwatch::v1::QueryRangeResponse> QueryRange(
      const ncclwatch::v1::QueryRangeRequest& request, int64_t now_ns) const;

  void AddWatcher(EventWatcher* watcher) ABSL_LOCKS_EXCLUDED(watchers_mu_);
  // Hands `event` to every watcher; never waits for one (a Watch stream queues and, when its
  // client is too slow, drops the oldest). Handle calls it for each new detection event.
  void Publish(const ncclwatch::v1::Event& event) ABSL_LOCKS_EXCLUDED(watchers_mu_);
  void RemoveWatcher(EventWatcher* watcher) ABSL_LOCKS_EXCLUDED(watchers_mu_);

  Analyzer& analyzer() { return analyzer_; }
  absl::StatusOr<ncclwatch::v1::ListEventsResponse> ListEvents(
      const ncclwatch::v1::ListEventsRequest& request) const;
  ncclwatch::v1::Stats GetStats() const;

 private:
  // Logs, stores, counts and publishes one detection event.
  void Handle(const ncclwatch::v1::Event& event);
  // Analyses the reports of a stored batch received at `received_ns` and stores their points;
  // passes the events it causes to `handle` (live: Handle; replay: the events not stored before).
  void Analyse(const ncclwatch::v1::NodeBatch& batch, int64_t received_ns,
               const std::function<void(const ncclwatch::v1::Event&)>& handle);
  void StoreDetectionSeries(int64_t now_ns);

  Store& store_;
  Analyzer& analyzer_;
  MetricRegistry& metrics_;
  Counter* batches_stored_;
  Counter* batches_duplicate_;
  Counter* batches_invalid_;
  Counter* reports_ingested_;
  Counter* reports_rejected_;
  Counter* store_errors_;
  // The last stored value and time of each detection series (by identity), for change detection.
  ncclwatch::Mutex snapshot_mu_;
  std::map<std::string, std::pair<double, int64_t>> snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
  int64_t last_snapshot_ns_ ABSL_GUARDED_BY(snapshot_mu_) = 0;
  ncclwatch::Mutex watchers_mu_;
  std::set<EventWatcher*> watchers_ ABSL_GUARDED_BY(watchers_mu_);
};

class IngestService final : public ncclwatch::v1::Ingest::CallbackService {
 public:
  // With `token` (optional, outlives the service), a push without `authorization: Bearer
  // <token>` is refused (UNAUTHENTICATED) and counted.
  explicit IngestService(AggregatorCore& core, TokenFile* token = nullptr);
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const ncclwatch::v1::NodeBatch* request,
                                 ncclwatch::v1::BatchAck* response) override;

 private:
  AggregatorCore& core_;
  BearerGate gate_;
};

class QueryService final : public ncclwatch::v1::Query::CallbackService {
 public:
  // With `token` (optional, outlives the service), every call needs `authorization: Bearer
  // <token>` (UNAUTHENTICATED otherwise, counted).
  explicit QueryService(AggregatorCore& core, TokenFile* token = nullptr);
  grpc::ServerUnaryReactor* ListStragglers(grpc::CallbackServerContext* context,
                                           const ncclwatch::v1::ListStragglersRequest* request,
                                           ncclwatch::v1::ListStragglersResponse* response) override;
  grpc::ServerUnaryReactor* ListHangs(grpc::CallbackServerContext* context,
                                      const ncclwatch::v1::ListHangsRequest* request,
                                      ncclwatch::v1::ListHangsResponse* response) override;
  grpc::ServerUnaryReactor* ListDegraded(grpc::CallbackServerContext* context,
                                         const ncclwatch::v1::ListDegradedRequest* request,
                                         ncclwatch::v1::ListDegradedResponse* response) override;
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* context,
                                       const ncclwatch::v1::ListEventsRequest* request,
                                       ncclwatch::v1::ListEventsResponse* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const ncclwatch::v1::GetStatsRequest* request,
                                     ncclwatch::v1::Stats* response) override;
  grpc::ServerUnaryReactor* QueryRange(grpc::CallbackServerContext* context,
                                       const ncclwatch::v1::QueryRangeRequest* request,
                                       ncclwatch::v1::QueryRangeResponse* response) override;
  grpc::ServerUnaryReactor* GetTrace(grpc::CallbackServerContext* context,
                                     const ncclwatch::v1::GetTraceRequest* request,
                                     ncclwatch::v1::GetTraceResponse* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const ncclwatch::v1::ListJobsRequest* request,
                                     ncclwatch::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* ListComms(grpc::CallbackServerContext* context,
                                      const ncclwatch::v1::ListCommsRequest* request,
                                      ncclwatch::v1::ListCommsResponse* response) override;
  grpc::ServerWriteReactor<ncclwatch::v1::Event>* Watch(
      grpc::CallbackServerContext* context, const ncclwatch::v1::WatchRequest* request) override;

 private:
  AggregatorCore& core_;
  BearerGate gate_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVICES_H_
