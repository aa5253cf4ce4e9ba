// The aggregator as a server object: opens the store, replays the recent batches into the
// detectors, serves Ingest and Query over gRPC and /federate, /metrics and /healthz over HTTP,
// and runs the background loops (detection tick, retention and downsampling, remote-write), each
// a PeriodicTask. main.cc only parses flags and wires this up; tests can run it in-process.
#ifndef NCCLWATCH_AGGREGATOR_SERVER_AGGREGATOR_SERVER_H_
#define NCCLWATCH_AGGREGATOR_SERVER_AGGREGATOR_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "aggregator/analysis/analyzer.h"
#include "aggregator/ingest/ingest.h"
#include "aggregator/query/query.h"
#include "aggregator/server/remote_write.h"
#include "aggregator/server/services.h"
#include "aggregator/server/shard_router.h"
#include "aggregator/store/store.h"
#include "common/daemon.h"
#include "common/metrics.h"
#include "common/periodic_task.h"
#include "common/rpc/token.h"
#include "grpcpp/grpcpp.h"

namespace rocksdb {
class Env;
}  // namespace rocksdb

namespace ncclwatch::aggregator {

struct AggregatorServerOptions {
  std::string listen_host = "0.0.0.0";
  int grpc_port = 9470;  // 0: any free port
  int http_port = 9471;  // 0: any free port
  std::string data_dir;
  AnalyzerOptions analyzer;
  int64_t retention_ns = 15 * 86'400'000'000'000;
  int64_t downsample_after_ns = 86'400'000'000'000;
  int64_t downsample_step_ns = 300'000'000'000;
  int64_t replay_ns = 600'000'000'000;  // batches replayed into the detectors at start-up
  // How often the detection series are stored for the history (when they changed; at least
  // once a minute).
  int64_t history_step_ns = 5'000'000'000;
  // ... but no more than this many bytes of the (compressed) batch log: the newest part of the
  // window, so that a large job's restart stays short. 0: the whole window.
  uint64_t replay_max_bytes = 128ull << 20;
  int64_t batch_log_retention_ns = 3'600'000'000'000;  // raw batches kept (>= replay_ns)
  std::optional<RemoteWriteTarget> remote_write;
  absl::Duration remote_write_interval = absl::Seconds(10);
  // Remote-write every exported series, the per-rank Inspector families too; false: the detection
  // families only (at 16,384 ranks the Inspector families are ~10^6 series).
  bool remote_write_all_series = false;
  absl::Duration tick_period = absl::Milliseconds(250);
  // How often a store that stopped taking writes (a full disk) is tried again.
  absl::Duration resume_period = absl::Seconds(5);
  // The store's RocksDB Env; null: the real disk (tests: a journaling one, tests/crashfs).
  rocksdb::Env* env = nullptr;
  // A store found damaged at start-up (a checksum mismatch in a table file) is repaired and the
  // start tried again (StartAggregatorServer); false: the start fails, naming the damage.
  bool repair_damaged_store = true;
  bool store_repaired = false;  // set by StartAggregatorServer: counted on /metrics
  // The gRPC port's credentials (plaintext, TLS or mutual TLS); null means plaintext.
  std::shared_ptr<grpc::ServerCredentials> credentials;
  TokenFile* ingest_token = nullptr;  // optional, outlive the server
  TokenFile* query_token = nullptr;
  // Peers of a sharded service (shard_router.h); none: this aggregator stands alone.
  std::optional<ShardOptions> shard;
};

class AggregatorServer;

// Starts an aggregator. When the start finds the store damaged (DataLoss: a table file fails its
// checksum when the series index or the replay reads it) and options.repair_damaged_store, the
// damage is logged, the store repaired (Store::Repair: the damaged files move to <data-dir>/lost
// with what they held) and a fresh aggregator started on it, once.
absl::StatusOr<std::unique_ptr<AggregatorServer>> StartAggregatorServer(
    AggregatorServerOptions options);

class AggregatorServer {
 public:
  explicit AggregatorServer(AggregatorServerOptions options);
  ~AggregatorServer();  // Stop()

  // Opens the store, replays, starts serving and the background loops. Errors name what failed
  // (the store, the replay, a port that cannot be bound); the server then serves nothing (its
  // store stays open until it is destroyed).
  absl::Status Start();
  // Stops serving: gRPC health turns NOT_SERVING, the loops stop, gRPC shuts down (calls in
  // flight get 2 s), a last detection pass stores the events of what arrived since the last
  // tick, and HTTP stops. Idempotent.
  void Stop();

  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  // How many detection ticks have run (tests wait on it instead of sleeping).
  const PeriodicTask& ticker() const { return *ticker_; }
  // What the housekeeper runs every minute: the retention cutoff moves on and the batch log's
  // expired files go; `hourly` (every 60th run) also downsamples old points. Public for tests.
  void Housekeep(bool hourly);

 private:
  static HttpServerOptions HttpOptions(MetricRegistry& metrics) {
    HttpServerOptions o;
    o.metrics = &metrics;
    o.metric_prefix = "ncclwatch_aggregator";
    return o;
  }
  absl::Status OpenAndReplay();
  absl::Status StartGrpc();
  void StartLoops();
  // Drops from the store's index the series whose points are all older than the retention.
  void ForgetExpiredSeries(int64_t now_ms);

  const AggregatorServerOptions options_;
  MetricRegistry metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Analyzer> analyzer_;
  std::unique_ptr<Ingest> ingest_;
  std::unique_ptr<QueryEngine> query_;
  std::unique_ptr<IngestService> ingest_service_;
  std::unique_ptr<ShardRouter> shard_router_;
  std::unique_ptr<QueryService> query_service_;
  std::unique_ptr<grpc::Server> grpc_;
  HttpServer http_{HttpOptions(metrics_)};
  std::unique_ptr<RemoteWriter> remote_writer_;
  bool remote_write_failing_ = false;      // remote-write loop only
  int housekeeping_runs_ = 0;              // housekeeper loop only
  std::unique_ptr<PeriodicTask> resumer_;  // ResumeIfStopped every 5 s
  int64_t last_resume_warning_ns_ = 0;     // resumer_'s thread only
  std::unique_ptr<PeriodicTask> ticker_;
  std::unique_ptr<PeriodicTask> housekeeper_;
  std::unique_ptr<PeriodicTask> remote_write_loop_;
  int grpc_port_ = 0;
  int http_port_ = 0;
  bool running_ = false;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVER_AGGREGATOR_SERVER_H_
