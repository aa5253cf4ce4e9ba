// Unit tests of the job model's hangs (job_model.h): a fabric hang, a hung rank, a killed rank:
// the stuck op, what the host queued behind it, and who waits for whom.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tests/simjob/job_model.h"
#include "tests/simjob/job_model_test_util.h"

namespace ncclwatch::simjob {
namespace {

using testing::BaseConfig;
using testing::kMs;
using testing::kS;
using testing::kT0;
using testing::RankOps;
using testing::RunAll;

// The ops of `rank` that started but never end, and those queued behind them.
struct Stuck {
  int started_never_ending = 0;
  int queued = 0;
  const JobOp* stuck = nullptr;
  std::vector<const JobOp*> behind;
};
Stuck StuckOps(const std::vector<JobOp>& ops) {
  Stuck s;
  for (const JobOp& op : ops) {
    if (op.gpu_start_ns != kNever && op.gpu_end_ns == kNever) {
      ++s.started_never_ending;
      s.stuck = &op;
    }
    if (op.gpu_start_ns == kNever) {
      ++s.queued;
      s.behind.push_back(&op);
    }
  }
  return s;
}

TEST(JobModelTest, FabricHangBlocksStreamsAndTheHostStopsAfterHostAhead) {
  JobModelConfig c = BaseConfig();
  c.end_ns = kT0 + 2 * kS;
  c.fabric_hang_comm = "dp0";  // ranks 0 and 2
  c.fabric_hang_at_ns = kT0 + 300 * kMs;
  JobModel model(c);
  const RankOps ops = RunAll(&model);
  ASSERT_TRUE(model.hung());
  bool queued_on_other_comm = false;
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(model.Fate(r), RankFate::kStuck);
    const Stuck s = StuckOps(ops[r]);
    ASSERT_EQ(s.started_never_ending, 1) << "rank " << r;
    // The host enqueued exactly host_ahead more ops, which never start.
    EXPECT_EQ(s.queued, c.host_ahead) << "rank " << r;
    EXPECT_EQ(ops[r].size() - 1 - c.host_ahead, static_cast<size_t>(s.stuck->index));
    // The stuck op of ranks 0 and 2 (on dp0) had every party: only its transfer never ends.
    if (r == 0 || r == 2) {
      EXPECT_NE(s.stuck->all_arrived_ns, kNever) << "rank " << r;
      EXPECT_GE(s.stuck->all_arrived_ns, s.stuck->gpu_start_ns) << "rank " << r;
    }
    for (const JobOp* op : s.behind) {
      EXPECT_EQ(op->gpu_end_ns, kNever);
      EXPECT_EQ(op->all_arrived_ns, kNever);
      EXPECT_GE(op->host_enqueue_ns, ops[r][op->index - 1].host_enqueue_ns);
      queued_on_other_comm |= !(op->comm == s.stuck->comm);
    }
    if (r == 0 || r == 2) {
      EXPECT_EQ(model.layout().CommName(s.stuck->comm), "dp0");
      EXPECT_GE(s.stuck->gpu_start_ns, kT0 + 300 * kMs - 40 * kMs);
    }
  }
  EXPECT_TRUE(queued_on_other_comm);
}

TEST(JobModelTest, HungRankStopsEnqueuingAndItsPeersWaitForIt) {
  JobModelConfig c = BaseConfig();
  c.end_ns = kT0 + 2 * kS;
  c.hang_rank = 5;
  c.hang_at_ns = kT0 + 300 * kMs;
  JobModel model(c);
  const RankOps ops = RunAll(&model);
  ASSERT_TRUE(model.hung());
  EXPECT_EQ(model.Fate(5), RankFate::kHostStopped);
  for (const JobOp& op : ops[5]) {
    EXPECT_LT(op.host_enqueue_ns, c.hang_at_ns);
    EXPECT_NE(op.gpu_end_ns, kNever);  // what it enqueued still ran
  }
  // Its TP partner waits for it in an op of a communicator that contains rank 5.
  const Stuck partner = StuckOps(ops[4]);
  ASSERT_NE(partner.stuck, nullptr);
  EXPECT_EQ(partner.stuck->all_arrived_ns, kNever);  // rank 5 never arrives
  const std::vector<int>& m =
      model.layout().Members(partner.stuck->comm.family, partner.stuck->comm.instance);
  EXPECT_NE(std::find(m.begin(), m.end(), 5), m.end());
  for (int r = 0; r < 8; ++r) {
    if (r != 5) {
      EXPECT_EQ(model.Fate(r), RankFate::kStuck) << r;
    }
  }
}

TEST(JobModelTest, KilledRankTakesItsOpInFlightDown) {
  JobModelConfig c = BaseConfig();
  c.end_ns = kT0 + 2 * kS;
  c.kill_rank = 3;
  c.kill_at_ns = kT0 + 300 * kMs;
  JobModel model(c);
  const RankOps ops = RunAll(&model);
  ASSERT_TRUE(model.hung());
  EXPECT_EQ(model.Fate(3), RankFate::kKilled);
  for (int r = 0; r < 8; ++r) {
    for (const JobOp& op : ops[r]) {
      // A dead host enqueues nothing; nothing of rank 3 completes after its death, and the
      // rest of the job stalls within an iteration.
      if (r == 3) {
        EXPECT_LT(op.host_enqueue_ns, c.kill_at_ns);
      }
      if (op.gpu_end_ns == kNever) continue;
      EXPECT_LE(op.gpu_end_ns, r == 3 ? c.kill_at_ns : c.kill_at_ns + 50 * kMs);
    }
  }
}

}  // namespace
}  // namespace ncclwatch::simjob
