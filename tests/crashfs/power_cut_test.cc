// Acknowledged batches survive a power cut: a child process stores batches through the journaling
// file system (journaling_fs.h), reports each acknowledgement on a pipe and is SIGKILLed; the
// parent then cuts the power (drops everything that was not synced) and opens the store again.
// With the aggregator's synced writes every acknowledged batch is there; with the sync turned off,
// the same run loses them, which shows that the power cut is real.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "aggregator/store/store.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/crashfs/journaling_fs.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

ncclwatch::v1::NodeBatch Batch(uint64_t seq) {
  ncclwatch::v1::NodeBatch b;
  b.set_agent_id("node-a");
  b.set_batch_seq(seq);
  auto* r = b.add_reports();
  r->mutable_identity()->set_job_id("j");
  r->set_report_id(seq);
  return b;
}

// Stores up to 200 batches in a child that dies by SIGKILL; returns how many it acknowledged.
int AcknowledgeThenDie(const std::string& db, const std::string& journal, bool synced) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    auto env = NewJournalingEnv(journal);
    auto store = aggregator::Store::Open(db, env.get(), synced);
    if (!store.ok()) _exit(3);
    for (uint64_t seq = 1; seq <= 200; ++seq) {
      auto stored = (*store)->PutBatchIfNew(Batch(seq), static_cast<int64_t>(seq) * 1000);
      if (!stored.ok() || !*stored) _exit(4);
      const char ack = 1;  // acknowledged: the agent would now delete its spooled copy
      if (write(fds[1], &ack, 1) != 1) _exit(5);
      // Then its points, unsynced, as Ingest writes them (re-derived from the batch log after a
      // crash): the power cut has something unsynced to drop after the last batch.
      std::vector<SeriesPoint> points;
      for (int i = 0; i < 50; ++i) {
        points.push_back(
            {"ncclwatch_test", {{"i", std::to_string(i)}}, 1.0, static_cast<int64_t>(seq) * 1000});
      }
      if (!(*store)->AppendPoints(points).ok()) _exit(6);
    }
    kill(getpid(), SIGKILL);  // no clean close: whatever is not on disk stays behind
  }
  close(fds[1]);
  int acked = 0;
  char c;
  while (read(fds[0], &c, 1) == 1) ++acked;
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? acked : -1;
}

uint64_t StoredAfterPowerCut(const std::string& db, const std::string& journal, PowerCut* cut) {
  auto applied = ApplyPowerCut(journal);
  EXPECT_THAT(applied, IsOk()) << applied.status();
  if (applied.ok()) *cut = *applied;
  auto store = aggregator::Store::Open(db);
  EXPECT_THAT(store, IsOk()) << store.status();
  if (!store.ok()) return 0;
  auto n = (*store)->CountBatches();
  return n.ok() ? *n : 0;
}

TEST(PowerCutTest, EveryAcknowledgedBatchSurvivesAPowerCut) {
  ScopedTempDir dir("ncclwatch-power-cut");
  const int acked = AcknowledgeThenDie(dir.path() + "/db", dir.path() + "/journal", true);
  ASSERT_EQ(acked, 200);
  PowerCut cut;
  EXPECT_EQ(StoredAfterPowerCut(dir.path() + "/db", dir.path() + "/journal", &cut), 200u);
  EXPECT_GT(cut.bytes_dropped, 0u) << "the unsynced points after the last batch were dropped";
  std::printf(
      "synced acks: %d acknowledged, 200 stored after the power cut (%d files cut, %d "
      "removed, %llu bytes dropped)\n",
      acked, cut.files_truncated, cut.files_removed,
      static_cast<unsigned long long>(cut.bytes_dropped));
}

TEST(PowerCutTest, WithoutTheSyncAcknowledgedBatchesAreLost) {
  ScopedTempDir dir("ncclwatch-power-cut");
  const int acked = AcknowledgeThenDie(dir.path() + "/db", dir.path() + "/journal", false);
  ASSERT_EQ(acked, 200);
  PowerCut cut;
  const uint64_t stored = StoredAfterPowerCut(dir.path() + "/db", dir.path() + "/journal", &cut);
  EXPECT_LT(stored, 200u) << "the power cut dropped nothing: the test could not fail";
  EXPECT_GT(cut.bytes_dropped, 0u);
  std::printf("unsynced acks: %d acknowledged, %llu stored after the power cut\n", acked,
              static_cast<unsigned long long>(stored));
}

}  // namespace
}  // namespace ncclwatch::testing
