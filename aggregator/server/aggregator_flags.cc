#include "aggregator/server/aggregator_flags.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "aggregator/detect/types.h"
#include "aggregator/server/remote_write.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/rpc/grpc_log.h"
#include "common/rpc/tls.h"

namespace ncclwatch::aggregator {
namespace {

// The retention and downsampling durations: at least a minute, at most ten years.
constexpr Range kDurationRange = {60, 10 * 365 * 86400.0};

// Fail closed (docs/security.md): beyond loopback, writing needs an ingest token or a client
// certificate, and reading needs the query token, unless an --insecure-* flag says otherwise.
std::optional<std::string> CheckExposure(const AggregatorFlags& c) {
  if (IsLoopbackHost(c.listen_host)) return std::nullopt;
  if (c.ingest_token_file.empty() && c.tls_client_ca_file.empty() && !c.insecure_ingest) {
    return absl::StrFormat(
        "refusing to accept unauthenticated batches on %s, which other machines can reach: give "
        "--ingest-token-file (and the agents --aggregator-token-file) or --tls-client-ca-file "
        "(mutual TLS), listen on 127.0.0.1, or accept anyone's batches with --insecure-ingest",
        c.listen_host);
  }
  if (c.query_token_file.empty() && !c.insecure_query) {
    return absl::StrFormat(
        "refusing to serve the Query API and /federate unauthenticated on %s, which other "
        "machines can reach: give --query-token-file (and the CLI --token-file, Prometheus the "
        "bearer token), listen on 127.0.0.1, or serve anyone with --insecure-query",
        c.listen_host);
  }
  return std::nullopt;
}

}  // namespace

AnalyzerOptions AnalyzerOptionsOf(const AggregatorFlags& c) {
  AnalyzerOptions a;
  a.straggler.threshold_ns = c.straggler_threshold_ms * 1e6;
  a.straggler.window = static_cast<int>(c.straggler_window);
  a.straggler.min_groups = static_cast<int>(c.straggler_min_collectives);
  a.correlator.grace_ns = static_cast<int64_t>(c.group_grace_s * 1e9);
  a.hang.threshold_ns = static_cast<int64_t>(c.hang_threshold_s * 1e9);
  a.hang.silent_after_ns = static_cast<int64_t>(c.silent_after_s * 1e9);
  a.coverage.after_ns = a.hang.silent_after_ns;  // as long as a rank may go quiet
  a.degraded.fraction = c.degraded_fraction;
  a.degraded.intervals = static_cast<int>(c.degraded_intervals);
  a.degraded.min_message_bytes = static_cast<uint64_t>(c.degraded_min_bytes);
  a.max_jobs = static_cast<size_t>(c.max_jobs);
  a.max_comms_per_job = static_cast<size_t>(c.max_comms_per_job);
  a.max_jobs_per_agent = static_cast<size_t>(c.max_jobs_per_agent);
  a.max_comms_per_agent = static_cast<size_t>(c.max_comms_per_agent);
  a.max_series = static_cast<size_t>(c.max_series);
  a.max_series_bytes_per_agent = static_cast<size_t>(c.max_series_mib_per_agent * (1 << 20));
  a.report_points = c.store_rank_series;
  return a;
}

void RegisterAggregatorFlags(ConfigTable& t, AggregatorFlags& c) {
  t.AddString("listen-host", "NCCLWATCH_LISTEN_HOST", &c.listen_host,
              "Address the gRPC and HTTP servers bind to.");
  t.AddInt("grpc-port", "NCCLWATCH_GRPC_PORT", &c.grpc_port,
           "gRPC port for agents (Ingest) and clients (Query); 0 = any free port.",
           Range::Between(0, 65535));
  t.AddInt("http-port", "NCCLWATCH_HTTP_PORT", &c.http_port,
           "HTTP port of /metrics, /federate and /healthz; 0 = any free port.",
           Range::Between(0, 65535));
  t.AddString("data-dir", "NCCLWATCH_DATA_DIR", &c.data_dir, "RocksDB directory.");
  t.AddBool("repair-damaged-store", "", &c.repair_damaged_store,
            "When the start finds a table file of the store damaged (a checksum mismatch), "
            "repair the store and start on what it kept: the damaged files move to "
            "<data-dir>/lost (logged; ncclwatch_aggregator_store_repairs_total). "
            "--no-repair-damaged-store: fail the start instead.");
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
  t.AddBool("insecure-ingest", "", &c.insecure_ingest,
            "Accept batches from anyone who can reach a non-loopback --listen-host, with neither "
            "--ingest-token-file nor --tls-client-ca-file (refused without this flag).");
  t.AddBool("insecure-query", "", &c.insecure_query,
            "Serve the Query API and /federate on a non-loopback --listen-host without "
            "--query-token-file (refused without this flag).");
  t.AddInt("max-jobs", "", &c.max_jobs,
           "Most jobs analysed at once; reports of further jobs are stored but not analysed "
           "(counted in ncclwatch_aggregator_reports_capped_total).",
           Range::AtLeast(1));
  t.AddInt("max-comms-per-job", "", &c.max_comms_per_job,
           "Most communicators analysed per job; beyond, as --max-jobs.", Range::AtLeast(1));
  t.AddInt("max-jobs-per-agent", "", &c.max_jobs_per_agent,
           "Most jobs one agent (as authenticated: client certificate, else address) may "
           "introduce, so that one node cannot fill --max-jobs; beyond, as --max-jobs.",
           Range::AtLeast(1));
  t.AddInt("max-comms-per-agent", "", &c.max_comms_per_agent,
           "Most communicators one agent may introduce; beyond, as --max-jobs.", Range::AtLeast(1));
  t.AddInt("max-series", "", &c.max_series,
           "Most exported series; further ones are neither exported nor stored "
           "(ncclwatch_aggregator_series_capped_total).",
           Range::AtLeast(1));
  t.AddDouble("max-series-mib-per-agent", "", &c.max_series_mib_per_agent,
              "Most MiB the per-rank series one agent's reports create may hold in the "
              "aggregator; new ones beyond are refused "
              "(ncclwatch_aggregator_series_capped_by_agent_total).",
              Range::Positive());
  t.AddBool("store-rank-series", "", &c.store_rank_series,
            "Also keep every rank's per-report series (the Inspector families, plugin drops) in "
            "the store's history for QueryRange. Off: at 16,384 ranks that is ~650,000 points/s; "
            "they are served live on /federate and the agents' /metrics, and Prometheus keeps "
            "their history (docs/scale.md).");
  t.AddString("query-token-file", "NCCLWATCH_QUERY_TOKEN_FILE", &c.query_token_file,
              "File holding the bearer token the Query API and /federate require (re-read every "
              "30 s); empty: none required. /metrics and /healthz stay open.");
  t.AddDouble("straggler-threshold-ms", "", &c.straggler_threshold_ms,
              "Median lateness at which a rank is flagged slow (cleared below half of it).",
              Range::Positive());
  t.AddInt("straggler-window", "", &c.straggler_window,
           "Collectives per rank in the straggler detector's sliding window.", Range::AtLeast(1));
  t.AddInt("straggler-min-collectives", "", &c.straggler_min_collectives,
           absl::StrCat(
               "Collectives a rank must have been seen in after its class's warm-up (its first ",
               kWarmupCollectives, ") before it can be flagged."),
           Range::AtLeast(1));
  t.AddDouble("group-grace-s", "", &c.group_grace_s,
              "How long a collective waits for all its ranks' records before it is dropped.",
              Range::Positive());
  t.AddDouble("hang-threshold-s", "", &c.hang_threshold_s,
              "A collective in flight this long on some rank is a hang; the ranks that never "
              "reached it are named missing.",
              Range::Positive());
  t.AddDouble("silent-after-s", "", &c.silent_after_s,
              "A rank whose reports stopped this long while its communicator's other ranks "
              "carry on is flagged silent; a communicator with reports for this long while some "
              "of its ranks never reported makes its job's coverage finding.",
              Range::Positive());
  t.AddDouble("degraded-fraction", "", &c.degraded_fraction,
              "A communicator is degraded when its bus bandwidth stays this fraction below the "
              "baseline of its kind (0..1).",
              Range::Open(0, 1));
  t.AddInt("degraded-intervals", "", &c.degraded_intervals,
           "Consecutive low windows (about one report interval each) before a communicator is "
           "flagged degraded.",
           Range::AtLeast(1));
  t.AddInt("degraded-min-bytes", "", &c.degraded_min_bytes,
           "Collectives smaller than this (bytes, on average in their size bucket) are "
           "latency-bound and never judged on bandwidth.",
           Range::AtLeast(0));
  t.AddDuration("retention", "NCCLWATCH_RETENTION", &c.retention,
                "How long the history (detection series, events) is kept: e.g. 15d, 36h, 90m (at "
                "least 1m).",
                kDurationRange);
  t.AddDuration("batch-log-retention", "NCCLWATCH_BATCH_LOG_RETENTION", &c.batch_log_retention,
                "How long the raw batches are kept, for --replay-s at start-up and for traces "
                "(at least --replay-s, at most --retention): about 5 KiB per rank and minute "
                "(docs/scale.md).",
                kDurationRange);
  t.AddDuration("downsample-after", "", &c.downsample_after,
                "Points older than this are reduced to one mean per --downsample-step (hourly).",
                kDurationRange);
  t.AddDuration("downsample-step", "", &c.downsample_step, "Bucket of downsampled points, e.g. 5m.",
                kDurationRange);
  t.AddDouble("replay-s", "", &c.replay_s,
              "At start-up, feed the batches of the last this-many seconds to the detectors again, "
              "so they resume where they stopped.",
              Range::AtLeast(0));
  t.AddDouble("history-step-s", "", &c.history_step_s,
              "How often the detection series (ncclwatch_*) are stored for QueryRange's history, "
              "each when it changed and at least about once a minute: 5 s is finer than what "
              "Prometheus keeps, and a snapshot of a 16,384-rank job's series costs tens of ms "
              "(docs/scale.md).",
              Range::Between(0.25, 60));
  t.AddInt("replay-max-mib", "", &c.replay_max_mib,
           "Replay at most this much of the stored batch log (MiB as stored, compressed): the "
           "newest part of --replay-s, so that a restart with a 16,384-rank job stays within "
           "about 20 s (~23 s of its batches; a 1,024-rank job's whole 600 s fit). 0: no bound.",
           Range::AtLeast(0));
  t.AddString("remote-write-url", "NCCLWATCH_REMOTE_WRITE_URL", &c.remote_write_url,
              "Also push the exported series to this Prometheus remote-write endpoint, e.g. "
              "http://mimir:8080/api/v1/push (empty: off).");
  t.AddDouble("remote-write-interval-s", "", &c.remote_write_interval_s,
              "How often new samples are pushed with --remote-write-url.", Range::Positive());
  t.AddBool("remote-write-all-series", "", &c.remote_write_all_series,
            "Remote-write the per-rank NCCL Inspector series too, not only the detection families "
            "(ncclwatch_*): about 60 series per rank (docs/scale.md).");
  t.AddString(
      "shard-peers", "NCCLWATCH_SHARD_PEERS", &c.shard_peers,
      "Every aggregator of a sharded service, comma-separated, as the agents' --aggregator "
      "lists them: host:port or name=host:port (jobs are placed by rendezvous hashing of "
      "the job id over the names). With it, this aggregator answers the Query API for every "
      "job: it forwards a job's calls to its owner and merges calls about all jobs. "
      "Empty: it answers for its own jobs only.");
  t.AddString("shard-self", "NCCLWATCH_SHARD_SELF", &c.shard_self,
              "This aggregator in --shard-peers: its name, or its whole entry.");
  t.AddString("shard-ca-file", "NCCLWATCH_SHARD_CA_FILE", &c.shard_ca_file,
              "PEM CA that signs the peers' gRPC certificates: forwarded calls then use TLS, "
              "presenting --tls-cert-file as client certificate. Empty: plaintext to peers.");
  t.AddInt("ready-fd", "", &c.ready_fd,
           "Write 'ready grpc_port=N http_port=M' to this file descriptor once serving (-1: off).");
}

absl::StatusOr<AggregatorSetup> AggregatorSetupFromFlags(const AggregatorFlags& c) {
  AggregatorSetup setup;
  AggregatorServerOptions& options = setup.options;
  options.listen_host = c.listen_host;
  options.grpc_port = static_cast<int>(c.grpc_port);
  options.http_port = static_cast<int>(c.http_port);
  options.data_dir = c.data_dir;
  options.retention_ns = absl::ToInt64Nanoseconds(c.retention);
  options.batch_log_retention_ns = absl::ToInt64Nanoseconds(c.batch_log_retention);
  options.downsample_after_ns = absl::ToInt64Nanoseconds(c.downsample_after);
  options.downsample_step_ns = absl::ToInt64Nanoseconds(c.downsample_step);
  if (!c.remote_write_url.empty()) {
    absl::StatusOr<RemoteWriteTarget> target = ParseRemoteWriteUrl(c.remote_write_url);
    if (!target.ok()) return target.status();
    options.remote_write = *target;
    options.remote_write_interval = absl::Seconds(c.remote_write_interval_s);
    options.remote_write_all_series = c.remote_write_all_series;
  }
  options.analyzer = AnalyzerOptionsOf(c);
  options.replay_ns = static_cast<int64_t>(c.replay_s * 1e9);
  options.repair_damaged_store = c.repair_damaged_store;
  options.history_step_ns = static_cast<int64_t>(c.history_step_s * 1e9);
  options.replay_max_bytes = static_cast<uint64_t>(c.replay_max_mib) << 20;
  if (options.batch_log_retention_ns < options.replay_ns ||
      options.batch_log_retention_ns > options.retention_ns) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--batch-log-retention=%s must be at least --replay-s (%.0f s) and at most "
        "--retention=%s",
        DurationText(c.batch_log_retention), c.replay_s, DurationText(c.retention)));
  }
  for (const auto& [path, token] : {std::pair{&c.ingest_token_file, &setup.ingest_token},
                                    std::pair{&c.query_token_file, &setup.query_token}}) {
    absl::StatusOr<std::unique_ptr<TokenFile>> opened = TokenFile::Open(*path);
    if (!opened.ok()) return opened.status();
    *token = std::move(*opened);
  }
  options.ingest_token = setup.ingest_token.get();
  options.query_token = setup.query_token.get();
  auto credentials = MakeServerCredentials({c.tls_cert_file, c.tls_key_file, c.tls_client_ca_file});
  if (!credentials.ok()) return credentials.status();
  options.credentials = *credentials;
  if (!c.shard_peers.empty() || !c.shard_self.empty()) {
    ShardOptions shard;
    shard.peers = absl::StrSplit(c.shard_peers, ',', absl::SkipWhitespace());
    shard.self = c.shard_self;
    if (!c.shard_ca_file.empty()) {
      auto peer_credentials = MakeChannelCredentials(
          ClientTls::FromFlags(true, c.shard_ca_file, c.tls_cert_file, c.tls_key_file));
      if (!peer_credentials.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--shard-ca-file: ", peer_credentials.status().message()));
      }
      shard.credentials = *peer_credentials;
    }
    options.shard = std::move(shard);
  }
  if (auto error = CheckExposure(c)) return absl::InvalidArgumentError(*error);
  if (!IsLoopbackHost(c.listen_host)) {
    if (c.insecure_ingest && c.ingest_token_file.empty() && c.tls_client_ca_file.empty()) {
      setup.warnings.push_back(absl::StrFormat(
          "--insecure-ingest: anyone who reaches %s can push batches", c.listen_host));
    }
    if (c.insecure_query && c.query_token_file.empty()) {
      setup.warnings.push_back(absl::StrFormat(
          "--insecure-query: anyone who reaches %s can read every job's findings", c.listen_host));
    }
  }
  return setup;
}

int AggregatorMain(int argc, char** argv,
                   const std::function<void(AggregatorServerOptions&)>& adjust) {
  BlockTerminationSignals();
  DisableLockOrderChecks();
  SetLogComponent("aggregator");
  AggregatorFlags flags;
  ConfigTable table("ncclwatch-aggregator",
                    "Central ncclwatch service: correlates NCCL profiler reports from every node, "
                    "flags slow ranks, hangs and silent ranks, and serves the Query API, "
                    "/federate and /metrics.");
  RegisterAggregatorFlags(table, flags);
  if (auto exit_code = table.ParseDaemonCommandLine(argc, argv)) return *exit_code;
  RouteGrpcLogs();  // its lines in this daemon's format
  LogInfo("starting: %s", table.Describe());

  // Every setting is checked before anything starts: a bad one exits 2.
  absl::StatusOr<AggregatorSetup> setup = AggregatorSetupFromFlags(flags);
  if (!setup.ok()) {
    LogError("%s", setup.status().message());
    return 2;
  }
  for (const std::string& warning : setup->warnings) LogWarning("%s", warning);
  if (adjust) adjust(setup->options);
  absl::StatusOr<std::unique_ptr<AggregatorServer>> started =
      StartAggregatorServer(std::move(setup->options));
  if (!started.ok()) {
    LogError("%s", started.status().message());
    return 1;
  }
  AggregatorServer& server = **started;
  LogInfo("serving gRPC on %s:%d, HTTP on %s:%d, data in %s", flags.listen_host, server.grpc_port(),
          flags.listen_host, server.http_port(), flags.data_dir);
  NotifyReady(
      static_cast<int>(flags.ready_fd),
      absl::StrFormat("ready grpc_port=%d http_port=%d", server.grpc_port(), server.http_port()));

  const int sig = WaitForTerminationSignal();
  LogInfo("signal %d: shutting down", sig);
  server.Stop();
  return 0;
}

}  // namespace ncclwatch::aggregator
