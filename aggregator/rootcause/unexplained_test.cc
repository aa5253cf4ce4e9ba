#include "aggregator/rootcause/unexplained.h"

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kAfter = kSec;

// GPUs 0-3 on node a, 4-7 on node b: four each.
int FourPerNode(const std::string&) { return 4; }

std::vector<LateGpu> Late(const std::vector<int>& gpus, int64_t since_ns) {
  std::vector<LateGpu> out;
  for (int g : gpus) out.push_back({g, g < 4 ? "a" : "b", since_ns});
  return out;
}

TEST(DecideUnexplainedTest, NothingPagesBeforeTheHold) {
  EXPECT_TRUE(DecideUnexplained(Late({5}, 0), FourPerNode, {}, kAfter - 1, kAfter).empty());
  const UnexplainedPages pages = DecideUnexplained(Late({5}, 0), FourPerNode, {}, kAfter, kAfter);
  EXPECT_TRUE(pages.nodes.empty());
  EXPECT_EQ(pages.gpus, (std::vector<int>{5}));
}

TEST(DecideUnexplainedTest, MostOfANodesGpusLatePageTheNodeOnce) {
  const UnexplainedPages pages =
      DecideUnexplained(Late({4, 5, 6, 1}, 0), FourPerNode, {}, kAfter, kAfter);
  ASSERT_EQ(pages.nodes.size(), 1u);
  EXPECT_EQ(pages.nodes[0].first, "b");
  EXPECT_EQ(pages.nodes[0].second, (std::vector<int>{4, 5, 6}));  // 3 of 4: at least half
  EXPECT_EQ(pages.gpus, (std::vector<int>{1}));  // one GPU of node a is not the node
}

TEST(DecideUnexplainedTest, ANodeWaitsForItsLastGpuRatherThanPagingGpuByGpu) {
  std::vector<LateGpu> late = Late({4, 5, 6}, 0);
  late.push_back({7, "b", kAfter / 2});  // late later than the others
  EXPECT_TRUE(DecideUnexplained(late, FourPerNode, {}, kAfter, kAfter).empty());
  const UnexplainedPages pages = DecideUnexplained(late, FourPerNode, {}, kAfter * 3 / 2, kAfter);
  ASSERT_EQ(pages.nodes.size(), 1u);
  EXPECT_EQ(pages.nodes[0].second.size(), 4u);
  EXPECT_TRUE(pages.gpus.empty());
}

TEST(DecideUnexplainedTest, ANodeNeedsTwoGpusAndHalfOfThoseItHas) {
  // One GPU of a node, or two of eight, is not the node.
  auto eight = [](const std::string&) { return 8; };
  EXPECT_TRUE(DecideUnexplained(Late({4}, 0), FourPerNode, {}, kAfter, kAfter).nodes.empty());
  const UnexplainedPages two_of_eight =
      DecideUnexplained(Late({4, 5}, 0), eight, {}, kAfter, kAfter);
  EXPECT_TRUE(two_of_eight.nodes.empty());
  EXPECT_EQ(two_of_eight.gpus, (std::vector<int>{4, 5}));
  // Where the node is unknown, never.
  const UnexplainedPages unknown =
      DecideUnexplained({{0, "", 0}, {1, "", 0}}, FourPerNode, {}, kAfter, kAfter);
  EXPECT_TRUE(unknown.nodes.empty());
  EXPECT_EQ(unknown.gpus.size(), 2u);
}

TEST(CommFamiliesTest, CommunicatorsOfOneJobWithTheSameSizeAndSpanAreOneFamily) {
  CommFamilies f;
  const CommKey emb0{"job", 1}, emb1{"job", 2}, dp{"job", 3}, other_job{"other", 1};
  f.Set(emb0, 2, 2);
  f.Set(emb1, 2, 2);
  f.Set(dp, 4, 2);
  f.Set(other_job, 2, 2);
  EXPECT_EQ(f.FamilyOf(emb0), (std::set<CommKey>{emb0, emb1}));
  EXPECT_EQ(f.FamilyOf(dp), (std::set<CommKey>{dp}));
  EXPECT_EQ(f.FamilyOf(other_job), (std::set<CommKey>{other_job}));
  EXPECT_EQ(f.families(), 3u);
  // Re-created with another size: it moves.
  f.Set(emb1, 4, 2);
  EXPECT_EQ(f.FamilyOf(emb0), (std::set<CommKey>{emb0}));
  EXPECT_EQ(f.FamilyOf(dp), (std::set<CommKey>{dp, emb1}));
  f.Forget(dp);
  f.Forget(emb1);
  EXPECT_TRUE(f.FamilyOf(dp).empty());
  EXPECT_EQ(f.families(), 2u);
}

}  // namespace
}  // namespace ncclwatch::aggregator
