// End to end: the aggregator is away for 60 s while a 64-rank job keeps reporting through one
// agent (with its spool). When it is back, it must hold every report exactly once: per rank
// process, report ids are a random prefix plus a counter 1, 2, 3, ..., so "every report" means no
// gap in the counter and "exactly once" means no id twice.
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "aggregator/store/store.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

TEST(AggregatorOutageTest, SixtySecondsAwayAndEveryReportArrivesExactlyOnce) {
  ScopedTempDir spool("ncclwatch-outage-spool");
  Pipeline p(1, {}, {"--spool-dir=" + spool.path()});
  ASSERT_TRUE(p.ok()) << p.error();
  constexpr int kRanks = 64;
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=1",
               "--ranks-per-node=" + std::to_string(kRanks),
               "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=outage", "--duration-s=72",
               "--gap-us=20000", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"},
              {}, p.dir() + "/simjob.log");
  // Let every rank's first report through, then take the aggregator away for 60 s.
  ncclwatch::v1::Stats stats;
  ASSERT_TRUE(PollUntil(
      [&] {
        grpc::ClientContext ctx;
        return p.query().GetStats(&ctx, {}, &stats).ok() &&
               stats.reports_ingested() >= static_cast<uint64_t>(kRanks);
      },
      30, 200))
      << p.Logs();
  ASSERT_TRUE(p.StopAggregator()) << p.error();
  // The fault itself is 60 s of absence (not a wait for anything to happen).
  std::this_thread::sleep_for(std::chrono::seconds(60));
  ASSERT_TRUE(p.StartAggregatorAgain()) << p.error();

  ASSERT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  ASSERT_TRUE(p.StopAggregator()) << p.error();

  auto store = aggregator::Store::Open(p.dir() + "/db");
  ASSERT_THAT(store, IsOk()) << store.status();
  std::map<uint64_t, std::map<uint32_t, int>> by_process;  // prefix -> counter -> times stored
  ASSERT_THAT((*store)->ReplayBatches(
                  0,
                  [&](const ncclwatch::v1::NodeBatch& batch, int64_t) {
                    for (const auto& r : batch.reports()) {
                      ++by_process[r.report_id() >> 32][static_cast<uint32_t>(r.report_id())];
                    }
                  }),
              IsOk());
  ASSERT_EQ(by_process.size(), static_cast<size_t>(kRanks));
  size_t total = 0;
  for (const auto& [prefix, counters] : by_process) {
    ASSERT_EQ(counters.begin()->first, 1u) << "process " << prefix << " lost its first report";
    EXPECT_EQ(counters.rbegin()->first, counters.size())
        << "a gap: a report of " << prefix << " never arrived";
    EXPECT_GE(counters.size(), 70u) << "one report per second for 72 s, process " << prefix;
    for (const auto& [counter, times] : counters) {
      ASSERT_EQ(times, 1) << "report " << counter << " of " << prefix << " stored " << times
                          << " times";
    }
    total += counters.size();
  }
  std::printf("after a 60 s aggregator outage: %zu reports of %d ranks, each stored once\n", total,
              kRanks);
}

}  // namespace
}  // namespace ncclwatch::testing
