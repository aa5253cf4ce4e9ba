#include "aggregator/detect/silent_nodes.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

// Two nodes of two GPUs each: a data-parallel communicator over all four and a
// tensor-parallel one within each node, as a small 2D job has them.
class SilentNodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < 4; ++r) {
      const std::string node = r < 2 ? "n0" : "n1";
      EXPECT_TRUE(d_.Member(kDp, r, node, Process(r), 0).empty());
      EXPECT_TRUE(d_.Member(r < 2 ? kTp0 : kTp1, r % 2, node, Process(r), 0).empty());
    }
  }
  static std::string Process(int r) {
    return "host" + std::to_string(r / 2) + "/" + std::to_string(r);
  }

  const CommKey kDp{"job", 1};
  const CommKey kTp0{"job", 2};
  const CommKey kTp1{"job", 3};
  SilentNodeDetector d_;
};

TEST_F(SilentNodesTest, ANodeWhoseEveryProcessIsSilentIsFlaggedOnceItsLastGoesQuiet) {
  // Only the data-parallel communicator has peers left to be silent against (the hang detector
  // flags nothing in a communicator wholly on the dead node).
  EXPECT_TRUE(d_.SetSilent(kDp, 2, true, 10).empty()) << "one of its two processes is still heard";
  EXPECT_FALSE(d_.IsSilent("job", "n1"));
  const auto changes = d_.SetSilent(kDp, 3, true, 11);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].start);
  EXPECT_EQ(changes[0].node.job_id, "job");
  EXPECT_EQ(changes[0].node.node, "n1");
  EXPECT_EQ(changes[0].node.processes, 2);
  EXPECT_EQ(changes[0].node.since_ns, 11);
  EXPECT_TRUE(d_.IsSilent("job", "n1"));
  EXPECT_FALSE(d_.IsSilent("job", "n0"));
  ASSERT_EQ(d_.Silent().size(), 1u);

  // One of its processes reports again: the node is back.
  const auto back = d_.SetSilent(kDp, 2, false, 20);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_FALSE(back[0].start);
  EXPECT_EQ(back[0].node.node, "n1");
  EXPECT_EQ(back[0].node.since_ns, 11);
  EXPECT_TRUE(d_.Silent().empty());
}

TEST_F(SilentNodesTest, AProcessWithAnyRankSilentIsSilentAndCountsOnce) {
  // Silent in two communicators, one process each: still two processes, both silent.
  EXPECT_TRUE(d_.SetSilent(kDp, 2, true, 10).empty());
  EXPECT_TRUE(d_.SetSilent(kTp1, 0, true, 10).empty());   // the same process, another comm
  EXPECT_TRUE(d_.SetSilent(kTp1, 0, false, 12).empty());  // still silent in kDp
  EXPECT_EQ(d_.SetSilent(kDp, 3, true, 13).size(), 1u);
  EXPECT_TRUE(d_.SetSilent(kDp, 3, true, 14).empty()) << "no change, no verdict";
}

TEST_F(SilentNodesTest, ANodeGoingQuietAfterTheRestOfTheJobIsNotSingledOut) {
  // n0 goes quiet while n1 reports: n0 is the finding.
  EXPECT_TRUE(d_.SetSilent(kDp, 0, true, 10).empty());
  EXPECT_EQ(d_.SetSilent(kDp, 1, true, 11).size(), 1u);
  // Then n1 goes quiet too: nothing of the job reports any more (it is ending, or the
  // aggregator hears nobody), so n1 is not singled out.
  EXPECT_TRUE(d_.SetSilent(kDp, 2, true, 12).empty());
  EXPECT_TRUE(d_.SetSilent(kDp, 3, true, 13).empty());
  const auto silent = d_.Silent();
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].node, "n0");
}

TEST(SilentNodesAloneTest, ANodeWithOneProcessIsLeftToTheRankFinding) {
  SilentNodeDetector d;
  const CommKey dp{"job", 1};
  d.Member(dp, 0, "n0", "a", 0);
  d.Member(dp, 1, "n1", "b", 0);
  EXPECT_TRUE(d.SetSilent(dp, 1, true, 10).empty());
  EXPECT_TRUE(d.Silent().empty());
  // A rank whose node is unknown is never counted.
  d.Member(dp, 2, "", "c", 0);
  EXPECT_TRUE(d.SetSilent(dp, 2, true, 10).empty());
  // A communicator whose every rank has no node is not kept: forgetting the job's others and it,
  // in either order, is safe.
  const CommKey nameless{"job", 2};
  d.Member(nameless, 0, "", "a", 0);
  d.Forget(dp);
  d.Forget(nameless);
  d.Forget(dp);
  EXPECT_TRUE(d.Silent().empty());
}

TEST_F(SilentNodesTest, AProcessSeenAnewOnASilentNodeBringsItBack) {
  d_.SetSilent(kDp, 2, true, 10);
  ASSERT_EQ(d_.SetSilent(kDp, 3, true, 11).size(), 1u);
  // The job restarted there: a new process reports in a new communicator.
  const auto back = d_.Member(CommKey{"job", 9}, 0, "n1", "host1/new", 30);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_FALSE(back[0].start);
  EXPECT_EQ(back[0].node.node, "n1");
}

TEST_F(SilentNodesTest, ForgettingACommunicatorDropsItsRanksWithoutAWord) {
  d_.SetSilent(kDp, 2, true, 10);
  ASSERT_EQ(d_.SetSilent(kDp, 3, true, 11).size(), 1u);
  // The data-parallel communicator expires: n1's processes keep only their tensor-parallel
  // ranks, none silent; the node is no longer flagged, and no end is reported.
  d_.Forget(kDp);
  EXPECT_FALSE(d_.IsSilent("job", "n1"));
  // What is left still works: n1's processes are counted once each.
  EXPECT_TRUE(d_.SetSilent(kTp1, 0, true, 20).empty());
  EXPECT_EQ(d_.SetSilent(kTp1, 1, true, 21).size(), 1u);
  // Everything forgotten: nothing is kept.
  d_.Forget(kTp0);
  d_.Forget(kTp1);
  d_.Forget(kDp);
  EXPECT_TRUE(d_.Silent().empty());
  EXPECT_TRUE(d_.SetSilent(kTp1, 0, false, 30).empty());
}

TEST(SilentNodesMoveTest, ARankThatMovesToAnotherProcessLeavesTheOldOne) {
  SilentNodeDetector d;
  const CommKey dp{"job", 1};
  d.Member(dp, 0, "n0", "a", 0);
  d.Member(dp, 1, "n0", "b", 0);
  d.Member(dp, 2, "n1", "c", 0);
  d.SetSilent(dp, 0, true, 5);
  // Rank 0 is now another process (re-created communicator) that has not been silent.
  d.Member(dp, 0, "n0", "a2", 6);
  EXPECT_TRUE(d.SetSilent(dp, 1, true, 7).empty()) << "a2 reports: n0 is not silent";
  ASSERT_EQ(d.SetSilent(dp, 0, true, 8).size(), 1u);
}

}  // namespace
}  // namespace ncclwatch::aggregator
