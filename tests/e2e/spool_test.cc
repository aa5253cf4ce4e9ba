// End to end: the agent's durable spool. With the aggregator away, the agent spools every batch;
// it is then killed with SIGKILL mid-stream and restarted on the same spool. Once the aggregator is
// back, everything that was in the spool is delivered exactly once, the plugins reconnected on
// their own, and the training job never blocked.
#include "agent/spool.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "absl/time/clock.h"
#include "aggregator/store/store.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

using ReportKey = std::tuple<std::string, uint64_t, int, uint64_t>;  // job, comm, rank, report id

ReportKey KeyOf(const ncclwatch::v1::RankReport& r) {
  return {r.identity().job_id(), r.identity().comm_hash(), r.identity().rank(), r.report_id()};
}

size_t SpooledBatches(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    n += e.path().extension() == ".batch" ? 1 : 0;
  }
  return n;
}

TEST(SpoolEndToEndTest, AKilledAgentReplaysItsSpoolExactlyOnceAndPluginsReconnect) {
  ScopedTempDir spool_dir("ncclwatch-spool-e2e");
  const std::string& spool = spool_dir.path();
  Pipeline p(1, {}, {"--spool-dir=" + spool});
  ASSERT_TRUE(p.ok()) << p.error();
  ASSERT_TRUE(p.StopAggregator()) << p.error();  // away: batches pile up in the spool

  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=1",
               "--ranks-per-node=4", "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=spool",
               "--duration-s=6", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=200"},
              {}, p.dir() + "/simjob.log");
  // The agent writes the spool directory: wait until a few batches are there.
  ASSERT_TRUE(PollUntil([&] { return SpooledBatches(spool) >= 5; }, 20, 50)) << p.Logs();

  const int64_t killed_at = absl::GetCurrentTimeNanos();
  ASSERT_TRUE(p.RestartAgent(0, SIGKILL)) << p.error();
  // What the killed agent left: every batch file created before the kill.
  std::set<ReportKey> spooled;
  for (const auto& e : std::filesystem::directory_iterator(spool)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".batch" || std::stoll(name.substr(0, 20)) >= killed_at) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream data;
    data << in.rdbuf();
    absl::StatusOr<ncclwatch::v1::NodeBatchBytes> file = agent::ParseSpoolFile(data.str());
    ASSERT_THAT(file, IsOk()) << name << ": " << file.status();
    ncclwatch::v1::NodeBatch batch;
    ASSERT_TRUE(batch.ParseFromString(file->SerializeAsString())) << name;
    for (const auto& r : batch.reports()) spooled.insert(KeyOf(r));
  }
  ASSERT_GT(spooled.size(), 10u);

  ASSERT_TRUE(p.StartAggregatorAgain()) << p.error();
  EXPECT_EQ(job.Wait(), 0) << job.Log();  // the training side never blocked
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  EXPECT_EQ(SpooledBatches(spool), 0u) << "everything acknowledged leaves the spool";
  ASSERT_TRUE(p.StopAggregator()) << p.error();

  auto store = aggregator::Store::Open(p.dir() + "/db");
  ASSERT_THAT(store, IsOk()) << store.status();
  std::map<ReportKey, int> stored;
  std::set<std::string> agents;
  int64_t newest_interval_end = 0;
  ASSERT_THAT((*store)->ReplayBatches(0,
                                      [&](const ncclwatch::v1::NodeBatch& batch, int64_t) {
                                        agents.insert(batch.agent_id());
                                        for (const auto& r : batch.reports()) {
                                          ++stored[KeyOf(r)];
                                          newest_interval_end = std::max<int64_t>(
                                              newest_interval_end, r.interval_end_unix_ns());
                                        }
                                      }),
              IsOk());
  for (const ReportKey& k : spooled) {
    ASSERT_EQ(stored[k], 1) << "report " << std::get<3>(k) << " of rank " << std::get<2>(k);
  }
  for (const auto& [k, n] : stored) EXPECT_EQ(n, 1) << "report " << std::get<3>(k) << " twice";
  EXPECT_EQ(agents.size(), 2u) << "batches of the killed agent and of its successor";
  // The plugins reconnected to the new agent: reports of intervals after the kill arrived.
  EXPECT_GT(newest_interval_end, killed_at + 1'000'000'000) << p.Logs();
  std::printf("spool: %zu reports spooled before SIGKILL, all delivered once; %zu reports stored\n",
              spooled.size(), stored.size());
}

}  // namespace
}  // namespace ncclwatch::testing

namespace ncclwatch::testing {
namespace {

// Value of an unlabelled sample in Prometheus text, -1 if absent.
// The value of the first sample of `name` (whatever its labels), -1 if there is none.
double MetricValue(const std::string& text, const std::string& name) {
  for (size_t at = text.find("\n" + name); at != std::string::npos;
       at = text.find("\n" + name, at + 1)) {
    const char next = text[at + 1 + name.size()];
    if (next != ' ' && next != '{') continue;  // a longer name
    const size_t value = text.find(' ', text.find_first_of(" }", at + 1));
    return std::stod(text.substr(value + 1));
  }
  return -1;
}

TEST(SpoolEndToEndTest, AFullSpoolDropsTheOldestCountsThemAndTheAgentKeepsRunning) {
  ScopedTempDir spool("ncclwatch-spool-full");
  constexpr int64_t kMaxBytes = 200 << 10;
  Pipeline p(1, {},
             {"--spool-dir=" + spool.path(), "--spool-max-bytes=" + std::to_string(kMaxBytes)});
  ASSERT_TRUE(p.ok()) << p.error();
  ASSERT_TRUE(p.StopAggregator()) << p.error();
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=1",
               "--ranks-per-node=8", "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=full",
               "--duration-s=14", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=100"},
              {}, p.dir() + "/simjob.log");
  // Wait, on the agent's counters, until the spool has dropped something.
  std::string metrics;
  ASSERT_TRUE(PollUntil(
      [&] {
        metrics = p.AgentGet(0, "/metrics").second;
        return MetricValue(metrics, "ncclwatch_agent_spool_dropped_batches_total") > 0;
      },
      30, 200))
      << metrics;
  EXPECT_LE(MetricValue(metrics, "ncclwatch_agent_spool_bytes"), kMaxBytes);
  EXPECT_EQ(p.AgentGet(0, "/healthz").first, 200);  // still running

  ASSERT_TRUE(p.StartAggregatorAgain()) << p.error();
  ASSERT_EQ(job.Wait(), 0) << job.Log();
  metrics = p.AgentGet(0, "/metrics").second;
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  ASSERT_TRUE(p.StopAggregator()) << p.error();
  const double dropped = MetricValue(metrics, "ncclwatch_agent_spool_dropped_reports_total");

  // Reports stored + reports the spool dropped = reports the plugins sent (the highest counter of
  // each process); what was dropped is the oldest, so each process's stored counters are a tail.
  auto store = aggregator::Store::Open(p.dir() + "/db");
  ASSERT_THAT(store, IsOk()) << store.status();
  std::map<uint64_t, std::set<uint32_t>> by_process;
  ASSERT_THAT((*store)->ReplayBatches(0,
                                      [&](const ncclwatch::v1::NodeBatch& batch, int64_t) {
                                        for (const auto& r : batch.reports()) {
                                          by_process[r.report_id() >> 32].insert(
                                              static_cast<uint32_t>(r.report_id()));
                                        }
                                      }),
              IsOk());
  ASSERT_EQ(by_process.size(), 8u);
  double sent = 0;
  double stored = 0;
  for (const auto& [prefix, counters] : by_process) {
    sent += *counters.rbegin();
    stored += static_cast<double>(counters.size());
    EXPECT_EQ(*counters.rbegin() - *counters.begin() + 1, counters.size())
        << "only the oldest may be missing";
  }
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(stored + dropped, sent) << metrics;
  std::printf("full spool: %.0f reports sent, %.0f dropped oldest-first and counted, %.0f stored\n",
              sent, dropped, stored);
}

}  // namespace
}  // namespace ncclwatch::testing
