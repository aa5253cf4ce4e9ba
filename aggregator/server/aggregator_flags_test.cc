#include "aggregator/server/aggregator_flags.h"

#include <fstream>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;
using ::ncclwatch::testutil::StatusIs;
using ::testing::HasSubstr;

// The aggregator's command line `args` as its main parses and checks it, without environment.
absl::StatusOr<AggregatorSetup> Checked(std::vector<std::string> args,
                                        AggregatorFlags* out = nullptr) {
  AggregatorFlags flags;
  ConfigTable table("ncclwatch-aggregator", "");
  RegisterAggregatorFlags(table, flags);
  std::vector<const char*> argv = {"ncclwatch-aggregator"};
  for (const auto& a : args) argv.push_back(a.c_str());
  auto parsed = table.Parse(static_cast<int>(argv.size()), argv.data(),
                            [](const char*) -> const char* { return nullptr; });
  if (!parsed.ok()) return parsed.status();
  if (out != nullptr) *out = flags;
  return AggregatorSetupFromFlags(flags);
}

TEST(AggregatorFlagsTest, TheDefaultsOnLoopbackMakeTheDocumentedOptions) {
  auto setup = Checked({"--listen-host=127.0.0.1"});
  ASSERT_THAT(setup.status(), IsOk());
  const AggregatorServerOptions& o = setup->options;
  EXPECT_EQ(o.grpc_port, 9470);
  EXPECT_EQ(o.http_port, 9471);
  EXPECT_EQ(o.retention_ns, 15 * 86'400'000'000'000);
  EXPECT_EQ(o.batch_log_retention_ns, 3'600'000'000'000);
  EXPECT_EQ(o.downsample_after_ns, 86'400'000'000'000);
  EXPECT_EQ(o.downsample_step_ns, 300'000'000'000);
  EXPECT_EQ(o.replay_ns, 600'000'000'000);
  EXPECT_EQ(o.history_step_ns, 5'000'000'000);
  EXPECT_EQ(o.replay_max_bytes, 128ull << 20);
  EXPECT_FALSE(o.remote_write.has_value());
  EXPECT_FALSE(o.shard.has_value());
  EXPECT_EQ(o.ingest_token, nullptr);
  EXPECT_EQ(o.query_token, nullptr);
  EXPECT_TRUE(setup->warnings.empty());
  // The detectors' options as the flags' defaults say, in their units.
  EXPECT_EQ(o.analyzer.straggler.threshold_ns, 1'000'000);
  EXPECT_EQ(o.analyzer.hang.threshold_ns, 10'000'000'000);
  EXPECT_EQ(o.analyzer.hang.silent_after_ns, 5'000'000'000);
  EXPECT_EQ(o.analyzer.coverage.after_ns, o.analyzer.hang.silent_after_ns);
  EXPECT_DOUBLE_EQ(o.analyzer.degraded.fraction, 0.2);
  EXPECT_EQ(o.analyzer.max_series_bytes_per_agent, size_t{64} << 20);
}

TEST(AggregatorFlagsTest, FlagsReachTheOptionsInTheirUnits) {
  auto setup = Checked({"--listen-host=127.0.0.1", "--straggler-threshold-ms=2.5",
                        "--silent-after-s=3", "--retention=36h", "--batch-log-retention=90m",
                        "--history-step-s=0.25", "--replay-max-mib=0", "--max-series=10"});
  ASSERT_THAT(setup.status(), IsOk());
  const AggregatorServerOptions& o = setup->options;
  EXPECT_EQ(o.analyzer.straggler.threshold_ns, 2'500'000);
  EXPECT_EQ(o.analyzer.hang.silent_after_ns, 3'000'000'000);
  EXPECT_EQ(o.analyzer.coverage.after_ns, 3'000'000'000);
  EXPECT_EQ(o.retention_ns, 36 * 3'600'000'000'000);
  EXPECT_EQ(o.batch_log_retention_ns, 90 * 60'000'000'000);
  EXPECT_EQ(o.history_step_ns, 250'000'000);
  EXPECT_EQ(o.replay_max_bytes, 0u);
  EXPECT_EQ(o.analyzer.max_series, 10u);
}

TEST(AggregatorFlagsTest, AValueOutOfItsRangeNamesTheFlagAndTheRange) {
  EXPECT_THAT(Checked({"--degraded-fraction=1"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --degraded-fraction must be in (0, 1), not 1")));
  EXPECT_THAT(Checked({"--hang-threshold-s=0"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --hang-threshold-s must be positive, not 0")));
  EXPECT_THAT(Checked({"--max-jobs=0"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --max-jobs must be at least 1, not 0")));
  EXPECT_THAT(Checked({"--history-step-s=61"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --history-step-s must be in [0.25, 60], not 61")));
  EXPECT_THAT(Checked({"--grpc-port=70000"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--grpc-port")));
}

TEST(AggregatorFlagsTest, DurationsAreReadWithTheirUnitAndBounded) {
  EXPECT_THAT(Checked({"--retention=15x"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --retention: '15x' is not a duration")));
  EXPECT_THAT(Checked({"--downsample-step=30s"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("flag --downsample-step must be in [1m, 3650d], not 30s")));
  // Checked together: the batch log must cover the replay and not outlive the history.
  EXPECT_THAT(Checked({"--listen-host=127.0.0.1", "--batch-log-retention=5m"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--batch-log-retention=5m must be at least --replay-s (600 s)")));
  EXPECT_THAT(Checked({"--listen-host=127.0.0.1", "--retention=30m"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most --retention=30m")));
}

TEST(AggregatorFlagsTest, BeyondLoopbackItRefusesToServeUnauthenticatedUnlessToldTo) {
  EXPECT_THAT(Checked({}).status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("refusing to accept unauthenticated batches "
                                                       "on 0.0.0.0")));
  EXPECT_THAT(Checked({"--insecure-ingest"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("refusing to serve the Query API and /federate unauthenticated")));
  auto setup = Checked({"--insecure-ingest", "--insecure-query"});
  ASSERT_THAT(setup.status(), IsOk());
  ASSERT_EQ(setup->warnings.size(), 2u);
  EXPECT_THAT(setup->warnings[0], HasSubstr("--insecure-ingest: anyone who reaches 0.0.0.0"));
  EXPECT_THAT(setup->warnings[1], HasSubstr("--insecure-query"));
}

TEST(AggregatorFlagsTest, TokenFilesAreOpenedAndAMissingOneIsAnError) {
  const std::string path = ::testing::TempDir() + "/aggregator_flags_test.token";
  std::ofstream(path) << "s3cret\n";
  auto setup = Checked({"--ingest-token-file=" + path, "--query-token-file=" + path});
  ASSERT_THAT(setup.status(), IsOk());
  ASSERT_NE(setup->options.ingest_token, nullptr);
  EXPECT_EQ(setup->options.ingest_token, setup->ingest_token.get());
  EXPECT_EQ(setup->options.query_token, setup->query_token.get());
  EXPECT_FALSE(Checked({"--ingest-token-file=/nonexistent/token", "--insecure-query"}).ok());
}

TEST(AggregatorFlagsTest, ABadRemoteWriteUrlOrShardCaIsAnError) {
  EXPECT_FALSE(Checked({"--listen-host=127.0.0.1", "--remote-write-url=ftp://x"}).ok());
  auto setup =
      Checked({"--listen-host=127.0.0.1", "--remote-write-url=http://mimir:8080/api/v1/push",
               "--remote-write-interval-s=2"});
  ASSERT_THAT(setup.status(), IsOk());
  ASSERT_TRUE(setup->options.remote_write.has_value());
  EXPECT_EQ(setup->options.remote_write_interval, absl::Seconds(2));
  EXPECT_THAT(Checked({"--listen-host=127.0.0.1", "--shard-peers=a=h:1,b=h:2", "--shard-self=a",
                       "--shard-ca-file=/nonexistent/ca.pem"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--shard-ca-file")));
}

}  // namespace
}  // namespace ncclwatch::aggregator
