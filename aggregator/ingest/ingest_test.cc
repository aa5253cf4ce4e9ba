// Ingest's start-up replay when it is shorter than the stored history (--replay-max-mib): a
// finding announced before the replayed window and still open is re-derived within it, and must
// not be announced a second time.
#include "aggregator/ingest/ingest.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

// Rank 0 of a 2-rank communicator whose rank 1 never reports.
ncclwatch::v1::NodeBatch HalfReported(uint64_t seq) {
  ncclwatch::v1::NodeBatch batch;
  batch.set_agent_id("node-a");
  batch.set_batch_seq(seq);
  auto* report = batch.add_reports();
  report->set_report_id(seq);
  auto* id = report->mutable_identity();
  id->set_job_id("job");
  id->set_comm_hash(7);
  id->set_rank(0);
  id->set_nranks(2);
  id->set_n_nodes(1);
  return batch;
}

int UnreportedStarts(const Store& store) {
  int n = 0;
  const auto events = store.ListEvents(0, 1000);
  EXPECT_TRUE(events.ok()) << events.status();
  if (!events.ok()) return -1;
  for (const auto& e : *events) {
    n += e.kind() == ncclwatch::v1::Event::RANKS_UNREPORTED &&
         e.phase() == ncclwatch::v1::Event::START;
  }
  return n;
}

TEST(IngestReplayTest, AFindingOpenBeforeAShortenedReplayIsNotAnnouncedAgain) {
  char tmpl[] = "/tmp/ncclwatch-ingest-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto store = Store::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  AnalyzerOptions options;
  options.coverage.after_ns = 1;  // rank 1's absence is a finding at once
  int64_t first_received = 0;
  {
    Analyzer analyzer(options);
    MetricRegistry metrics;
    Ingest ingest(**store, analyzer, metrics);
    ASSERT_TRUE(ingest.Push(HalfReported(1)).ok());
    ASSERT_TRUE(
        (*store)->ReplayBatches(0, [&](const auto&, int64_t t) { first_received = t; }).ok());
    ingest.Tick(first_received + 1);  // the finding, stored
    ASSERT_EQ(UnreportedStarts(**store), 1);
    ASSERT_TRUE(ingest.Push(HalfReported(2)).ok());  // received later: inside the window below
  }
  // A restart that replays only from after the finding was stored, remembering the events of the
  // whole --replay-s window.
  Analyzer analyzer(options);
  MetricRegistry metrics;
  Ingest ingest(**store, analyzer, metrics);
  const int64_t window_start = 0;
  auto replayed = ingest.Replay(first_received + 2, first_received + 1'000'000'000, window_start);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(*replayed, 1u);
  const auto jobs = analyzer.Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].unreported_ranks(), 1u);  // re-derived...
  EXPECT_EQ(UnreportedStarts(**store), 1);    // ...but not announced again
  store->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclwatch::aggregator
