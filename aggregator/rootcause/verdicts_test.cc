#include "aggregator/rootcause/verdicts.h"

#include <map>
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

// A verdict changed by a collective that started at `at_ns` on the GPU's clock.
SlowProcess Timed(int gpu, bool slow, int64_t at_ns) {
  SlowProcess s = Verdict(gpu, slow);
  s.at_comm = s.comm;
  s.at_ns = at_ns;
  return s;
}

// The GPUs' clocks in communicator 7, as far as the reports so far have come.
struct JobClocks {
  std::map<int, int64_t> at;  // by GPU
  RootCauseVerdicts::JobClock Clock() const {
    return [this](const ProcessKey& p, const CommKey& comm) {
      if (comm.comm_hash != 7) return int64_t{0};
      auto it = at.find(p.cuda_device);
      return it == at.end() ? int64_t{0} : it->second;
    };
  }
};

TEST(RootCauseVerdictsTest, AVerdictThatLastedAMomentOfTheJobIsNotReportedHoweverLongItStood) {
  // The first steps of a job lift one GPU's window for a quarter of a second of the job; the
  // report that ends it comes a second later. Counted on the aggregator's clock it would have
  // stood for the confirmation time.
  RootCauseVerdicts v;
  JobClocks job;
  job.at[1] = 1 * kS;
  EXPECT_TRUE(v.Observe({Timed(1, true, kS - kS / 10)}, 10 * kS, Nodes(8), job.Clock()).empty());
  EXPECT_TRUE(v.Tick(10 * kS + kS / 2, Nodes(8), job.Clock()).empty());
  EXPECT_TRUE(v.Tick(10 * kS + 3 * kS / 4, Nodes(8), job.Clock()).empty());
  job.at[1] = 2 * kS;  // the next report
  EXPECT_TRUE(v.Observe({Timed(1, false, kS + kS / 6)}, 11 * kS, Nodes(8), job.Clock()).empty());
  EXPECT_TRUE(v.Tick(11 * kS + kS / 4, Nodes(8), job.Clock()).empty());
  job.at[1] = 5 * kS;
  EXPECT_TRUE(v.Tick(14 * kS, Nodes(8), job.Clock()).empty());
  EXPECT_TRUE(v.gpus().empty());
  EXPECT_TRUE(v.AnyPending());
  EXPECT_TRUE(v.Tick(16 * kS, Nodes(8), job.Clock()).empty());
  EXPECT_FALSE(v.AnyPending());  // clear for 5 s: forgotten
  // Slow again later: a new run, not the old one going on.
  job.at[1] = 9 * kS;
  EXPECT_TRUE(v.Observe({Timed(1, true, 8 * kS)}, 20 * kS, Nodes(8), job.Clock()).empty());
  EXPECT_TRUE(v.Tick(20 * kS + kS / 4, Nodes(8), job.Clock()).empty());
}

TEST(RootCauseVerdictsTest, ASlowGpuIsReportedOnceBothClocksShowTheConfirmationTime) {
  // One report carries a second of the job: the GPU was slow over more than half of it.
  RootCauseVerdicts v;
  JobClocks job;
  job.at[1] = 2 * kS;
  EXPECT_TRUE(v.Observe({Timed(1, true, kS + kS / 4)}, 10 * kS, Nodes(8), job.Clock()).empty());
  EXPECT_TRUE(v.Tick(10 * kS + kS / 4, Nodes(8), job.Clock()).empty());
  const VerdictChanges changes = v.Tick(10 * kS + kS / 2, Nodes(8), job.Clock());
  ASSERT_EQ(changes.gpus.size(), 1u);
  EXPECT_TRUE(changes.gpus[0].start);
  EXPECT_EQ(changes.gpus[0].gpu.since_ns, 10 * kS);
  // Slow from a moment near the report's end: it waits for the job to go on.
  RootCauseVerdicts w;
  EXPECT_TRUE(
      w.Observe({Timed(1, true, 2 * kS - kS / 10)}, 10 * kS, Nodes(8), job.Clock()).empty());
  EXPECT_TRUE(w.Tick(12 * kS, Nodes(8), job.Clock()).empty());  // no newer report: no news
  job.at[1] = 3 * kS;
  ASSERT_EQ(w.Tick(12 * kS + kS / 4, Nodes(8), job.Clock()).gpus.size(), 1u);
}

TEST(RootCauseVerdictsTest, OnlyTheCommunicatorOfTheVerdictTellsHowFarTheJobCame) {
  // The process's other communicators' reports, analysed first, reach further into the interval
  // than the one whose collective made the verdict slow: they do not count.
  RootCauseVerdicts v;
  auto clock = [](const ProcessKey&, const CommKey& comm) {
    return comm.comm_hash == 7 ? kS + kS / 10 : 2 * kS;
  };
  EXPECT_TRUE(v.Observe({Timed(1, true, kS)}, 10 * kS, Nodes(8), clock).empty());
  EXPECT_TRUE(v.Tick(11 * kS, Nodes(8), clock).empty());
}

TEST(RootCauseVerdictsTest, AVerdictWhoseCommunicatorWentQuietIsReportedOnTheAggregatorsClock) {
  // The communicator whose collective made the verdict slow reports no more (destroyed, or the
  // job stopped using it) while the GPU stays slow: 5 s found slow on the aggregator's clock do.
  RootCauseVerdicts v;
  JobClocks job;
  job.at[1] = kS + kS / 10;
  EXPECT_TRUE(v.Observe({Timed(1, true, kS)}, 10 * kS, Nodes(8), job.Clock()).empty());
  EXPECT_TRUE(v.Tick(14 * kS, Nodes(8), job.Clock()).empty());
  ASSERT_EQ(v.Tick(15 * kS, Nodes(8), job.Clock()).gpus.size(), 1u);
}

TEST(RootCauseVerdictsTest, AVerdictFlippingBetweenPhasesOfAStepIsOneRun) {
  // An expert GPU's evidence flips with the phases of each step (dispatch, combine): slow, then
  // not for a few milliseconds, over and over. A clear shorter than break_ns does not end the run.
  RootCauseVerdicts v;
  JobClocks job;
  const int64_t ms = kS / 1000;
  int64_t at = kS;
  bool reported = false;
  for (int step = 0; step < 100 && !reported; ++step, at += 10 * ms) {
    job.at[1] = at + 5 * ms;
    const int64_t now = 9 * kS + at;  // the job in real time
    reported |= !v.Observe({Timed(1, true, at)}, now, Nodes(8), job.Clock()).gpus.empty();
    reported |= !v.Observe({Timed(1, false, at + 5 * ms)}, now, Nodes(8), job.Clock()).gpus.empty();
  }
  EXPECT_TRUE(reported);
  EXPECT_GE(at - kS, v.options().confirm_ns);
  EXPECT_LE(at - kS, v.options().confirm_ns + 20 * ms);
  EXPECT_TRUE(v.IsReported(Verdict(1, true).process));
}

TEST(RootCauseVerdictsTest, AClearThatLastsStartsTheRunAgain) {
  RootCauseVerdicts v;
  JobClocks job;
  job.at[1] = kS + kS / 10;
  v.Observe({Timed(1, true, kS)}, 10 * kS, Nodes(8), job.Clock());
  v.Observe({Timed(1, false, kS + kS / 10)}, 10 * kS, Nodes(8), job.Clock());
  // Slow again 0.6 s of the job later: a new run, from there.
  job.at[1] = kS + 7 * kS / 10;
  EXPECT_TRUE(
      v.Observe({Timed(1, true, kS + 7 * kS / 10)}, 11 * kS, Nodes(8), job.Clock()).empty());
  job.at[1] = 2 * kS + kS / 10;  // 0.4 s into the new run, 1.1 s after the first began
  EXPECT_TRUE(v.Tick(12 * kS, Nodes(8), job.Clock()).empty());
  job.at[1] = 2 * kS + 2 * kS / 10;
  const VerdictChanges changes = v.Tick(13 * kS, Nodes(8), job.Clock());
  ASSERT_EQ(changes.gpus.size(), 1u);
  EXPECT_EQ(changes.gpus[0].gpu.since_ns, 11 * kS);  // the second run's start
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
