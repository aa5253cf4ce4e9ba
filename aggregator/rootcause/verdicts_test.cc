#include "aggregator/rootcause/verdicts.h"

#include <string>
#include <vector>

#include "common/test_util.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::kS;

SlowProcess Verdict(int gpu, bool slow, const std::string& node = "n0") {
  SlowProcess s;
  s.process = ProcessKey{"job", "host-" + node, static_cast<uint32_t>(100 + gpu), gpu};
  s.node = node;
  s.slow = slow;
  s.comm = CommKey{"job", 7};
  s.rank = gpu;
  return s;
}

// Every node has `per_node` GPUs.
RootCauseVerdicts::GpusOnNode Nodes(int per_node) {
  return [per_node](const std::string&, const std::string&) { return per_node; };
}

TEST(RootCauseVerdictsTest, AGpuIsReportedOnceFoundSlowForTheConfirmationTime) {
  RootCauseVerdicts v;
  EXPECT_TRUE(v.Observe({Verdict(1, true)}, 10 * kS, Nodes(8)).empty());
  EXPECT_TRUE(v.Tick(10 * kS + kS / 4, Nodes(8)).empty());
  const VerdictChanges changes = v.Tick(10 * kS + kS / 2, Nodes(8));
  ASSERT_EQ(changes.gpus.size(), 1u);
  EXPECT_TRUE(changes.gpus[0].start);
  EXPECT_EQ(changes.gpus[0].gpu.since_ns, 10 * kS);  // since it was first found slow
  EXPECT_EQ(changes.gpus[0].gpu.evidence.process.cuda_device, 1);
  EXPECT_TRUE(v.IsReported(Verdict(1, true).process));
}

TEST(RootCauseVerdictsTest, AHiccupShorterThanTheConfirmationTimeIsNotReported) {
  RootCauseVerdicts v;
  EXPECT_TRUE(v.Observe({Verdict(1, true)}, 10 * kS, Nodes(8)).empty());
  EXPECT_TRUE(v.Observe({Verdict(1, false)}, 10 * kS + kS / 4, Nodes(8)).empty());
  EXPECT_TRUE(v.Tick(20 * kS, Nodes(8)).empty());
  EXPECT_TRUE(v.gpus().empty());
}

TEST(RootCauseVerdictsTest, BurstsWithinTheHoldAreOneFinding) {
  RootCauseVerdicts v;
  v.Observe({Verdict(1, true)}, 0, Nodes(8));
  ASSERT_EQ(v.Tick(kS, Nodes(8)).gpus.size(), 1u);
  // Throttled in bursts: not slow, slow again, not slow; nothing changes until the last clear
  // has held for 30 s.
  EXPECT_TRUE(v.Observe({Verdict(1, false)}, 5 * kS, Nodes(8)).empty());
  EXPECT_TRUE(v.Observe({Verdict(1, true)}, 9 * kS, Nodes(8)).empty());
  EXPECT_TRUE(v.Observe({Verdict(1, false)}, 12 * kS, Nodes(8)).empty());
  EXPECT_TRUE(v.Tick(41 * kS, Nodes(8)).empty());
  const VerdictChanges end = v.Tick(42 * kS, Nodes(8));
  ASSERT_EQ(end.gpus.size(), 1u);
  EXPECT_FALSE(end.gpus[0].start);
  EXPECT_EQ(end.gpus[0].gpu.since_ns, 0);
  EXPECT_TRUE(v.gpus().empty());
}

TEST(RootCauseVerdictsTest, ANodeIsSlowWhenSeveralOfItsGpusAre) {
  RootCauseVerdicts v;
  // Two GPUs of a two-GPU node: the node.
  v.Observe({Verdict(0, true, "a"), Verdict(1, true, "a")}, 0, Nodes(2));
  VerdictChanges changes = v.Tick(kS, Nodes(2));
  ASSERT_EQ(changes.gpus.size(), 2u);
  ASSERT_EQ(changes.nodes.size(), 1u);
  EXPECT_TRUE(changes.nodes[0].start);
  EXPECT_EQ(changes.nodes[0].node, "a");
  EXPECT_EQ(changes.nodes[0].gpus.size(), 2u);
  EXPECT_TRUE(v.IsNodeSlow("job", "a"));
  // One of them recovers: one GPU is not a node.
  v.Observe({Verdict(0, false, "a")}, 2 * kS, Nodes(2));
  changes = v.Tick(32 * kS, Nodes(2));
  ASSERT_EQ(changes.nodes.size(), 1u);
  EXPECT_FALSE(changes.nodes[0].start);
  EXPECT_FALSE(v.IsNodeSlow("job", "a"));
}

TEST(RootCauseVerdictsTest, OneGpuOrAFewOfALargeNodeAreNotTheNode) {
  RootCauseVerdicts v;
  v.Observe({Verdict(0, true, "a")}, 0, Nodes(2));
  EXPECT_TRUE(v.Tick(kS, Nodes(2)).nodes.empty());
  // Two slow GPUs on different nodes.
  v.Observe({Verdict(1, true, "b")}, 2 * kS, Nodes(2));
  EXPECT_TRUE(v.Tick(3 * kS, Nodes(2)).nodes.empty());
  // Two of eight on one node: fewer than half.
  RootCauseVerdicts w;
  w.Observe({Verdict(0, true, "c"), Verdict(1, true, "c")}, 0, Nodes(8));
  const VerdictChanges changes = w.Tick(kS, Nodes(8));
  EXPECT_EQ(changes.gpus.size(), 2u);
  EXPECT_TRUE(changes.nodes.empty());
}

}  // namespace
}  // namespace ncclwatch::aggregator
