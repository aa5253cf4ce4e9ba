// ncclwatch-aggregator: the central service. Takes batches from the node agents, stores them in
// RocksDB, correlates the ranks of every communicator, flags slow ranks, and serves the gRPC Query
// API plus HTTP /metrics, /federate and /healthz.
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "aggregator/server/aggregator_server.h"
#include "aggregator/server/remote_write.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/rpc/tls.h"
#include "common/rpc/token.h"
#ifdef NCCLWATCH_CRASHABLE_STORE
#include "rocksdb/env.h"
#include "tests/crashfs/full_disk_fs.h"
#include "tests/crashfs/journaling_fs.h"
#endif

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
  int64_t degraded_min_bytes = 1 << 20;
  std::string retention = "15d";
  std::string batch_log_retention = "1h";
  std::string downsample_after = "1d";
  std::string downsample_step = "5m";
  std::string remote_write_url;
  double remote_write_interval_s = 10;
  bool remote_write_all_series = false;
  double replay_s = 600;
  double history_step_s = 5;
  int64_t replay_max_mib = 128;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  std::string ingest_token_file;
  std::string query_token_file;
  bool insecure_ingest = false;
  bool insecure_query = false;
  int64_t max_jobs = 4096;
  int64_t max_comms_per_job = 16384;
  int64_t max_jobs_per_agent = 256;
  int64_t max_comms_per_agent = 4096;
  int64_t max_series = 2'000'000;
  double max_series_mib_per_agent = 64;
  bool store_rank_series = false;
  bool repair_damaged_store = true;
  std::string shard_peers;
  std::string shard_self;
  std::string shard_ca_file;
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
           "(counted in ncclwatch_aggregator_reports_capped_total).");
  t.AddInt("max-comms-per-job", "", &c.max_comms_per_job,
           "Most communicators analysed per job; beyond, as --max-jobs.");
  t.AddInt("max-jobs-per-agent", "", &c.max_jobs_per_agent,
           "Most jobs one agent (as authenticated: client certificate, else address) may "
           "introduce, so that one node cannot fill --max-jobs; beyond, as --max-jobs.");
  t.AddInt("max-comms-per-agent", "", &c.max_comms_per_agent,
           "Most communicators one agent may introduce; beyond, as --max-jobs.");
  t.AddInt("max-series", "", &c.max_series,
           "Most exported series; further ones are neither exported nor stored "
           "(ncclwatch_aggregator_series_capped_total).");
  t.AddDouble("max-series-mib-per-agent", "", &c.max_series_mib_per_agent,
              "Most MiB the per-rank series one agent's reports create may hold in the "
              "aggregator; new ones beyond are refused "
              "(ncclwatch_aggregator_series_capped_by_agent_total).");
  t.AddBool("store-rank-series", "", &c.store_rank_series,
            "Also keep every rank's per-report series (the Inspector families, plugin drops) in "
            "the store's history for QueryRange. Off: at 16,384 ranks that is ~650,000 points/s; "
            "they are served live on /federate and the agents' /metrics, and Prometheus keeps "
            "their history (docs/scale.md).");
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
              "carry on is flagged silent; a communicator with reports for this long while some "
              "of its ranks never reported makes its job's coverage finding.");
  t.AddDouble("degraded-fraction", "", &c.degraded_fraction,
              "A communicator is degraded when its bus bandwidth stays this fraction below the "
              "baseline of its kind (0..1).");
  t.AddInt("degraded-intervals", "", &c.degraded_intervals,
           "Consecutive low windows (about one report interval each) before a communicator is "
           "flagged degraded.");
  t.AddInt("degraded-min-bytes", "", &c.degraded_min_bytes,
           "Collectives smaller than this (bytes, on average in their size bucket) are "
           "latency-bound and never judged on bandwidth.");
  t.AddString("retention", "NCCLWATCH_RETENTION", &c.retention,
              "How long the history (detection series, events) is kept: e.g. 15d, 36h, 90m (at "
              "least 1m).");
  t.AddString("batch-log-retention", "NCCLWATCH_BATCH_LOG_RETENTION", &c.batch_log_retention,
              "How long the raw batches are kept, for --replay-s at start-up and for traces "
              "(at least --replay-s, at most --retention): about 5 KiB per rank and minute "
              "(docs/scale.md).");
  t.AddString("downsample-after", "", &c.downsample_after,
              "Points older than this are reduced to one mean per --downsample-step (hourly).");
  t.AddString("downsample-step", "", &c.downsample_step, "Bucket of downsampled points, e.g. 5m.");
  t.AddDouble("replay-s", "", &c.replay_s,
              "At start-up, feed the batches of the last this-many seconds to the detectors again, "
              "so they resume where they stopped.");
  t.AddDouble("history-step-s", "", &c.history_step_s,
              "How often the detection series (ncclwatch_*) are stored for QueryRange's history, "
              "each when it changed and at least about once a minute: 5 s is finer than what "
              "Prometheus keeps, and a snapshot of a 16,384-rank job's series costs tens of ms "
              "(docs/scale.md).");
  t.AddInt("replay-max-mib", "", &c.replay_max_mib,
           "Replay at most this much of the stored batch log (MiB as stored, compressed): the "
           "newest part of --replay-s, so that a restart with a 16,384-rank job stays within "
           "about 20 s (~23 s of its batches; a 1,024-rank job's whole 600 s fit). 0: no bound.");
  t.AddString("remote-write-url", "NCCLWATCH_REMOTE_WRITE_URL", &c.remote_write_url,
              "Also push the exported series to this Prometheus remote-write endpoint, e.g. "
              "http://mimir:8080/api/v1/push (empty: off).");
  t.AddDouble("remote-write-interval-s", "", &c.remote_write_interval_s,
              "How often new samples are pushed with --remote-write-url.");
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

// Flags whose values must be in range, checked before anything starts. Returns the error.
std::optional<std::string> CheckRanges(const AggregatorConfig& c) {
  if (c.hang_threshold_s <= 0 || c.silent_after_s <= 0) {
    return "--hang-threshold-s and --silent-after-s must be positive";
  }
  if (c.degraded_fraction <= 0 || c.degraded_fraction >= 1 || c.degraded_intervals < 1) {
    return "--degraded-fraction must be in (0, 1) and --degraded-intervals at least 1";
  }
  if (c.degraded_min_bytes < 0) {
    return "--degraded-min-bytes must be 0 or more";
  }
  if (c.max_jobs < 1 || c.max_comms_per_job < 1 || c.max_series < 1 || c.max_jobs_per_agent < 1 ||
      c.max_comms_per_agent < 1 || !(c.max_series_mib_per_agent > 0)) {
    return "--max-jobs, --max-comms-per-job, --max-jobs-per-agent, --max-comms-per-agent, "
           "--max-series and --max-series-mib-per-agent must be positive";
  }
  return std::nullopt;
}

// Fail closed (docs/security.md): beyond loopback, writing needs an ingest token or a client
// certificate, and reading needs the query token, unless an --insecure-* flag says otherwise.
std::optional<std::string> CheckExposure(const AggregatorConfig& c) {
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

AnalyzerOptions AnalyzerOptionsOf(const AggregatorConfig& c) {
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

  // Every setting is checked before anything starts: a bad one exits 2.
  AggregatorServerOptions options;
  options.listen_host = config.listen_host;
  options.grpc_port = static_cast<int>(config.grpc_port);
  options.http_port = static_cast<int>(config.http_port);
  options.data_dir = config.data_dir;
  for (const auto& [flag, value, out] :
       {std::tuple{"retention", config.retention, &options.retention_ns},
        std::tuple{"batch-log-retention", config.batch_log_retention,
                   &options.batch_log_retention_ns},
        std::tuple{"downsample-after", config.downsample_after, &options.downsample_after_ns},
        std::tuple{"downsample-step", config.downsample_step, &options.downsample_step_ns}}) {
    const std::optional<int64_t> parsed = ParseDuration(value);
    if (!parsed) {
      LogError("--%s=%s: expected a duration like 15d, 36h or 90m, at least 1m", flag, value);
      return 2;
    }
    *out = *parsed;
  }
  if (!config.remote_write_url.empty()) {
    auto target = ParseRemoteWriteUrl(config.remote_write_url);
    if (!target.ok() || !(config.remote_write_interval_s > 0)) {
      LogError("%s", target.ok() ? "--remote-write-interval-s must be positive"
                                 : target.status().message());
      return 2;
    }
    options.remote_write = *target;
    options.remote_write_interval = absl::Seconds(config.remote_write_interval_s);
    options.remote_write_all_series = config.remote_write_all_series;
  }
  if (auto error = CheckRanges(config)) {
    LogError("%s", *error);
    return 2;
  }
  options.analyzer = AnalyzerOptionsOf(config);
  options.replay_ns = static_cast<int64_t>(config.replay_s * 1e9);
  options.repair_damaged_store = config.repair_damaged_store;
  if (!(config.history_step_s >= 0.25 && config.history_step_s <= 60)) {
    LogError("--history-step-s must be between 0.25 and 60 seconds (got %g)",
             config.history_step_s);
    return 2;
  }
  options.history_step_ns = static_cast<int64_t>(config.history_step_s * 1e9);
  if (config.replay_max_mib < 0) {
    LogError("--replay-max-mib must be 0 (no bound) or more");
    return 2;
  }
  options.replay_max_bytes = static_cast<uint64_t>(config.replay_max_mib) << 20;
  if (options.batch_log_retention_ns < options.replay_ns ||
      options.batch_log_retention_ns > options.retention_ns) {
    LogError(
        "--batch-log-retention=%s must be at least --replay-s (%.0f s) and at most "
        "--retention=%s",
        config.batch_log_retention, config.replay_s, config.retention);
    return 2;
  }
  auto ingest_token = TokenFile::Open(config.ingest_token_file);
  auto query_token = TokenFile::Open(config.query_token_file);
  for (const auto* token : {&ingest_token, &query_token}) {
    if (!token->ok()) {
      LogError("%s", token->status().message());
      return 2;
    }
  }
  options.ingest_token = ingest_token->get();
  options.query_token = query_token->get();
  auto credentials =
      MakeServerCredentials({config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file});
  if (!credentials.ok()) {
    LogError("%s", credentials.status().message());
    return 2;
  }
  options.credentials = *credentials;
  if (!config.shard_peers.empty() || !config.shard_self.empty()) {
    ShardOptions shard;
    shard.peers = absl::StrSplit(config.shard_peers, ',', absl::SkipWhitespace());
    shard.self = config.shard_self;
    if (!config.shard_ca_file.empty()) {
      auto peer_credentials = MakeChannelCredentials(ClientTls::FromFlags(
          true, config.shard_ca_file, config.tls_cert_file, config.tls_key_file));
      if (!peer_credentials.ok()) {
        LogError("--shard-ca-file: %s", peer_credentials.status().message());
        return 2;
      }
      shard.credentials = *peer_credentials;
    }
    options.shard = std::move(shard);
  }
  if (auto error = CheckExposure(config)) {
    LogError("%s", *error);
    return 2;
  }
  if (!IsLoopbackHost(config.listen_host)) {
    if (config.insecure_ingest && config.ingest_token_file.empty() &&
        config.tls_client_ca_file.empty()) {
      LogWarning("--insecure-ingest: anyone who reaches %s can push batches", config.listen_host);
    }
    if (config.insecure_query && config.query_token_file.empty()) {
      LogWarning("--insecure-query: anyone who reaches %s can read every job's findings",
                 config.listen_host);
    }
  }

#ifdef NCCLWATCH_CRASHABLE_STORE
  // Test build only (ncclwatch-aggregator-crashable): the store writes through a journal of
  // what was synced, so that a test can cut the power after killing this process.
  // NCCLWATCH_FULL_DISK_FLAG: while that file exists, the store's disk is full (its log writes
  // fail with ENOSPC), so that a test can give the running process disk-full episodes.
  std::unique_ptr<rocksdb::Env> journaling_env;
  if (const char* journal = std::getenv("NCCLWATCH_CRASH_JOURNAL")) {
    std::shared_ptr<rocksdb::FileSystem> fs = ncclwatch::testing::NewJournalingFileSystem(journal);
    if (const char* flag = std::getenv("NCCLWATCH_FULL_DISK_FLAG")) {
      fs = std::make_shared<ncclwatch::testing::FullDiskFileSystem>(fs, flag);
      LogWarning("test build: the store's disk is full while %s exists", flag);
    }
    journaling_env = rocksdb::NewCompositeEnv(fs);
    options.env = journaling_env.get();
    LogWarning("test build: the store journals its syncs to %s", journal);
  }
#endif
  absl::StatusOr<std::unique_ptr<AggregatorServer>> started =
      StartAggregatorServer(std::move(options));
  if (!started.ok()) {
    LogError("%s", started.status().message());
    return 1;
  }
  AggregatorServer& server = **started;
  LogInfo("serving gRPC on %s:%d, HTTP on %s:%d, data in %s", config.listen_host,
          server.grpc_port(), config.listen_host, server.http_port(), config.data_dir);
  NotifyReady(
      static_cast<int>(config.ready_fd),
      absl::StrFormat("ready grpc_port=%d http_port=%d", server.grpc_port(), server.http_port()));

  const int sig = WaitForTerminationSignal();
  LogInfo("signal %d: shutting down", sig);
  server.Stop();
  return 0;
}

}  // namespace
}  // namespace ncclwatch::aggregator

int main(int argc, char** argv) { return ncclwatch::aggregator::Main(argc, argv); }
