// The GPU-measured wait for peers (profiler ABI v7 KernelPhase, SampleColumn sync_wait_ns) from
// reports to findings: the Analyzer judges lateness on it when every rank measured it.
#include <cstdint>
#include <vector>

#include "aggregator/analysis/analyzer.h"
#include "gtest/gtest.h"
#include "proto/samples.h"

namespace ncclwatch::aggregator {
namespace {

// Rank `rank` of 4, each on a node of its own whose GPU clock is seconds away from the others'.
// Rank 2 arrives 3 ms late, so the others' kernels wait ~3 ms for it; rank 0's kernels move their
// data 5 ms slower (a slow link, not lateness). With `waits`, each sample carries its wait.
ncclwatch::v1::RankReport SyncWaitReport(int rank, uint64_t first_seq, int n, bool waits) {
  ncclwatch::v1::RankReport r;
  auto* id = r.mutable_identity();
  id->set_job_id("job-v7");
  id->set_comm_hash(0xbeef);
  id->set_comm_name("dp");
  id->set_rank(rank);
  id->set_nranks(4);
  id->set_n_nodes(4);
  id->set_cuda_device(0);
  id->set_node("node-" + std::to_string(rank));
  SampleColumnWriter writer(&r);
  for (int i = 0; i < n; ++i) {
    const uint64_t seq = first_seq + i;
    const uint64_t wait = rank == 2 ? 20'000 + (seq % 5) * 1'000 : 3'000'000 + (seq % 7) * 1'000;
    const uint64_t transfer = rank == 0 ? 5'000'000 : 100'000;
    Sample s{seq, uint64_t{1'000'000'000} * (rank + 1) + seq * 30'000'000, wait + transfer};
    if (waits) s.sync_wait_ns = wait;
    writer.Add("AllReduce", "RING_LL128", 1 << 22, 8, s);
  }
  return r;
}

std::vector<ncclwatch::v1::Event> StragglerEvents(bool waits) {
  Analyzer analyzer;
  std::vector<ncclwatch::v1::Event> events;
  for (int interval = 0; interval < 4; ++interval) {
    for (int rank = 0; rank < 4; ++rank) {
      for (auto& e :
           analyzer.Ingest(SyncWaitReport(rank, interval * 10, 10, waits), 1'000'000'000).events) {
        if (e.kind() == ncclwatch::v1::Event::STRAGGLER) events.push_back(e);
      }
    }
  }
  return events;
}

TEST(AnalyzerSyncWaitTest, MeasuredWaitsForPeersNameTheLateRankAndSaySo) {
  const std::vector<ncclwatch::v1::Event> events = StragglerEvents(/*waits=*/true);
  ASSERT_EQ(events.size(), 1u);
  const ncclwatch::v1::StragglerInfo& s = events[0].straggler();
  EXPECT_EQ(events[0].phase(), ncclwatch::v1::Event::START);
  EXPECT_EQ(s.rank(), 2);
  EXPECT_EQ(s.node(), "node-2");
  EXPECT_TRUE(s.sync_wait_measured());
  EXPECT_FALSE(s.clocks_aligned());
  EXPECT_NEAR(s.lateness_seconds(), 0.003, 0.0002);
  EXPECT_NE(events[0].summary().find("GPU-measured waits for peers"), std::string::npos)
      << events[0].summary();
}

TEST(AnalyzerSyncWaitTest, WithoutWaitsTheSlowLinkMisleadsKernelDurations) {
  // The control: the same job from plugins without KernelPhase. Rank 0's long kernels read as
  // every other rank arriving late; what the waits add is exactly this difference.
  const std::vector<ncclwatch::v1::Event> events = StragglerEvents(/*waits=*/false);
  ASSERT_FALSE(events.empty());
  bool other_than_two = false;
  for (const auto& e : events) {
    EXPECT_FALSE(e.straggler().sync_wait_measured());
    other_than_two |= e.straggler().rank() != 2;
  }
  EXPECT_TRUE(other_than_two);
}

}  // namespace
}  // namespace ncclwatch::aggregator
