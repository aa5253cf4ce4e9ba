// End to end: the aggregator is killed with SIGKILL while agents are pushing, and restarted on the
// same RocksDB directory. Nothing acknowledged may be lost -- every batch the agents got an ack
// for is stored, and every point derived from those batches is stored with its value -- and the
// detectors resume from the replayed batches instead of starting empty.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "aggregator/analysis/analyzer.h"
#include "aggregator/store/store.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

using ncclwatch::v1::Event;

TEST(RestartEndToEndTest, SigkillDuringIngestLosesNothingAcknowledgedAndDetectorsResume) {
  Pipeline p(2, {"--store-rank-series"});
  ASSERT_TRUE(p.ok()) << p.error();
  EventRecorder events(p.query());
  Process job(
      {Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=2", "--ranks-per-node=4",
       "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=crash", "--duration-s=8", "--slow-rank=5",
       "--clock-skew-ms=20", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=200"},
      {}, p.dir() + "/simjob.log");

  // Once the slow rank is flagged, reports are flowing every 200 ms from 8 ranks: kill mid-ingest.
  ASSERT_TRUE(events.WaitFor([](const Event& e) { return e.kind() == Event::STRAGGLER; }, 20))
      << p.Logs();
  grpc::ClientContext before_ctx;
  ncclwatch::v1::ListStragglersResponse before;
  ASSERT_THAT(p.query().ListStragglers(&before_ctx, {}, &before), IsOk());
  ASSERT_EQ(before.root_causes_size(), 1);
  events.Stop();
  ASSERT_TRUE(p.RestartAggregator(SIGKILL)) << p.error();

  // The restarted aggregator rebuilt the detectors from the stored batches before serving: the
  // GPU is a root cause since the original moment, not since new data arrived.
  grpc::ClientContext after_ctx;
  ncclwatch::v1::ListStragglersResponse after;
  const grpc::Status after_status = p.query().ListStragglers(&after_ctx, {}, &after);
  ASSERT_THAT(after_status, IsOk()) << after_status.error_message() << "\n" << p.Logs();
  ASSERT_EQ(after.root_causes_size(), 1) << p.Logs();
  EXPECT_EQ(after.root_causes(0).rank(), 5);
  EXPECT_EQ(after.root_causes(0).since_unix_ns(), before.root_causes(0).since_unix_ns());

  ASSERT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();  // everything the agents held is acknowledged now

  // The stored series through the CLI: rank 5's AllReduce times, and a readable refusal of a bad
  // selector.
  auto [query_code, query_out] = RunToCompletion(
      {Binaries::Cli(), "query", "--aggregator=" + p.AggregatorAddr(),
       R"(nccl_collective_exec_time_microseconds{job_id="crash",rank="5",collective="AllReduce"})"},
      p.dir() + "/cli-query.log");
  EXPECT_EQ(query_code, 0) << query_out;
  EXPECT_NE(query_out.find("nccl_collective_exec_time_microseconds{job_id=\"crash\""),
            std::string::npos)
      << query_out;
  EXPECT_NE(query_out.find(" points\n"), std::string::npos) << query_out;
  // The detection series are stored too: rank 5's straggler flag was 1.
  auto [flag_code, flag_out] =
      RunToCompletion({Binaries::Cli(), "query", "--json", "--aggregator=" + p.AggregatorAddr(),
                       R"(ncclwatch_straggler{job_id="crash",rank="5"})"},
                      p.dir() + "/cli-query-flag.log");
  EXPECT_EQ(flag_code, 0) << flag_out;
  EXPECT_NE(flag_out.find("\"value\":1"), std::string::npos) << flag_out;
  auto [bad_code, bad_out] =
      RunToCompletion({Binaries::Cli(), "query", "--aggregator=" + p.AggregatorAddr(), "bad{"},
                      p.dir() + "/cli-bad-query.log");
  EXPECT_EQ(bad_code, 1) << bad_out;
  EXPECT_NE(bad_out.find("expected a label name at position 4"), std::string::npos) << bad_out;
  ASSERT_TRUE(p.StopAggregator()) << p.error();

  auto store = aggregator::Store::Open(p.dir() + "/db");
  ASSERT_THAT(store, IsOk()) << store.status();
  // Agents number their batches 1, 2, 3, ... and retry each until it is acknowledged, so after
  // they stopped cleanly the store must hold every sequence number up to the last.
  std::map<std::string, std::set<uint64_t>> seqs;
  std::vector<SeriesPoint> derived;
  aggregator::AnalyzerOptions options;
  options.report_points = true;
  aggregator::Analyzer analyzer(options);
  ASSERT_THAT((*store)->ReplayBatches(0,
                                      [&](const ncclwatch::v1::NodeBatch& batch, int64_t received) {
                                        seqs[batch.agent_id()].insert(batch.batch_seq());
                                        for (const auto& r : batch.reports()) {
                                          aggregator::Ingested in = analyzer.Ingest(r, received);
                                          derived.insert(derived.end(), in.points.begin(),
                                                         in.points.end());
                                        }
                                      }),
              IsOk());
  ASSERT_EQ(seqs.size(), 2u);
  for (const auto& [agent, s] : seqs) {
    EXPECT_EQ(s.size(), *s.rbegin()) << agent << ": a batch is missing below " << *s.rbegin();
  }
  // Every point derived from the stored batches is in the store, with its value. The store keeps
  // one value per series and millisecond, as Prometheus does: a report stamped in the same
  // millisecond as the one before it (a communicator's final report right after a periodic one)
  // replaces its value, in every pass that writes them (live, replay), since each writes in batch
  // order. So the value expected at each (series, millisecond) is the last one derived there.
  std::map<std::string, uint64_t> ids;
  for (const auto& series : (*store)->Series()) {
    ids[aggregator::SeriesIdentity(series.name, series.labels)] = series.id;
  }
  ASSERT_GT(derived.size(), 100u);
  std::map<std::pair<std::string, int64_t>, double> expected;
  size_t replaced = 0;
  for (const auto& point : derived) {
    auto [it, added] = expected.try_emplace(
        {aggregator::SeriesIdentity(point.name, point.labels), point.time_ms}, point.value);
    if (added || it->second == point.value) continue;  // the same report stored twice is no change
    it->second = point.value;
    ++replaced;
  }
  size_t missing = 0;
  std::string which;  // what is wrong with each missing point, to tell a lost write from the rest
  for (const auto& [at, value] : expected) {
    const auto& [identity, time_ms] = at;
    auto id = ids.find(identity);
    auto stored = id == ids.end() ? absl::StatusOr<std::vector<aggregator::Point>>(
                                        absl::NotFoundError("no such series in the index"))
                                  : (*store)->ReadPoints(id->second, time_ms, time_ms);
    if (stored.ok() && stored->size() == 1 && (*stored)[0].value == value) continue;
    ++missing;
    absl::StrAppend(&which, "\n  ", identity, " at ", time_ms, " ms = ", value, ": ",
                    !stored.ok()          ? std::string(stored.status().message())
                    : stored->size() != 1 ? absl::StrCat(stored->size(), " points stored")
                                          : absl::StrCat("stored ", (*stored)[0].value));
  }
  EXPECT_EQ(missing, 0u) << "of " << expected.size() << " points:" << which;
  std::printf(
      "after SIGKILL and restart: %zu batches from 2 agents, all %zu points present (%zu more "
      "replaced in the same millisecond)\n",
      seqs.begin()->second.size() + seqs.rbegin()->second.size(), expected.size(), replaced);
}

}  // namespace
}  // namespace ncclwatch::testing
