#include "aggregator/detect/degraded.h"

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

// A communicator of the simulated cluster: its ranks' nodes (rank i runs on nodes[i]).
struct CommOnNodes {
  CommKey key;
  std::vector<std::string> nodes;
  int n_nodes() const {
    return static_cast<int>(std::set<std::string>(nodes.begin(), nodes.end()).size());
  }
};

// `n_nodes` is c.n_nodes(), counted once per collective by the caller (a 256-rank communicator's
// count is 256 string insertions).
RankInterval BandwidthInterval(const CommOnNodes& c, int n_nodes, int rank, double gbs) {
  RankInterval r;
  r.rank = rank;
  r.nranks = static_cast<int>(c.nodes.size());
  r.n_nodes = n_nodes;
  r.node = c.nodes[rank];
  // Ten 16 MiB AllReduces whose fastest ran at `gbs` bus bandwidth (1 GB/s = 1 byte/ns).
  const int n = static_cast<int>(c.nodes.size());
  const double bus_bytes = 2.0 * (n - 1) / n * (16 << 20);
  r.stats.push_back(
      OpStats{"AllReduce", "16-17MB", false, 10, 10ull * (16 << 20), bus_bytes / gbs / 1000});
  return r;
}

constexpr int64_t kSecond = 1'000'000'000;

// A 16 MiB AllReduce of `c` joined across its ranks, rank r's kernel running at gbs[r] bus
// bandwidth (its wait for the last arriver included): every rank's report registers it, then the
// collective is judged by its shortest kernel. Returns what changed.
std::vector<DegradedChange> Collective(DegradedDetector& d, const CommOnNodes& c,
                                       const std::vector<double>& gbs, int64_t now_ns) {
  const int n = static_cast<int>(c.nodes.size());
  const double bus_bytes = 2.0 * (n - 1) / n * (16 << 20);
  const int n_nodes = c.n_nodes();
  uint64_t fastest = UINT64_MAX;
  for (int r = 0; r < n; ++r) {
    d.Observe(c.key, BandwidthInterval(c, n_nodes, r, gbs[r]));
    fastest = std::min(fastest, static_cast<uint64_t>(bus_bytes / gbs[r]));
  }
  return d.ObserveCollective(c.key, n, "AllReduce", 16 << 20, fastest, now_ns);
}

// Four nodes; a hybrid pair communicator per neighbouring pair of nodes (2 ranks, one per node,
// like data-parallel groups) and an NVLink-only communicator per node (tensor parallel).
class DegradedTest : public ::testing::Test {
 protected:
  DegradedTest() {
    for (int i = 0; i < 4; ++i) {
      std::string a = "node-" + std::to_string(i), b = "node-" + std::to_string((i + 1) % 4);
      pairs_.push_back({{"job", 0x100u + i}, {a, b}});
      tp_.push_back({{"job", 0x200u + i}, {a, a, a, a}});
    }
  }

  // One flush interval: every rank of every communicator reports. `net(node_a, node_b)` and
  // `nvlink(node)` give bandwidths; jitter of +/-5% is added.
  std::vector<DegradedChange> Interval(double net_degraded_factor, int degraded_node,
                                       double nvlink_factor = 1.0) {
    std::vector<DegradedChange> all;
    std::uniform_real_distribution<double> jitter(0.95, 1.05);
    const std::string bad = "node-" + std::to_string(degraded_node);
    // Two collectives a window: the first of a window closes the last one.
    for (int k = 0; k < 2; ++k) {
      now_ns_ += kSecond / 2;
      for (const CommOnNodes& c : pairs_) {
        bool through = degraded_node >= 0 && (c.nodes[0] == bad || c.nodes[1] == bad);
        std::vector<double> gbs;
        for (int r = 0; r < 2; ++r) {
          gbs.push_back(20 * jitter(rng_) * (through ? net_degraded_factor : 1.0));
        }
        for (auto& ch : Collective(detector_, c, gbs, now_ns_)) all.push_back(ch);
      }
      for (const CommOnNodes& c : tp_) {
        bool on_bad = degraded_node >= 0 && c.nodes[0] == bad;
        std::vector<double> gbs;
        for (int r = 0; r < 4; ++r) {
          gbs.push_back(150 * jitter(rng_) * (on_bad ? nvlink_factor : 1.0));
        }
        for (auto& ch : Collective(detector_, c, gbs, now_ns_)) all.push_back(ch);
      }
    }
    return all;
  }

  DegradedDetector detector_{DegradedOptions{0.2, 3, 64, 8}};
  std::mt19937 rng_{7};
  int64_t now_ns_ = 0;
  std::vector<CommOnNodes> pairs_, tp_;
};

TEST_F(DegradedTest, HealthyJitterFlagsNothing) {
  for (int i = 0; i < 200; ++i) EXPECT_TRUE(Interval(1.0, -1).empty()) << i;
  EXPECT_TRUE(detector_.Degraded().empty());
  EXPECT_TRUE(detector_.Suspects().empty());
}

TEST_F(DegradedTest, ADegradedNicFlagsItsHybridCommunicatorsAndNamesTheNode) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Interval(1.0, -1).empty());
  std::vector<DegradedChange> changes;
  int interval = 0;
  for (; interval < 10 && changes.empty(); ++interval) changes = Interval(0.5, 2);
  // A window is judged when the next one's first collective arrives.
  EXPECT_EQ(interval, 4) << "flagged after K=3 low windows";
  // Both pair communicators through node-2 degrade (in one interval), then node-2 is named.
  for (int i = 0; i < 3; ++i) {
    for (auto& c : Interval(0.5, 2)) changes.push_back(c);
  }
  std::set<uint64_t> degraded;
  std::vector<std::string> suspects;
  for (const auto& c : changes) {
    ASSERT_TRUE(c.start);
    if (c.node) {
      suspects.push_back(c.suspect.node);
    } else {
      degraded.insert(c.comm.comm.comm_hash);
      EXPECT_TRUE(c.comm.hybrid);
      EXPECT_NEAR(c.comm.bus_gbs / c.comm.baseline_gbs, 0.5, 0.08);
    }
  }
  EXPECT_EQ(degraded, (std::set<uint64_t>{0x101, 0x102}));  // node-1/2 and node-2/3
  EXPECT_EQ(suspects, std::vector<std::string>{"node-2"});
  ASSERT_EQ(detector_.Suspects().size(), 1u);
  EXPECT_EQ(detector_.Suspects()[0].degraded_comms, 2);

  // The link is repaired: both recover and the suspicion ends.
  std::vector<DegradedChange> ends;
  for (int i = 0; i < 5; ++i) {
    for (auto& c : Interval(1.0, -1)) ends.push_back(c);
  }
  int comm_ends = 0, node_ends = 0;
  for (const auto& c : ends) {
    EXPECT_FALSE(c.start);
    (c.node ? node_ends : comm_ends)++;
  }
  EXPECT_EQ(comm_ends, 2);
  EXPECT_EQ(node_ends, 1);
  EXPECT_TRUE(detector_.Suspects().empty());
}

TEST_F(DegradedTest, WhenNvlinkDegradesTooTheNetworkIsNotBlamed) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Interval(1.0, -1).empty());
  std::vector<DegradedChange> changes;
  for (int i = 0; i < 6; ++i) {
    for (auto& c : Interval(0.5, 2, /*nvlink_factor=*/0.5)) changes.push_back(c);
  }
  int comms = 0;
  for (const auto& c : changes) {
    EXPECT_FALSE(c.node) << "node " << c.suspect.node << " named although NVLink degraded too";
    comms += c.node ? 0 : 1;
  }
  EXPECT_EQ(comms, 3);  // two pairs and node-2's NVLink communicator
}

TEST(DegradedSingleCommTest, OneWorldCommunicatorDegradesWithoutNamingANode) {
  DegradedDetector detector(DegradedOptions{0.2, 3, 64, 8});
  CommOnNodes world{{"job", 0x1}, {"a", "a", "b", "b"}};
  std::vector<DegradedChange> changes;
  for (int i = 0; i < 30; ++i) {
    double gbs = i < 15 ? 20 : 12;
    for (auto& c : Collective(detector, world, {gbs, gbs, gbs, gbs}, i * kSecond)) {
      changes.push_back(c);
    }
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].node);
  EXPECT_TRUE(changes[0].start);
  EXPECT_EQ(changes[0].comm.nodes, (std::set<std::string>{"a", "b"}));
  EXPECT_TRUE(detector.Suspects().empty()) << "both nodes are equally suspect: nobody is named";
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

TEST(DegradedWaitingTest, PeersWaitingForASlowRankAreNotADegradedWire) {
  // An 8-rank hybrid communicator in which ranks 4-7 (a slow node) arrive late to everything:
  // ranks 0-3 wait on every operation, so even their fastest one shows a third of the wire speed.
  // The collective's shortest kernel is the wire's.
  DegradedDetector detector(DegradedOptions{0.2, 2, 64, 8});
  CommOnNodes world{{"job", 0x300}, {"a", "a", "a", "a", "b", "b", "b", "b"}};
  int64_t now = 0;
  for (int i = 0; i < 10; ++i, now += kSecond) {
    EXPECT_TRUE(Collective(detector, world, {7, 7, 7, 7, 21, 21, 21, 21}, now).empty()) << i;
  }
  EXPECT_FALSE(detector.IsDegraded(world.key));
  // When the wire itself halves, it is flagged.
  bool flagged = false;
  for (int i = 0; i < 4; ++i, now += kSecond) {
    for (const auto& c : Collective(detector, world, {5, 5, 5, 5, 10.5, 10.5, 10.5, 10.5}, now)) {
      flagged |= c.start && !c.node;
    }
  }
  EXPECT_TRUE(flagged);
}

TEST(DegradedWaitingTest, ALargeCommunicatorWhoseLastArriverChangesIsNeverDegraded) {
  // A 256-rank data-parallel group across nodes: in every collective one rank (a different one
  // each time) arrives last and sees the wire, the other 255 wait. Never degraded.
  DegradedDetector detector(DegradedOptions{0.2, 1, 64, 8});
  CommOnNodes dp{{"job", 0x600}, {}};
  for (int r = 0; r < 256; ++r) dp.nodes.push_back("node-" + std::to_string(r));
  for (int i = 0; i < 60; ++i) {
    std::vector<double> gbs(256, 6.0);
    gbs[(i * 37) % 256] = 20.0;
    EXPECT_TRUE(Collective(detector, dp, gbs, i * kSecond / 2).empty()) << i;
  }
  EXPECT_FALSE(detector.IsDegraded(dp.key));
}

TEST(DegradedWindowTest, OneSlowCollectiveInAWindowIsNotADegradedWire) {
  // Ten collectives a window: one of them slowed by a passing burst of traffic leaves the window
  // at full speed; a window all of whose collectives are slow is low.
  DegradedDetector detector(DegradedOptions{0.2, 1, 64, 8});
  CommOnNodes pair{{"job", 0x700}, {"a", "b"}};
  int64_t now = 0;
  auto window = [&](double slow_gbs, int slow_count) {
    std::vector<DegradedChange> all;
    for (int k = 0; k < 10; ++k, now += kSecond / 10) {
      const double gbs = k < slow_count ? slow_gbs : 20.0;
      for (auto& c : Collective(detector, pair, {gbs, gbs}, now)) all.push_back(c);
    }
    return all;
  };
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(window(20, 0).empty());
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(window(5, 1).empty()) << i;
  EXPECT_FALSE(detector.IsDegraded(pair.key));
  // The next window's first collective closes the all-slow one.
  std::vector<DegradedChange> changes = window(5, 10);
  for (auto& c : window(20, 0)) changes.push_back(c);
  ASSERT_FALSE(changes.empty());
  EXPECT_TRUE(changes[0].start);
}

TEST(DegradedWindowTest,
     AWindowThatSpansTheMomentTheWireHalvedDoesNotTeachTheBaselineTheSlowSpeed) {
  // The window in which the NIC lost half its bandwidth holds a few collectives from before and
  // many from after. Its best collective is healthy, so the window is not low, but its slow
  // collectives must not enter the baseline, or the baseline's median becomes the slow speed and
  // the wire is never flagged.
  DegradedDetector detector(DegradedOptions{0.2, 1, 64, 8});
  CommOnNodes pair{{"job", 0x800}, {"a", "b"}};
  int64_t now = 0;
  std::vector<DegradedChange> changes;
  auto collective = [&](double gbs) {
    for (auto& c : Collective(detector, pair, {gbs, gbs}, now)) changes.push_back(c);
  };
  for (int w = 0; w < 4; ++w, now += kSecond) {
    for (int k = 0; k < 20; ++k) collective(20);
  }
  ASSERT_TRUE(changes.empty());
  // That window: 5 healthy collectives, then 50 at half speed.
  for (int k = 0; k < 5; ++k) collective(20);
  for (int k = 0; k < 50; ++k) collective(10);
  now += kSecond;
  EXPECT_FALSE(detector.IsDegraded(pair.key)) << "that window's best is healthy";
  for (int w = 0; w < 3; ++w, now += kSecond) {
    for (int k = 0; k < 20; ++k) collective(10);
  }
  ASSERT_FALSE(changes.empty()) << "the halved wire was learned as the baseline";
  EXPECT_TRUE(changes[0].start);
  EXPECT_TRUE(detector.IsDegraded(pair.key));
}

TEST(DegradedLatencyBoundTest, SmallCollectivesAreNeverJudgedOnBandwidth) {
  // A 4-byte AllReduce across two nodes, whose "bandwidth" swings with latency and jitter, and a
  // 16 MiB one: only the latter can make the communicator degraded.
  DegradedDetector d;
  const CommKey key{"job", 7};
  RankInterval who;
  who.nranks = 2;
  who.n_nodes = 2;
  for (int r = 0; r < 2; ++r) {
    who.rank = r;
    who.node = r == 0 ? "a" : "b";
    d.Observe(key, who);
  }
  // One 4-byte and one 16 MiB AllReduce joined a window, at these bus bandwidths.
  int64_t now = 0;
  auto window = [&](double small_gbs, double large_gbs) {
    std::vector<DegradedChange> out;
    for (auto& c :
         d.ObserveCollective(key, 2, "AllReduce", 4, static_cast<uint64_t>(4.0 / small_gbs), now)) {
      out.push_back(c);
    }
    for (auto& c : d.ObserveCollective(key, 2, "AllReduce", 16 << 20,
                                       static_cast<uint64_t>((16 << 20) / large_gbs), now)) {
      out.push_back(c);
    }
    now += kSecond;
    return out;
  };
  std::vector<DegradedChange> changes;
  for (int i = 0; i < 16; ++i) {  // learn the baselines
    for (auto& c : window(0.001, 20)) changes.push_back(c);
  }
  for (int i = 0; i < 4; ++i) {  // the small one at a tenth: latency, not the wire
    for (auto& c : window(0.0001, 20)) changes.push_back(c);
  }
  EXPECT_TRUE(changes.empty());
  EXPECT_FALSE(d.IsDegraded(key));
  for (int i = 0; i < 2; ++i) {  // the large one at half: degraded once its window closes
    for (auto& c : window(0.001, 10)) changes.push_back(c);
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].comm.op, "AllReduce");
  EXPECT_EQ(changes[0].comm.message_size, "16-17MB");
}

}  // namespace
}  // namespace ncclwatch::aggregator
