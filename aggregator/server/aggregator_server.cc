#include "aggregator/server/aggregator_server.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "aggregator/server/http_routes.h"
#include "common/log.h"
#include "common/process_metrics.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/validate.h"

namespace ncclwatch::aggregator {

AggregatorServer::AggregatorServer(AggregatorServerOptions options) : options_(std::move(options)) {
  AddProcessMetrics(metrics_);
  AddBuildInfo(metrics_, "ncclwatch_aggregator");
}

AggregatorServer::~AggregatorServer() { Stop(); }

absl::StatusOr<std::unique_ptr<AggregatorServer>> StartAggregatorServer(
    AggregatorServerOptions options) {
  AggregatorServerOptions again = options;
  auto server = std::make_unique<AggregatorServer>(std::move(options));
  absl::Status s = server->Start();
  if (s.ok()) return server;
  if (!absl::IsDataLoss(s) || !again.repair_damaged_store) return s;
  server.reset();  // the store closed
  LogError(
      "the store in %s is damaged (%s); repairing it: table files that fail their checksums move "
      "to %s/lost with everything in them (--repair-damaged-store)",
      again.data_dir, s.message(), again.data_dir);
  const absl::Time began = absl::Now();
  if (absl::Status repaired = Store::Repair(again.data_dir, again.env); !repaired.ok()) {
    return absl::Status(repaired.code(), absl::StrCat(s.message(), "; ", repaired.message()));
  }
  LogWarning("store repaired in %.1f s; starting on what it kept",
             absl::ToDoubleSeconds(absl::Now() - began));
  again.store_repaired = true;
  server = std::make_unique<AggregatorServer>(std::move(again));
  if (absl::Status retried = server->Start(); !retried.ok()) return retried;
  return server;
}

absl::Status AggregatorServer::OpenAndReplay() {
  auto store = Store::Open(options_.data_dir, options_.env);
  if (!store.ok()) return store.status();
  store_ = *std::move(store);
  if (auto n = store_->CountBatches(); n.ok()) LogInfo("store holds %d batches", *n);
  metrics_.AddCollector([store = store_.get()](PromTextWriter& w) {
    const Store::Sizes sizes = store->DiskSizes();
    w.Family("ncclwatch_aggregator_store_bytes",
             "Bytes of the store's table files: the raw batch log (kept --batch-log-retention) "
             "and the long-term history (detection series, events; kept --retention).",
             "gauge");
    w.Sample("ncclwatch_aggregator_store_bytes", {{"part", "batch_log"}},
             static_cast<double>(sizes.batch_log_bytes));
    w.Sample("ncclwatch_aggregator_store_bytes", {{"part", "history"}},
             static_cast<double>(sizes.history_bytes));
    w.Family("ncclwatch_aggregator_store_writes_stopped",
             "1 while RocksDB takes no writes after a failed one (a full disk, an I/O error): "
             "pushes fail until it resumes (tried every 5 s).",
             "gauge");
    w.Sample("ncclwatch_aggregator_store_writes_stopped", {}, store->WritesStopped() ? 1.0 : 0.0);
    w.Family("ncclwatch_aggregator_series_index_skipped_total",
             "Series index entries found unreadable at start-up and skipped (their series' "
             "history is lost; everything else is served).",
             "counter");
    w.Sample("ncclwatch_aggregator_series_index_skipped_total", {},
             static_cast<double>(store->SeriesEntriesSkipped()));
    w.Family("ncclwatch_aggregator_series_indexed",
             "Series in the store's index (held in memory): those with a point within "
             "--retention.",
             "gauge");
    w.Sample("ncclwatch_aggregator_series_indexed", {},
             static_cast<double>(store->SeriesIndexed()));
    w.Family("ncclwatch_aggregator_series_forgotten_total",
             "Series the index forgot since start-up because all their points had expired.",
             "counter");
    w.Sample("ncclwatch_aggregator_series_forgotten_total", {},
             static_cast<double>(store->SeriesForgotten()));
    w.Family("ncclwatch_aggregator_store_wal_damage_total",
             "Places RocksDB found the store's write-ahead log damaged when this run opened it "
             "(what it could not read is lost; logged).",
             "counter");
    w.Sample("ncclwatch_aggregator_store_wal_damage_total", {},
             static_cast<double>(store->WalDamage()));
    w.Family("ncclwatch_aggregator_store_batch_log_damaged_total",
             "Batches in the store's batch log that a replay (start-up, trace) found unreadable "
             "(damaged bytes): skipped, the others replayed; logged.",
             "counter");
    w.Sample("ncclwatch_aggregator_store_batch_log_damaged_total", {},
             static_cast<double>(store->BatchLogDamaged()));
    w.Family("ncclwatch_aggregator_store_wal_writes_lost_total",
             "Writes in the store's write-ahead log found unreadable (damaged) when it was opened: "
             "skipped, the rest recovered. The batches among them count in "
             "ncclwatch_aggregator_batches_missing_total as their agents push again.",
             "counter");
    w.Sample("ncclwatch_aggregator_store_wal_writes_lost_total", {},
             static_cast<double>(store->WalWritesLost()));
    w.Family("ncclwatch_aggregator_batches_missing_total",
             "Batches an agent numbered that the store does not hold, seen when a later one "
             "arrives: lost here (a damaged log) or never delivered (the agent set them aside or "
             "dropped them, and counts those).",
             "counter");
    w.Sample("ncclwatch_aggregator_batches_missing_total", {},
             static_cast<double>(store->BatchesMissing()));
  });
  metrics_
      .GetCounter("ncclwatch_aggregator_store_repairs_total",
                  "Repairs of a store found damaged at start-up (--repair-damaged-store): "
                  "1 when this run began with one.")
      ->Increment(options_.store_repaired ? 1 : 0);
  store_->SetRetentionCutoff(absl::GetCurrentTimeNanos() - options_.retention_ns);
  constexpr int64_t kDay = 86'400;
  if (absl::Status s = store_->SetHistoryRewritePeriod(
          std::clamp<int64_t>(options_.retention_ns / 4'000'000'000, kDay, 30 * kDay));
      !s.ok()) {
    return s;
  }
  // Series whose points have all expired (ended jobs) leave the index at start-up, not only at
  // the next hourly housekeeping.
  ForgetExpiredSeries(absl::GetCurrentTimeNanos() / 1'000'000);
  analyzer_ = std::make_unique<Analyzer>(options_.analyzer);
  ingest_ = std::make_unique<Ingest>(*store_, *analyzer_, metrics_, options_.history_step_ns);
  query_ = std::make_unique<QueryEngine>(*store_, *analyzer_);
  const int64_t started = absl::GetCurrentTimeNanos();
  const int64_t window_start = started - options_.replay_ns;
  const int64_t replay_from = store_->ReplayStart(window_start, started, options_.replay_max_bytes);
  if (replay_from > window_start) {
    LogInfo(
        "the last %.0f s of batches exceed --replay-max-mib; replaying the newest %.1f s of them",
        options_.replay_ns / 1e9, (started - replay_from) / 1e9);
  }
  auto replayed = ingest_->Replay(replay_from, started, window_start);
  if (!replayed.ok()) {
    return absl::Status(
        replayed.status().code(),
        absl::StrFormat("replaying the stored batches: %s", replayed.status().message()));
  }
  LogInfo("replayed %d stored batches of the last %.0f s into the detectors in %.2f s", *replayed,
          (started - replay_from) / 1e9, (absl::GetCurrentTimeNanos() - started) / 1e9);
  return absl::OkStatus();
}

absl::Status AggregatorServer::StartGrpc() {
  ingest_service_ = std::make_unique<IngestService>(*ingest_, options_.ingest_token);
  query_service_ =
      std::make_unique<QueryService>(*query_, *ingest_, options_.query_token, shard_router_.get());
  // The standard grpc.health.v1.Health service (Kubernetes gRPC probes, grpc_health_probe):
  // SERVING from the moment the server starts, NOT_SERVING once it shuts down.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      absl::StrFormat("%s:%d", options_.listen_host, options_.grpc_port),
      options_.credentials ? options_.credentials : grpc::InsecureServerCredentials(), &grpc_port_);
  builder.RegisterService(ingest_service_.get());
  builder.RegisterService(query_service_.get());
  builder.SetMaxReceiveMessageSize(kMaxBatchBytes);
  // gRPC sets SO_REUSEPORT by default: a second aggregator would bind the same port and the two
  // would answer alternately. A port in use is an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Peers of a sharded service keep an idle Watch stream open and ping it every 30 s
  // (shard_router.cc): allow that, rather than answer the third ping with GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 20000);
  grpc_ = builder.BuildAndStart();
  if (!grpc_ || grpc_port_ == 0) {
    grpc_.reset();
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen for gRPC on %s:%d: the port is in use (another aggregator running?) or "
        "the address is not local",
        options_.listen_host, options_.grpc_port));
  }
  return absl::OkStatus();
}

void AggregatorServer::Housekeep(bool hourly) {
  // Expired history leaves the disk with the compactions RocksDB runs anyway, and each table file
  // is rewritten at least every --retention / 4 (RocksDB's periodic compaction, at least a day
  // apart: Store::SetHistoryRewritePeriod), so that the retention filter sees every file, also
  // those of series no longer written. Housekeeping itself rewrites nothing: a compaction of the
  // whole history here rewrote all of it every hour, next to the synced log.
  store_->SetRetentionCutoff(absl::GetCurrentTimeNanos() - options_.retention_ns);
  if (absl::Status s =
          store_->DropBatchesBefore(absl::GetCurrentTimeNanos() - options_.batch_log_retention_ns);
      !s.ok()) {
    // Counted with the other store failures (the counter Ingest registered).
    metrics_
        .GetCounter("ncclwatch_aggregator_store_errors_total",
                    "Store writes that failed (the agent retries).")
        ->Increment();
    LogError("%s", s.message());
  }
  if (!hourly) return;
  const int64_t now_ms = absl::GetCurrentTimeNanos() / 1'000'000;
  ForgetExpiredSeries(now_ms);
  auto removed = store_->Downsample(now_ms - options_.downsample_after_ns / 1'000'000,
                                    options_.downsample_step_ns / 1'000'000);
  if (!removed.ok()) LogError("%s", removed.status().message());
}

void AggregatorServer::ForgetExpiredSeries(int64_t now_ms) {
  auto forgotten = store_->ForgetSeriesBefore(now_ms - options_.retention_ns / 1'000'000);
  if (!forgotten.ok()) {
    LogError("%s", forgotten.status().message());
  } else if (*forgotten > 0) {
    LogInfo("forgot %d series whose points have all expired (--retention); %d remain indexed",
            *forgotten, store_->SeriesIndexed());
  }
}

void AggregatorServer::StartLoops() {
  // Time-driven detection (hangs, silent ranks) and the detection series, four times a second.
  ticker_ = std::make_unique<PeriodicTask>(options_.tick_period,
                                           [this] { ingest_->Tick(absl::GetCurrentTimeNanos()); });
  // After a failed write (a full disk) RocksDB takes none until it resumes: tried every 5 s, on
  // a thread of its own (resuming flushes the memtables; detection keeps ticking meanwhile).
  // Why not yet is logged once a minute while the disk stays full (the gauge says it meanwhile).
  resumer_ = std::make_unique<PeriodicTask>(options_.resume_period, [this] {
    absl::Status s = store_->ResumeIfStopped();
    const int64_t now_ns = absl::GetCurrentTimeNanos();
    if (!s.ok() && now_ns - last_resume_warning_ns_ >= 60'000'000'000) {
      last_resume_warning_ns_ = now_ns;
      LogWarning("store: %s", s.message());
    }
  });
  housekeeper_ = std::make_unique<PeriodicTask>(
      absl::Minutes(1), [this] { Housekeep(++housekeeping_runs_ % 60 == 0); });
  ticker_->Start();
  housekeeper_->Start();
  resumer_->Start();
  if (options_.remote_write) {
    // On its own thread, so that a slow receiver never delays detection.
    remote_writer_ = std::make_unique<RemoteWriter>(*options_.remote_write, metrics_);
    remote_write_loop_ = std::make_unique<PeriodicTask>(options_.remote_write_interval, [this] {
      absl::Status s = remote_writer_->Send(
          query_->CurrentSeries(/*detection_only=*/!options_.remote_write_all_series));
      if (!s.ok() && !remote_write_failing_) {
        LogError("%s (retrying every interval)", s.message());
      }
      if (s.ok() && remote_write_failing_) LogInfo("remote-write works again");
      remote_write_failing_ = !s.ok();
    });
    remote_write_loop_->Start();
  }
}

absl::Status AggregatorServer::Start() {
  if (options_.shard) {
    auto router = ShardRouter::Create(*options_.shard, metrics_);
    if (!router.ok()) return router.status();
    shard_router_ = *std::move(router);
    LogInfo("sharded Query service: %s of %d aggregators", options_.shard->self,
            static_cast<int>(options_.shard->peers.size()));
  }
  if (absl::Status s = OpenAndReplay(); !s.ok()) return s;
  if (absl::Status s = StartGrpc(); !s.ok()) return s;
  InstallHttpRoutes(
      http_, metrics_, *query_, options_.query_token,
      [this] {
        std::string problems;
        if (store_->WritesStopped()) {
          problems += "the store takes no writes (a full disk or an I/O error; see the log)\n";
        }
        const int64_t since = ingest_->FailingSinceNs();
        if (since != 0 && absl::GetCurrentTimeNanos() - since > 60'000'000'000) {
          problems += absl::StrFormat("every push has failed to be stored for %d s\n",
                                      (absl::GetCurrentTimeNanos() - since) / 1'000'000'000);
        }
        return problems;
      },
      [this]() -> std::string {
        if (!store_->NeedsRestart()) return "";
        return "the store cannot take writes again without a restart (RocksDB could not resume "
               "after a full disk; see the log)\n";
      });
  auto http_port = http_.Start(options_.listen_host, options_.http_port);
  if (!http_port.ok()) {
    grpc_->Shutdown();
    grpc_.reset();
    return http_port.status();
  }
  http_port_ = *http_port;
  StartLoops();
  if (shard_router_) shard_router_->StartRelay(ingest_->events(), options_.query_token);
  running_ = true;
  return absl::OkStatus();
}

void AggregatorServer::Stop() {
  if (!running_) return;
  running_ = false;
  if (shard_router_) shard_router_->StopRelay();
  grpc_->GetHealthCheckService()->Shutdown();
  ticker_->Stop();
  housekeeper_->Stop();
  resumer_->Stop();
  if (remote_write_loop_) remote_write_loop_->Stop();
  grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // One last detection pass over what arrived since the last tick, so that its events are stored.
  ingest_->Tick(absl::GetCurrentTimeNanos());
  http_.Stop();
}

}  // namespace ncclwatch::aggregator
