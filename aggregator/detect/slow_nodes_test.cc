#include "aggregator/detect/slow_nodes.h"

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

std::vector<RankScore> Flags(const std::vector<int>& flagged, int nranks) {
  std::vector<RankScore> scores(nranks);
  for (int r = 0; r < nranks; ++r) scores[r].rank = r;
  for (int r : flagged) scores[r].flagged = true;
  return scores;
}

const CommKey kSlowNodesComm{"job", 0x1};
const std::vector<std::string> kTwoNodes = {"a", "a", "b", "b"};

TEST(SlowNodeTest, ANodeIsSlowOnlyWhenAllItsRanksAreFlagged) {
  SlowNodeDetector d;
  EXPECT_TRUE(d.Update(kSlowNodesComm, kTwoNodes, Flags({2}, 4)).empty());
  auto changes = d.Update(kSlowNodesComm, kTwoNodes, Flags({2, 3}, 4));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].start);
  EXPECT_EQ(changes[0].node, "b");
  EXPECT_EQ(changes[0].ranks, (std::vector<int>{2, 3}));
  EXPECT_TRUE(d.IsSlow(kSlowNodesComm, "b"));
  EXPECT_FALSE(d.IsSlow(kSlowNodesComm, "a"));
  EXPECT_TRUE(d.Update(kSlowNodesComm, kTwoNodes, Flags({2, 3}, 4)).empty()) << "reported once";

  changes = d.Update(kSlowNodesComm, kTwoNodes, Flags({3}, 4));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].start);
  EXPECT_EQ(changes[0].node, "b");
  EXPECT_FALSE(d.IsSlow(kSlowNodesComm, "b"));
}

TEST(SlowNodeTest, OneNodeOrUnknownNodesSingleNothingOut) {
  SlowNodeDetector d;
  EXPECT_TRUE(d.Update(kSlowNodesComm, {"a", "a"}, Flags({0, 1}, 2)).empty())
      << "no other node to compare";
  EXPECT_TRUE(d.Update(kSlowNodesComm, {"", "", "b"}, Flags({0, 1}, 3)).empty()) << "unknown node";
}

TEST(SlowNodeTest, RecoveriesComeBeforeNewVerdictsAndForgetSaysNothing) {
  SlowNodeDetector d;
  const std::vector<std::string> nodes = {"a", "b", "c"};
  ASSERT_EQ(d.Update(kSlowNodesComm, nodes, Flags({0}, 3)).size(), 1u);
  auto changes = d.Update(kSlowNodesComm, nodes, Flags({2}, 3));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_FALSE(changes[0].start);
  EXPECT_EQ(changes[0].node, "a");
  EXPECT_TRUE(changes[1].start);
  EXPECT_EQ(changes[1].node, "c");
  d.Forget(kSlowNodesComm);
  EXPECT_FALSE(d.IsSlow(kSlowNodesComm, "c"));
  EXPECT_EQ(d.Update(kSlowNodesComm, nodes, Flags({2}, 3)).size(), 1u) << "starts over";
}

}  // namespace
}  // namespace ncclwatch::aggregator
