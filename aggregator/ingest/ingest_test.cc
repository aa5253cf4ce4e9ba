// Ingest: pushes acknowledged once durable and analysed after, in order; the start-up replay when
// it is shorter than the stored history (--replay-max-mib): a finding announced before the
// replayed window and still open is re-derived within it, and must not be announced a second time.
#include "aggregator/ingest/ingest.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "aggregator/analysis/answers.h"
#include "common/status_matchers.h"
#include "common/sync.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;

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
  EXPECT_THAT(events, IsOk());
  if (!events.ok()) return -1;
  for (const auto& e : *events) {
    n += e.kind() == ncclwatch::v1::Event::RANKS_UNREPORTED &&
         e.phase() == ncclwatch::v1::Event::START;
  }
  return n;
}

// A temporary store directory, removed at the end.
class StoreDir {
 public:
  StoreDir() {
    char tmpl[] = "/tmp/ncclwatch-ingest-XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    path_ = tmpl;
  }
  ~StoreDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Pushes `n` batches one after the other, each once the one before is acknowledged but not
// waiting for any analysis (the analysis thread works meanwhile). `released` counts the batches
// Ingest has let go of. One push at a time: RocksDB hands writes and log syncs that overlap
// between their threads in code ThreadSanitizer cannot see into (the end-to-end tests push
// concurrently).
void PushAll(Ingest& ingest, int n, std::atomic<int>& released, std::atomic<int>& acked) {
  for (int i = 0; i < n; ++i) {
    auto* batch = new ncclwatch::v1::NodeBatch(HalfReported(i + 1));
    batch->set_agent_id("node-" + std::to_string(i));
    std::shared_ptr<const ncclwatch::v1::NodeBatch> held(
        batch, [&released](const ncclwatch::v1::NodeBatch* b) {
          ++released;
          delete b;
        });
    ncclwatch::Notification answered;
    ingest.PushAsync(std::move(held), "", [&](absl::StatusOr<ncclwatch::v1::BatchAck> ack) {
      EXPECT_THAT(ack, IsOk());
      acked += ack.ok() && !ack->duplicate();
      answered.Notify();
    });
    answered.WaitForNotification();
  }
}

// A store, an analyzer and the counts of PushAll.
class IngestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = Store::Open(dir_.path());
    ASSERT_THAT(opened, IsOk());
    store_ = *std::move(opened);
  }

  StoreDir dir_;
  std::unique_ptr<Store> store_;
  Analyzer analyzer_;
  MetricRegistry metrics_;
  std::atomic<int> released_ = 0;
  std::atomic<int> acked_ = 0;
};

TEST_F(IngestTest, WhatWasAcknowledgedIsAnalysedBeforeTheNextQueryAndThenLetGo) {
  Ingest ingest(*store_, analyzer_, metrics_);
  PushAll(ingest, 200, released_, acked_);
  EXPECT_EQ(acked_, 200);
  ingest.AwaitAnalysed();  // what the Query API does before it answers
  EXPECT_EQ(ingest.Stats().reports_ingested(), 200u);
  EXPECT_EQ(released_, 200) << "every batch is let go of once analysed";
  EXPECT_EQ(analyzer_.answers().Jobs().size(), 1u);
  EXPECT_EQ(metrics_.GetGauge("ncclwatch_aggregator_analysis_queue_reports", "")->value(), 0);
  // Nothing acknowledged was left out of the analysis, and each batch is analysed once.
  EXPECT_EQ(metrics_.GetCounter("ncclwatch_aggregator_batches_stored_total", "")->value(), 200u);
}

TEST_F(IngestTest, StoppingAnalysesEveryBatchAlreadyAcknowledged) {
  {
    Ingest ingest(*store_, analyzer_, metrics_);
    PushAll(ingest, 100, released_, acked_);
  }  // stops at once, whatever is still queued for analysis
  EXPECT_EQ(acked_, 100);
  EXPECT_EQ(released_, 100);
  EXPECT_EQ(metrics_.GetCounter("ncclwatch_aggregator_reports_ingested_total", "")->value(), 100u)
      << "the destructor waits for the analysis of every acknowledged batch";
}

TEST(IngestReplayTest, AFindingOpenBeforeAShortenedReplayIsNotAnnouncedAgain) {
  char tmpl[] = "/tmp/ncclwatch-ingest-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto store = Store::Open(dir);
  ASSERT_THAT(store, IsOk());
  AnalyzerOptions options;
  options.coverage.after_ns = 1;  // rank 1's absence is a finding at once
  int64_t first_received = 0;
  {
    Analyzer analyzer(options);
    MetricRegistry metrics;
    Ingest ingest(**store, analyzer, metrics);
    ASSERT_THAT(ingest.Push(HalfReported(1)), IsOk());
    ASSERT_THAT((*store)->ReplayBatches(0, [&](const auto&, int64_t t) { first_received = t; }),
                IsOk());
    ingest.Tick(first_received + 1);  // the finding, stored
    ASSERT_EQ(UnreportedStarts(**store), 1);
    ASSERT_THAT(ingest.Push(HalfReported(2)), IsOk());  // received later: inside the window below
  }
  // A restart that replays only from after the finding was stored, remembering the events of the
  // whole --replay-s window.
  Analyzer analyzer(options);
  MetricRegistry metrics;
  Ingest ingest(**store, analyzer, metrics);
  const int64_t window_start = 0;
  auto replayed = ingest.Replay(first_received + 2, first_received + 1'000'000'000, window_start);
  ASSERT_THAT(replayed, IsOk());
  EXPECT_EQ(*replayed, 1u);
  const auto jobs = analyzer.answers().Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].unreported_ranks(), 1u);  // re-derived...
  EXPECT_EQ(UnreportedStarts(**store), 1);    // ...but not announced again
  store->reset();
  std::filesystem::remove_all(dir);
}

// Rank `rank` of a 2-rank communicator, one rank per node, as its node's agent sends it.
ncclwatch::v1::NodeBatch NodeReport(int rank, uint64_t seq) {
  ncclwatch::v1::NodeBatch batch = HalfReported(seq);
  batch.set_agent_id("node-" + std::to_string(rank));
  auto* id = batch.mutable_reports(0)->mutable_identity();
  id->set_rank(rank);
  id->set_n_nodes(2);
  return batch;
}

// The RANK_SILENT findings a start-up replay announces for this history, as the live run stored
// it: both nodes report every 100 ms for 10 s; then the store refuses pushes (a full disk) until
// it takes them again at 12 s, when node 1's agent, retrying at once, delivers its backlog; node
// 0's agent was backing off and delivers its own at 16.5 s. Live, the aggregator listened again at
// 12 s and judged no one silent. `recorded`: the store kept that moment.
int SilentFoundByReplay(bool recorded) {
  StoreDir dir;
  auto store = Store::Open(dir.path());
  EXPECT_THAT(store, IsOk());
  if (!store.ok()) return -1;
  constexpr int64_t kMs = 1'000'000;
  const int64_t t0 = absl::ToUnixNanos(absl::Now()) - 60'000 * kMs;
  uint64_t seq[2] = {0, 0};
  const auto put = [&](int rank, int64_t at_ms) {
    EXPECT_THAT((*store)->PutBatchIfNew(NodeReport(rank, ++seq[rank]), t0 + at_ms * kMs), IsOk());
  };
  for (int64_t ms = 0; ms <= 20'000; ms += 100) {
    if (ms <= 10'000 || ms >= 12'000) put(1, ms);
    if (ms <= 10'000 || ms >= 16'500) put(0, ms);
  }
  if (recorded) {
    EXPECT_THAT((*store)->RecordListeningStart(t0 + 12'000 * kMs), IsOk());
  }
  Analyzer analyzer;
  MetricRegistry metrics;
  Ingest ingest(**store, analyzer, metrics);
  const auto replayed = ingest.Replay(t0 - 1, t0 + 20'100 * kMs);
  EXPECT_THAT(replayed, IsOk());
  const auto events = (*store)->ListEvents(0, 1000);
  EXPECT_THAT(events, IsOk());
  if (!events.ok()) return -1;
  int n = 0;
  for (const auto& e : *events) {
    n += e.kind() == ncclwatch::v1::Event::RANK_SILENT && e.phase() == ncclwatch::v1::Event::START;
  }
  return n;
}

TEST(IngestReplayTest, AReplayListensAgainWhereTheLiveRunDidSoALateBacklogIsNotSilence) {
  EXPECT_EQ(SilentFoundByReplay(/*recorded=*/true), 0)
      << "node 0's backlog came within the agents' retry time of the store taking pushes again";
  // What the store's record changes: without it, the replay takes the 6.5 s gap for silence.
  EXPECT_EQ(SilentFoundByReplay(/*recorded=*/false), 1);
}

TEST(IngestReplayTest, EveryStartAndResumeIsKeptNewestLast) {
  StoreDir dir;
  auto store = Store::Open(dir.path());
  ASSERT_THAT(store, IsOk());
  for (int64_t t = 1; t <= static_cast<int64_t>(Store::kMaxListeningStarts) + 10; ++t) {
    ASSERT_THAT((*store)->RecordListeningStart(t * 1000), IsOk());
  }
  {
    Analyzer analyzer;
    MetricRegistry metrics;
    Ingest ingest(**store, analyzer, metrics);
    ASSERT_THAT(ingest.Replay(0, 5'000'000), IsOk());  // a start-up records itself
  }
  const auto starts = (*store)->ListeningStarts();
  ASSERT_THAT(starts, IsOk());
  ASSERT_EQ(starts->size(), Store::kMaxListeningStarts) << "bounded";
  EXPECT_EQ(starts->front(), 12 * 1000) << "the oldest are let go of";
  EXPECT_EQ(starts->back(), 5'000'000) << "the start-up itself";
  EXPECT_TRUE(std::is_sorted(starts->begin(), starts->end()));
}

}  // namespace
}  // namespace ncclwatch::aggregator
