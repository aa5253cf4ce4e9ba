// The aggregator's command line: every flag with its default, range and meaning
// (RegisterAggregatorFlags), the checks that span several flags and the server options they make
// (AggregatorSetupFromFlags), and the whole of a `main` (AggregatorMain), so that the production
// binary and the test build that journals its store share one.
#ifndef NCCLWATCH_AGGREGATOR_SERVER_AGGREGATOR_FLAGS_H_
#define NCCLWATCH_AGGREGATOR_SERVER_AGGREGATOR_FLAGS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "aggregator/server/aggregator_server.h"
#include "common/config.h"
#include "common/rpc/token.h"

namespace ncclwatch::aggregator {

// What the command line says, in its own units; ranges are checked as it is parsed.
struct AggregatorFlags {
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
  absl::Duration retention = absl::Hours(15 * 24);
  absl::Duration batch_log_retention = absl::Hours(1);
  absl::Duration downsample_after = absl::Hours(24);
  absl::Duration downsample_step = absl::Minutes(5);
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

void RegisterAggregatorFlags(ConfigTable& table, AggregatorFlags& flags);

// The analysis's options the flags set (detection thresholds, windows, caps); the rest keep
// AnalyzerOptions' defaults.
AnalyzerOptions AnalyzerOptionsOf(const AggregatorFlags& flags);

// The server's options from the flags, with what they point to (the token files).
struct AggregatorSetup {
  AggregatorServerOptions options;
  std::unique_ptr<TokenFile> ingest_token;  // options.ingest_token points here
  std::unique_ptr<TokenFile> query_token;
  // Allowed but unsafe settings, to log (--insecure-* beyond loopback).
  std::vector<std::string> warnings;
};

// Checks what no single range says (durations against each other, exposure beyond loopback) and
// opens what the flags name (token files, certificates). InvalidArgument names the flag.
absl::StatusOr<AggregatorSetup> AggregatorSetupFromFlags(const AggregatorFlags& flags);

// Parses the command line, checks it (exit 2 with a message on a bad one), serves until SIGTERM
// or SIGINT. `adjust` (optional) may change the options before the server starts.
int AggregatorMain(int argc, char** argv,
                   const std::function<void(AggregatorServerOptions&)>& adjust = {});

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVER_AGGREGATOR_FLAGS_H_
