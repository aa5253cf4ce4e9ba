#include "tests/simjob/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace ncclwatch::simjob {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000'000'000;  // a realistic CLOCK_REALTIME value
constexpr int64_t kMs = 1'000'000;

TimelineConfig BaseConfig() {
  TimelineConfig c;
  c.nodes = 2;
  c.ranks_per_node = 2;
  c.t0_ns = kT0;
  return c;
}

int64_t MaxArrival(const StepTimes& st) {
  return *std::max_element(st.arrival.begin(), st.arrival.end());
}

TEST(TimelineTest, EndIsLatestArrivalPlusTransfer) {
  Timeline timeline(BaseConfig());
  for (int k = 0; k < 40; ++k) {
    const StepTimes& st = timeline.Advance();
    ASSERT_EQ(st.index, k);
    const int64_t expected = MaxArrival(st) + timeline.TransferNs(*st.spec);
    for (int r = 0; r < timeline.world_size(); ++r) EXPECT_EQ(st.end[r], expected) << k;
  }
}

TEST(TimelineTest, AllArrivedIsTheLatestArrivalOrNeverWhenSomeoneNeverComes) {
  TimelineConfig config = BaseConfig();
  config.fault = {FaultKind::kHang, 2, kT0 + 100 * kMs};
  Timeline timeline(config);
  for (int k = 0; k < 60; ++k) {
    const StepTimes& st = timeline.Advance();
    const bool hung = st.arrival[2] == kNever;
    for (int r = 0; r < timeline.world_size(); ++r) {
      EXPECT_EQ(st.all_arrived[r], hung ? kNever : MaxArrival(st)) << "step " << k << " rank " << r;
    }
  }
}

TEST(TimelineTest, KernelPhasesSplitTheKernelAtTheLastArrival) {
  // The initial sync lasts until the last party arrived, the final sync is the last 2 us.
  KernelPhaseBounds b = PhaseBounds(1'000, 301'000, 900'000);
  EXPECT_EQ(b.sync_end, 301'000);
  EXPECT_EQ(b.final_sync, 900'000 - kFinalSyncNs);
  // The last arriver does not wait; a short transfer keeps half of itself as compute.
  b = PhaseBounds(1'000, 1'000, 2'000);
  EXPECT_EQ(b.sync_end, 1'000);
  EXPECT_EQ(b.final_sync, 1'500);
  // Never completes: no phases. An arrival outside the kernel is clamped into it.
  EXPECT_EQ(PhaseBounds(1'000, 5'000, kNever).sync_end, kNever);
  EXPECT_EQ(PhaseBounds(1'000, kNever, 9'000).sync_end, 9'000);
  EXPECT_EQ(PhaseBounds(1'000, 0, 9'000).sync_end, 1'000);
}

TEST(TimelineTest, TransferFollowsBusBandwidthConventions) {
  Timeline timeline(BaseConfig());  // 4 ranks over 2 nodes: 25 GB/s = 25 bytes/ns
  const std::vector<StepSpec> w = DefaultWorkload(false);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].op, OpKind::kAllReduce);
  // AllReduce 32 MiB: 2 * 3/4 * 32 MiB / 25 bytes/ns.
  EXPECT_EQ(timeline.TransferNs(w[0]), 2013266);
  // AllGather 8 MiB total: 3/4 * 8 MiB / 25.
  EXPECT_EQ(timeline.TransferNs(w[1]), 251658);
  // SendRecv 1 MiB: 1 MiB / 25.
  EXPECT_EQ(timeline.TransferNs(w[3]), 41943);
  EXPECT_DOUBLE_EQ(BusFactor(OpKind::kReduceScatter, 8), 7.0 / 8);
}

TEST(TimelineTest, ArrivalIsPreviousEndPlusBoundedGap) {
  TimelineConfig config = BaseConfig();
  Timeline timeline(config);
  std::vector<int64_t> prev_end(timeline.world_size(), kT0);
  for (int k = 0; k < 100; ++k) {
    const StepTimes& st = timeline.Advance();
    for (int r = 0; r < timeline.world_size(); ++r) {
      const int64_t gap = st.arrival[r] - prev_end[r];
      EXPECT_EQ(gap, timeline.GapNs(r, k));
      EXPECT_GE(gap, config.gap_ns - config.jitter_ns);
      EXPECT_LE(gap, config.gap_ns + config.jitter_ns);
    }
    prev_end = st.end;
  }
}

TEST(TimelineTest, SlowRankArrivesLastAndHasShortestGpuDuration) {
  TimelineConfig config = BaseConfig();
  config.slow_ranks = {3};
  config.slow_ns = 2 * kMs;  // > 2 * jitter, so rank 3 is always last
  Timeline timeline(config);
  for (int k = 0; k < 50; ++k) {
    const StepTimes& st = timeline.Advance();
    EXPECT_EQ(st.arrival[3], MaxArrival(st));
    // Rank 3's kernel only runs the transfer; everyone else also waits for rank 3.
    const int64_t slow_duration = st.end[3] - st.arrival[3];
    EXPECT_EQ(slow_duration, timeline.TransferNs(*st.spec));
    for (int r = 0; r < 3; ++r) {
      EXPECT_GT(st.end[r] - st.arrival[r], slow_duration + config.slow_ns - 2 * config.jitter_ns);
    }
  }
}

// A node slow before its node-local collective: its ranks take the extra time only there, so they
// are all equally late at the node's own collective (nobody there waits for anyone) and the whole
// node is late at the world collective that follows it.
TEST(TimelineTest, SlowBeforeNodeDelaysOnlyTheNodeLocalStepAndTheOneAfterIt) {
  TimelineConfig config = BaseConfig();
  config.workload = DefaultWorkload(/*with_node_comm=*/true);
  config.slow_ranks = {2, 3};  // node 1
  config.slow_ns = 2 * kMs;
  config.slow_before_node = true;
  Timeline timeline(config);
  const size_t n = config.workload.size();
  for (int k = 0; k < 5 * static_cast<int>(n); ++k) {
    const StepTimes& st = timeline.Advance();
    const bool node_step = st.spec->scope == CommScope::kNode;
    for (int r = 0; r < timeline.world_size(); ++r) {
      const int64_t base = config.gap_ns + config.jitter_ns;
      if (k > 0 && node_step && r >= 2) {
        EXPECT_GE(timeline.GapNs(r, k), base + config.slow_ns - 2 * config.jitter_ns) << k;
      } else {
        EXPECT_LE(timeline.GapNs(r, k), base) << k << " rank " << r;
      }
    }
    // The world step after the node-local one: node 1 arrives last, by about the extra time.
    if (k > static_cast<int>(n) && config.workload[(k - 1) % n].scope == CommScope::kNode) {
      EXPECT_GT(std::min(st.arrival[2], st.arrival[3]),
                std::max(st.arrival[0], st.arrival[1]) + config.slow_ns - 4 * config.jitter_ns);
    }
  }
}

TEST(TimelineTest, ClockSkewShiftsGpuTimersButNotDurations) {
  TimelineConfig skewed_config = BaseConfig();
  skewed_config.clock_skew_ns = 5 * kMs;
  Timeline plain(BaseConfig());
  Timeline skewed(skewed_config);
  for (int k = 0; k < 20; ++k) {
    const StepTimes& a = plain.Advance();
    const StepTimes& b = skewed.Advance();
    ASSERT_EQ(a.arrival, b.arrival);  // skew is a GPU clock property, not a schedule change
    for (int r = 0; r < 4; ++r) {
      const int64_t offset = skewed.NodeOf(r) % 2 == 0 ? -5 * kMs : 5 * kMs;
      for (int c = 0; c < 4; ++c) {
        const uint64_t start = skewed.GpuTimerNs(r, b.arrival[r], c);
        const uint64_t stop = skewed.GpuTimerNs(r, b.end[r], c);
        EXPECT_EQ(start, plain.GpuTimerNs(r, a.arrival[r], c) + offset);
        EXPECT_EQ(stop - start,
                  plain.GpuTimerNs(r, a.end[r], c) - plain.GpuTimerNs(r, a.arrival[r], c));
        EXPECT_EQ(stop - start, static_cast<uint64_t>(b.end[r] - b.arrival[r]));
      }
    }
  }
}

TEST(TimelineTest, ChannelsAreSkewedByAMicrosecond) {
  Timeline timeline(BaseConfig());
  const StepTimes& st = timeline.Advance();
  EXPECT_EQ(timeline.GpuTimerNs(0, st.arrival[0], 3) - timeline.GpuTimerNs(0, st.arrival[0], 0),
            static_cast<uint64_t>(3 * kChannelSkewNs));
}

TEST(TimelineTest, SameConfigGivesSameScheduleAndSeedChangesIt) {
  Timeline a(BaseConfig());
  Timeline b(BaseConfig());
  TimelineConfig other = BaseConfig();
  other.seed = 2;
  Timeline c(other);
  bool differs = false;
  for (int k = 0; k < 30; ++k) {
    const StepTimes& sa = a.Advance();
    const StepTimes& sb = b.Advance();
    const StepTimes& sc = c.Advance();
    EXPECT_EQ(sa.arrival, sb.arrival);
    EXPECT_EQ(sa.end, sb.end);
    differs = differs || sa.arrival != sc.arrival;
  }
  EXPECT_TRUE(differs);
}

TEST(TimelineTest, HungRankStopsArrivingAndItsStepNeverCompletes) {
  TimelineConfig config = BaseConfig();
  config.fault = {FaultKind::kHang, 1, kT0 + 50 * kMs};
  Timeline reference(BaseConfig());
  Timeline hung(config);
  int64_t k = 0;
  for (;; ++k) {
    const StepTimes& ref = reference.Advance();
    const StepTimes& st = hung.Advance();
    ASSERT_LT(k, 1000);
    if (ref.arrival[1] >= config.fault.at_ns) {
      // The hang step: everybody else still arrives and launches; nothing completes.
      EXPECT_EQ(st.arrival[1], kNever);
      for (int r : {0, 2, 3}) EXPECT_EQ(st.arrival[r], ref.arrival[r]);
      for (int r = 0; r < 4; ++r) EXPECT_EQ(st.end[r], kNever);
      EXPECT_TRUE(st.in_run);
      break;
    }
    EXPECT_EQ(st.arrival, ref.arrival);
    EXPECT_EQ(st.end, ref.end);
  }
  EXPECT_GT(k, 0);
  const StepTimes& after = hung.Advance();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(after.arrival[r], kNever);
  EXPECT_FALSE(after.in_run);
}

TEST(TimelineTest, KilledRankTakesDownTheStepInFlight) {
  // Find a step and kill rank 2 halfway through it.
  Timeline reference(BaseConfig());
  for (int i = 0; i < 10; ++i) reference.Advance();
  const StepTimes& victim = reference.Advance();
  const int64_t kill_at = victim.arrival[2] + (victim.end[2] - victim.arrival[2]) / 2;
  const int64_t victim_index = victim.index;

  TimelineConfig config = BaseConfig();
  config.fault = {FaultKind::kKill, 2, kill_at};
  Timeline killed(config);
  for (int64_t k = 0; k < victim_index; ++k) EXPECT_NE(killed.Advance().end[0], kNever);
  const StepTimes& st = killed.Advance();
  EXPECT_NE(st.arrival[2], kNever);  // it arrived before dying
  for (int r = 0; r < 4; ++r) EXPECT_EQ(st.end[r], kNever);
  EXPECT_FALSE(killed.Advance().in_run);
}

TEST(TimelineTest, NodeCommunicatorsUseNvlinkAndIgnoreTheDegradedNic) {
  TimelineConfig config = BaseConfig();
  config.workload = DefaultWorkload(true);
  config.degrade_node = 1;
  config.degrade_factor = 0.5;
  Timeline timeline(config);
  EXPECT_DOUBLE_EQ(timeline.BandwidthGbs(CommScope::kWorld), 12.5);
  EXPECT_DOUBLE_EQ(timeline.BandwidthGbs(CommScope::kNode), 300.0);
  for (int k = 0; k < 4; ++k) timeline.Advance();
  const StepTimes& st = timeline.Advance();
  ASSERT_EQ(st.spec->scope, CommScope::kNode);
  // Each node's communicator completes on its own.
  const int64_t t = timeline.TransferNs(*st.spec);
  EXPECT_EQ(st.end[0], std::max(st.arrival[0], st.arrival[1]) + t);
  EXPECT_EQ(st.end[2], std::max(st.arrival[2], st.arrival[3]) + t);
  EXPECT_EQ(t, std::llround(2.0 * 1 / 2 * (16 << 20) / 300.0));
}

TEST(TimelineTest, SingleNodeWorldUsesNvlink) {
  TimelineConfig config = BaseConfig();
  config.nodes = 1;
  config.ranks_per_node = 8;
  Timeline timeline(config);
  EXPECT_DOUBLE_EQ(timeline.BandwidthGbs(CommScope::kWorld), 300.0);
}

TEST(TimelineTest, RunEndsAtMaxStepsOrEndTime) {
  TimelineConfig config = BaseConfig();
  config.max_steps = 8;
  Timeline by_steps(config);
  int run = 0;
  while (by_steps.Advance().in_run) ++run;
  EXPECT_EQ(run, 8);

  config.max_steps = kNever;
  config.end_ns = kT0 + 100 * kMs;
  Timeline by_time(config);
  int64_t last_first_arrival = 0;
  for (const StepTimes* st = &by_time.Advance(); st->in_run; st = &by_time.Advance()) {
    last_first_arrival = st->first_arrival;
  }
  EXPECT_LT(last_first_arrival, config.end_ns);
  EXPECT_GT(last_first_arrival, config.end_ns - 10 * kMs);  // one step is ~5-7 ms
}

TEST(CommHashTest, DeterministicAndDistinct) {
  EXPECT_EQ(CommHash("job", "world"), CommHash("job", "world"));
  EXPECT_NE(CommHash("job", "world"), CommHash("job", "node0"));
  EXPECT_NE(CommHash("job", "world"), CommHash("job2", "world"));
  EXPECT_NE(CommHash("a", "bc"), CommHash("ab", "c"));  // the separator matters
}

}  // namespace
}  // namespace ncclwatch::simjob

namespace ncclwatch::simjob {
namespace {

TEST(TimelineDegradeTest, TheNicDegradesAtItsTimeAndOnlyForStepsStartingAfterIt) {
  TimelineConfig config;
  config.nodes = 2;
  config.degrade_node = 0;
  config.degrade_factor = 0.5;
  config.degrade_at_ns = 1'000'000'000;
  Timeline timeline(config);
  EXPECT_DOUBLE_EQ(timeline.BandwidthGbs(CommScope::kWorld, 999'999'999), 25.0);
  EXPECT_DOUBLE_EQ(timeline.BandwidthGbs(CommScope::kWorld, 1'000'000'000), 12.5);
  EXPECT_DOUBLE_EQ(timeline.BandwidthGbs(CommScope::kNode, 2'000'000'000), 300.0);
  const StepSpec spec{OpKind::kAllReduce, CommScope::kWorld, 1 << 20};
  EXPECT_NEAR(timeline.TransferNs(spec, 2'000'000'000), 2 * timeline.TransferNs(spec, 0), 1);
}

}  // namespace
}  // namespace ncclwatch::simjob

namespace ncclwatch::simjob {
namespace {

TimelineConfig ThreeD() {
  TimelineConfig config;
  config.nodes = 4;
  config.ranks_per_node = 2;
  config.pp_stages = 2;
  config.workload = ThreeDWorkload();
  return config;
}

TEST(TimelineLayoutTest, ThreeDGroupsShareExactlyOneNode) {
  const Timeline timeline(ThreeD());
  // Node n is stage n % 2 of replica n / 2.
  EXPECT_EQ(timeline.Instances(CommScope::kNode), 4);
  EXPECT_EQ(timeline.Instances(CommScope::kDp), 4);
  EXPECT_EQ(timeline.Instances(CommScope::kPp), 4);
  EXPECT_EQ(timeline.Members(CommScope::kDp, timeline.InstanceOf(CommScope::kDp, 0)),
            (std::vector<int>{0, 4}));  // stage 0, local 0: nodes 0 and 2
  EXPECT_EQ(timeline.Members(CommScope::kPp, timeline.InstanceOf(CommScope::kPp, 0)),
            (std::vector<int>{0, 2}));  // replica 0, local 0: nodes 0 and 1
  EXPECT_EQ(timeline.Members(CommScope::kNode, 3), (std::vector<int>{6, 7}));
  EXPECT_EQ(timeline.NodesSpanned(CommScope::kDp, 0), 2);
  EXPECT_EQ(timeline.NodesSpanned(CommScope::kNode, 0), 1);
}

TEST(TimelineLayoutTest, ADegradedNodeSlowsOnlyTheCrossNodeGroupsThroughIt) {
  TimelineConfig config = ThreeD();
  config.degrade_node = 0;
  config.degrade_factor = 0.5;
  const Timeline timeline(config);
  const auto bw = [&](CommScope scope, int rank) {
    return timeline.BandwidthGbs(scope, timeline.InstanceOf(scope, rank), 0);
  };
  EXPECT_DOUBLE_EQ(bw(CommScope::kDp, 1), 12.5);  // nodes 0, 2
  EXPECT_DOUBLE_EQ(bw(CommScope::kDp, 2), 25.0);  // nodes 1, 3
  EXPECT_DOUBLE_EQ(bw(CommScope::kPp, 1), 12.5);  // nodes 0, 1
  EXPECT_DOUBLE_EQ(bw(CommScope::kPp, 4), 25.0);  // nodes 2, 3
  EXPECT_DOUBLE_EQ(bw(CommScope::kNode, 0), 300.0);
}

TEST(TimelineLayoutTest, EachGroupCompletesOnItsOwnMembers) {
  Timeline timeline(ThreeD());
  const StepTimes& st = timeline.Advance();  // SendRecv on the PP groups
  ASSERT_EQ(st.scope, CommScope::kPp);
  for (int g = 0; g < timeline.Instances(CommScope::kPp); ++g) {
    const std::vector<int>& m = timeline.Members(CommScope::kPp, g);
    const int64_t last = std::max(st.arrival[m[0]], st.arrival[m[1]]);
    for (int r : m) EXPECT_EQ(st.end[r], last + timeline.TransferNs(*st.spec, st.scope, g, last));
  }
}

TEST(TimelineLayoutTest, WorldStepsAfterTheSplitRunOnTheHalves) {
  TimelineConfig config;
  config.nodes = 2;
  config.ranks_per_node = 4;
  config.t0_ns = kT0;
  config.split_at_ns = kT0 + 50 * kMs;
  Timeline timeline(config);
  bool split_seen = false;
  for (int k = 0; k < 40; ++k) {
    const StepTimes& st = timeline.Advance();
    const bool after = st.first_arrival >= config.split_at_ns;
    ASSERT_EQ(st.scope, after ? CommScope::kSplit : CommScope::kWorld) << k;
    split_seen |= after;
  }
  EXPECT_TRUE(split_seen);
  EXPECT_EQ(timeline.Members(CommScope::kSplit, 1), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(timeline.NodesSpanned(CommScope::kSplit, 1), 2);
}

}  // namespace
}  // namespace ncclwatch::simjob
