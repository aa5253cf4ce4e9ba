// ncclwatch-aggregator: the central service. Takes batches from the node agents, stores them in
// RocksDB, correlates the ranks of every communicator, flags slow ranks, and serves the gRPC Query
// API plus HTTP /metrics, /federate and /healthz.
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "aggregator/analyzer.h"
#include "aggregator/federate.h"
#include "aggregator/remote_write.h"
#include "aggregator/services.h"
#include "aggregator/store.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/sync.h"
#include "grpcpp/grpcpp.h"
#include "proto/security.h"
#include "proto/validate.h"
#include "grpcpp/health_check_service_interface.h"
#include "httplib.h"

namespace ncclwatch::aggregator {
namespace {

struct AggregatorConfig {
  std::string listen_host = "0.0.0.0";
  int64_t grpc_port = 9470;
  int64_t http_port = 9471;
  std::string data_dir = "/var/lib/ncclwatch";
  double straggler_threshold_ms = 1.0;
  int64_t straggler_window = 32;
  int64_t straggler_min_collectives = 8;
  double group_grace_s = 30;
  double hang_threshold_s = 10;
  double silent_after_s = 5;
  double degraded_fraction = 0.2;
  int64_t degraded_intervals = 1;
  std::string retention = "15d";
  std::string downsample_after = "1d";
  std::string downsample_step = "5m";
  std::string remote_write_url;
  double remote_write_interval_s = 10;
  double replay_s = 600;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string ingest_token_file;
  std::string query_token_file;
  int64_t max_jobs = 4096;
  int64_t max_comms_per_job = 16384;
  int64_t max_series = 2'000'000;
  int64_t ready_fd = -1;
};

// "15d", "36h", "90m", "3600s" (a bare number is seconds) -> nanoseconds; nullopt if malformed
// or outside [1 min, 10 years].
std::optional<int64_t> ParseDuration(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !(v > 0)) return std::nullopt;
  const std::string unit(end);
  double seconds = 0;
  if (unit.empty() || unit == "s") {
    seconds = v;
  } else if (unit == "m") {
    seconds = v * 60;
  } else if (unit == "h") {
    seconds = v * 3600;
  } else if (unit == "d") {
    seconds = v * 86400;
  } else {
    return std::nullopt;
  }
  if (seconds < 60 || seconds > 10 * 365 * 86400.0) return std::nullopt;
  return static_cast<int64_t>(seconds * 1e9);
}

void Register(ConfigTable& t, AggregatorConfig& c) {
  t.AddString("listen-host", "NCCLWATCH_LISTEN_HOST", &c.listen_host,
              "Address the gRPC and HTTP servers bind to.");
  t.AddInt("grpc-port", "NCCLWATCH_GRPC_PORT", &c.grpc_port,
           "gRPC port for agents (Ingest) and clients (Query); 0 = any free port.");
  t.AddInt("http-port", "NCCLWATCH_HTTP_PORT", &c.http_port,
           "HTTP port of /metrics, /federate and /healthz; 0 = any free port.");
  t.AddString("data-dir", "NCCLWATCH_DATA_DIR", &c.data_dir, "RocksDB directory.");
  t.AddString("tls-cert-file", "NCCLWATCH_TLS_CERT_FILE", &c.tls_cert_file,
              "PEM certificate of the gRPC port; empty: plaintext.");
  t.AddString("tls-key-file", "NCCLWATCH_TLS_KEY_FILE", &c.tls_key_file,
              "PEM private key of --tls-cert-file.");
  t.AddString("tls-client-ca-file", "NCCLWATCH_TLS_CLIENT_CA_FILE", &c.tls_client_ca_file,
              "PEM CA that signs agents' (and the CLI's) certificates: with it, the gRPC port "
              "requires a valid client certificate (mutual TLS).");
  t.AddString("ingest-token-file", "NCCLWATCH_INGEST_TOKEN_FILE", &c.ingest_token_file,
              "File holding the bearer token an agent must send to push batches (re-read every "
              "30 s); empty: none required.");
  t.AddInt("max-jobs", "", &c.max_jobs,
           "Most jobs analysed at once; reports of further jobs are stored but not analysed "
           "(counted in ncclwatch_aggregator_reports_capped_total).");
  t.AddInt("max-comms-per-job", "", &c.max_comms_per_job,
           "Most communicators analysed per job; beyond, as --max-jobs.");
  t.AddInt("max-series", "", &c.max_series,
           "Most exported series; further ones are neither exported nor stored "
           "(ncclwatch_aggregator_series_capped_total).");
  t.AddString("query-token-file", "NCCLWATCH_QUERY_TOKEN_FILE", &c.query_token_file,
              "File holding the bearer token the Query API and /federate require (re-read every "
              "30 s); empty: none required. /metrics and /healthz stay open.");
  t.AddDouble("straggler-threshold-ms", "", &c.straggler_threshold_ms,
              "Median lateness at which a rank is flagged slow (cleared below half of it).");
  t.AddInt("straggler-window", "", &c.straggler_window,
           "Collectives per rank in the straggler detector's sliding window.");
  t.AddInt("straggler-min-collectives", "", &c.straggler_min_collectives,
           "Collectives a rank must have been seen in before it can be flagged.");
  t.AddDouble("group-grace-s", "", &c.group_grace_s,
              "How long a collective waits for all its ranks' records before it is dropped.");
  t.AddDouble("hang-threshold-s", "", &c.hang_threshold_s,
              "A collective in flight this long on some rank is a hang; the ranks that never "
              "reached it are named missing.");
  t.AddDouble("silent-after-s", "", &c.silent_after_s,
              "A rank whose reports stopped this long while its communicator's other ranks "
              "carry on is flagged silent.");
  t.AddDouble("degraded-fraction", "", &c.degraded_fraction,
              "A communicator is degraded when its bus bandwidth stays this fraction below the "
              "baseline of its kind (0..1).");
  t.AddInt("degraded-intervals", "", &c.degraded_intervals,
           "Consecutive low report intervals before a communicator is flagged degraded.");
  t.AddString("retention", "NCCLWATCH_RETENTION", &c.retention,
              "How long batches, points and events are kept: e.g. 15d, 36h, 90m (at least 1m).");
  t.AddString("downsample-after", "", &c.downsample_after,
              "Points older than this are reduced to one mean per --downsample-step (hourly).");
  t.AddString("downsample-step", "", &c.downsample_step,
              "Bucket of downsampled points, e.g. 5m.");
  t.AddDouble("replay-s", "", &c.replay_s,
              "At start-up, feed the batches of the last this-many seconds to the detectors again, "
              "so they resume where they stopped.");
  t.AddString("remote-write-url", "NCCLWATCH_REMOTE_WRITE_URL", &c.remote_write_url,
              "Also push the exported series to this Prometheus remote-write endpoint, e.g. "
              "http://mimir:8080/api/v1/push (empty: off).");
  t.AddDouble("remote-write-interval-s", "", &c.remote_write_interval_s,
              "How often new samples are pushed with --remote-write-url.");
  t.AddInt("ready-fd", "", &c.ready_fd,
           "Write 'ready grpc_port=N http_port=M' to this file descriptor once serving (-1: off).");
}

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  SetLogComponent("aggregator");
  AggregatorConfig config;
  ConfigTable table("ncclwatch-aggregator",
                    "Central ncclwatch service: correlates NCCL profiler reports from every node, "
                    "flags slow ranks, hangs and silent ranks, and serves the Query API, "
                    "/federate and /metrics.");
  Register(table, config);
  if (auto exit_code = table.ParseDaemonCommandLine(argc, argv)) return *exit_code;
  LogInfo("starting: %s", table.Describe());

  const std::optional<int64_t> retention_ns = ParseDuration(config.retention);
  const std::optional<int64_t> downsample_after_ns = ParseDuration(config.downsample_after);
  const std::optional<int64_t> downsample_step_ns = ParseDuration(config.downsample_step);
  for (const auto& [flag, value, parsed] :
       {std::tuple{"retention", config.retention, retention_ns},
        std::tuple{"downsample-after", config.downsample_after, downsample_after_ns},
        std::tuple{"downsample-step", config.downsample_step, downsample_step_ns}}) {
    if (!parsed) {
      LogError("--%s=%s: expected a duration like 15d, 36h or 90m, at least 1m", flag, value);
      return 2;
    }
  }
  std::optional<RemoteWriteTarget> remote_write;
  if (!config.remote_write_url.empty()) {
    auto target = ParseRemoteWriteUrl(config.remote_write_url);
    if (!target.ok() || !(config.remote_write_interval_s > 0)) {
      LogError("%s", target.ok() ? "--remote-write-interval-s must be positive"
                                 : target.status().message());
      return 2;
    }
    remote_write = *target;
  }
  auto store = Store::Open(config.data_dir);
  if (!store.ok()) {
    LogError("%s", store.status().message());
    return 1;
  }
  if (auto n = (*store)->CountBatches(); n.ok()) LogInfo("store holds %d batches", *n);
  (*store)->SetRetentionCutoff(absl::GetCurrentTimeNanos() - *retention_ns);

  AnalyzerOptions aopts;
  aopts.straggler.threshold_ns = config.straggler_threshold_ms * 1e6;
  aopts.straggler.window = static_cast<int>(config.straggler_window);
  aopts.straggler.min_groups = static_cast<int>(config.straggler_min_collectives);
  aopts.correlator.grace_ns = static_cast<int64_t>(config.group_grace_s * 1e9);
  if (config.hang_threshold_s <= 0 || config.silent_after_s <= 0) {
    LogError("--hang-threshold-s and --silent-after-s must be positive");
    return 2;
  }
  aopts.hang.threshold_ns = static_cast<int64_t>(config.hang_threshold_s * 1e9);
  aopts.hang.silent_after_ns = static_cast<int64_t>(config.silent_after_s * 1e9);
  if (config.degraded_fraction <= 0 || config.degraded_fraction >= 1 ||
      config.degraded_intervals < 1) {
    LogError("--degraded-fraction must be in (0, 1) and --degraded-intervals at least 1");
    return 2;
  }
  aopts.degraded.fraction = config.degraded_fraction;
  aopts.degraded.intervals = static_cast<int>(config.degraded_intervals);
  if (config.max_jobs < 1 || config.max_comms_per_job < 1 || config.max_series < 1) {
    LogError("--max-jobs, --max-comms-per-job and --max-series must be positive");
    return 2;
  }
  aopts.max_jobs = static_cast<size_t>(config.max_jobs);
  aopts.max_comms_per_job = static_cast<size_t>(config.max_comms_per_job);
  aopts.max_series = static_cast<size_t>(config.max_series);
  Analyzer analyzer(aopts);
  MetricRegistry metrics;
  AggregatorCore core(**store, analyzer, metrics);
  {
    const int64_t started = absl::GetCurrentTimeNanos();
    auto replayed = core.Replay(started - static_cast<int64_t>(config.replay_s * 1e9));
    if (!replayed.ok()) {
      LogError("replaying the stored batches: %s", replayed.status().message());
      return 1;
    }
    LogInfo("replayed %d stored batches of the last %.0f s into the detectors in %.2f s",
            *replayed, config.replay_s, (absl::GetCurrentTimeNanos() - started) / 1e9);
  }
  auto ingest_token = TokenFile::Open(config.ingest_token_file);
  auto query_token = TokenFile::Open(config.query_token_file);
  for (const auto* token : {&ingest_token, &query_token}) {
    if (!token->ok()) {
      LogError("%s", token->status().message());
      return 2;
    }
  }
  IngestService ingest(core, ingest_token->get());
  QueryService query(core, query_token->get());

  // The standard grpc.health.v1.Health service (Kubernetes gRPC probes, grpc_health_probe):
  // SERVING from the moment the server starts, NOT_SERVING once it shuts down.
  grpc::EnableDefaultHealthCheckService(true);
  auto server_credentials = MakeServerCredentials(
      {config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file});
  if (!server_credentials.ok()) {
    LogError("%s", server_credentials.status().message());
    return 2;
  }
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort(absl::StrFormat("%s:%d", config.listen_host, config.grpc_port),
                           *server_credentials, &grpc_port);
  builder.RegisterService(&ingest);
  builder.RegisterService(&query);
  builder.SetMaxReceiveMessageSize(kMaxBatchBytes);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || grpc_port == 0) {
    LogError("cannot listen for gRPC on %s:%d", config.listen_host, config.grpc_port);
    return 1;
  }

  HttpServer http;
  InstallHttpRoutes(http.server(), metrics, analyzer, query_token->get());
  auto http_port = http.Start(config.listen_host, static_cast<int>(config.http_port));
  if (!http_port.ok()) {
    LogError("%s", http_port.status().message());
    return 1;
  }

  // Time-driven detection (hangs, silent ranks) and housekeeping, four times a second.
  ncclwatch::Mutex tick_mu;
  bool stopping = false;
  std::thread ticker([&] {
    ncclwatch::MutexLock lock(&tick_mu);
    while (!tick_mu.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(250))) {
      core.Tick(absl::GetCurrentTimeNanos());
    }
  });
  // Retention, off the detection path: moves the cutoff along every minute; hourly, downsamples
  // old points and compacts so that expired data leaves the disk.
  std::thread housekeeper([&] {
    ncclwatch::MutexLock lock(&tick_mu);
    int minutes = 0;
    while (!tick_mu.AwaitWithTimeout(absl::Condition(&stopping), absl::Minutes(1))) {
      (*store)->SetRetentionCutoff(absl::GetCurrentTimeNanos() - *retention_ns);
      if (++minutes % 60 != 0) continue;
      tick_mu.Unlock();  // the ticker keeps ticking while RocksDB works
      const int64_t now_ms = absl::GetCurrentTimeNanos() / 1'000'000;
      auto removed = (*store)->Downsample(now_ms - *downsample_after_ns / 1'000'000,
                                          *downsample_step_ns / 1'000'000);
      absl::Status s = (*store)->Compact();
      tick_mu.Lock();
      if (!removed.ok()) LogError("%s", removed.status().message());
      if (!s.ok()) LogError("%s", s.message());
    }
  });

  // Remote-write, on its own thread so that a slow receiver never delays detection.
  std::thread remote_writer;
  if (remote_write) {
    remote_writer = std::thread([&] {
      RemoteWriter writer(*remote_write, metrics);
      ncclwatch::MutexLock lock(&tick_mu);
      const absl::Duration every = absl::Seconds(config.remote_write_interval_s);
      bool failing = false;
      while (!tick_mu.AwaitWithTimeout(absl::Condition(&stopping), every)) {
        tick_mu.Unlock();
        absl::Status s = writer.Send(analyzer.Series());
        tick_mu.Lock();
        if (!s.ok() && !failing) LogError("%s (retrying every interval)", s.message());
        if (s.ok() && failing) LogInfo("remote-write works again");
        failing = !s.ok();
      }
    });
  }

  LogInfo("serving gRPC on %s:%d, HTTP on %s:%d, data in %s", config.listen_host, grpc_port,
          config.listen_host, *http_port, config.data_dir);
  NotifyReady(static_cast<int>(config.ready_fd),
              absl::StrFormat("ready grpc_port=%d http_port=%d", grpc_port, *http_port));

  int sig = WaitForTerminationSignal();
  LogInfo("signal %d: shutting down", sig);
  server->GetHealthCheckService()->Shutdown();
  {
    ncclwatch::MutexLock lock(&tick_mu);
    stopping = true;
  }
  ticker.join();
  housekeeper.join();
  if (remote_writer.joinable()) remote_writer.join();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // One last detection pass over what arrived since the last tick, so that its events are stored.
  core.Tick(absl::GetCurrentTimeNanos());
  http.Stop();
  return 0;
}

}  // namespace
}  // namespace ncclwatch::aggregator

int main(int argc, char** argv) { return ncclwatch::aggregator::Main(argc, argv); }
