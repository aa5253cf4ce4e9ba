#include "aggregator/detect/straggler.h"

#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

const CommKey kStragglerComm{"job", 1};

// A collective where every rank arrives at `arrival[r]` (ns) and all finish at max + transfer.
CompletedGroup Group(uint64_t seq, const std::vector<int64_t>& arrival, int64_t transfer = 50'000) {
  int64_t end = *std::max_element(arrival.begin(), arrival.end()) + transfer;
  CompletedGroup g{kStragglerComm, "AllReduce", seq, {}, {}, {}, {}};
  for (int64_t a : arrival) {
    g.duration_ns.push_back(end - a);
    g.gpu_start_ns.push_back(a);
  }
  return g;
}

std::vector<int64_t> Arrivals(std::mt19937& rng, int n, int slow_rank, int64_t slow_ns) {
  std::uniform_int_distribution<int64_t> jitter(-200'000, 200'000);
  std::vector<int64_t> a(n);
  for (int r = 0; r < n; ++r) a[r] = 10'000'000 + jitter(rng) + (r == slow_rank ? slow_ns : 0);
  return a;
}

// The caller's cached slot finds the communicator's windows while they live; after Forget the
// communicator starts over (no flag until its windows fill again), through the same slot.
TEST(StragglerDetectorTest, ACachedSlotIsDroppedWithTheCommunicatorsWindows) {
  StragglerDetector d;
  std::mt19937 rng(3);
  CachedSlot slot;
  auto run = [&](int groups) {
    int changes = 0;
    for (int seq = 0; seq < groups; ++seq) {
      changes +=
          static_cast<int>(d.Observe(Group(seq, Arrivals(rng, 8, 5, 2'000'000)), &slot).size());
    }
    return changes;
  };
  EXPECT_EQ(run(200), 1);
  EXPECT_EQ(d.Scores(kStragglerComm).size(), 8u);
  d.Forget(kStragglerComm);
  EXPECT_TRUE(d.Scores(kStragglerComm).empty());
  EXPECT_EQ(run(1), 0);  // one group: a fresh window, nobody flagged
  EXPECT_FALSE(d.Scores(kStragglerComm)[5].flagged);
  EXPECT_EQ(run(200), 1);
}

TEST(StragglerDetectorTest, FlagsTheSlowRankOnlyAndOnlyOnce) {
  StragglerDetector d;
  std::mt19937 rng(1);
  std::vector<FlagChange> changes;
  for (uint64_t seq = 0; seq < 200; ++seq) {
    for (auto& c : d.Observe(Group(seq, Arrivals(rng, 8, 5, 2'000'000)))) changes.push_back(c);
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].score.rank, 5);
  EXPECT_TRUE(changes[0].score.flagged);
  auto scores = d.Scores(kStragglerComm);
  ASSERT_EQ(scores.size(), 8u);
  EXPECT_NEAR(scores[5].lateness_ns, 2'200'000, 250'000);  // 2 ms + distance to the earliest
  EXPECT_GT(scores[5].arrived_last_fraction, 0.99);
  for (int r = 0; r < 8; ++r) {
    if (r != 5) {
      EXPECT_FALSE(scores[r].flagged) << r;
    }
  }
}

// A rank flagged in a second class changes nothing in the communicator (it was flagged already)
// but the class's own flag: the caller is told, and which classes flag someone is answered.
TEST(StragglerDetectorTest, SaysWhenAClassFlagChangesAndWhichClassesFlag) {
  StragglerDetector d;
  std::mt19937 rng(5);
  bool changed = false;
  int comm_changes = 0;
  for (uint64_t seq = 0; seq < 200; ++seq) {
    comm_changes += static_cast<int>(
        d.Observe(Group(seq, Arrivals(rng, 8, 5, 2'000'000)), nullptr, &changed).size());
  }
  EXPECT_EQ(comm_changes, 1);
  EXPECT_TRUE(changed);
  EXPECT_TRUE(d.FlaggedBesides(kStragglerComm, "SendRecv"));
  EXPECT_FALSE(d.FlaggedBesides(kStragglerComm, "AllReduce"));
  EXPECT_FALSE(d.FlaggedBesides(CommKey{"other", 2}, "SendRecv"));

  changed = false;
  for (uint64_t seq = 0; seq < 200; ++seq) {
    CompletedGroup g = Group(seq, Arrivals(rng, 8, 5, 2'000'000));
    g.op = "AllGather";
    comm_changes += static_cast<int>(d.Observe(g, nullptr, &changed).size());
  }
  EXPECT_EQ(comm_changes, 1);  // rank 5 was flagged in the communicator already
  EXPECT_TRUE(changed);        // but not in AllGather
  EXPECT_TRUE(d.FlaggedBesides(kStragglerComm, "AllReduce"));

  // Punctual again in AllReduce: its flag there clears, AllGather's stays.
  changed = false;
  for (uint64_t seq = 200; seq < 400; ++seq) {
    d.Observe(Group(seq, Arrivals(rng, 8, -1, 0)), nullptr, &changed);
  }
  EXPECT_TRUE(changed);
  EXPECT_FALSE(d.FlaggedBesides(kStragglerComm, "AllGather"));
  EXPECT_TRUE(d.FlaggedBesides(kStragglerComm, "AllReduce"));
  d.Forget(kStragglerComm);
  EXPECT_FALSE(d.FlaggedBesides(kStragglerComm, "SendRecv"));
}

// Four ranks on four nodes whose GPU clocks disagree by seconds; rank 3 arrives 2 ms late, and
// rank 0's kernels move their data 4 ms slower (a slow link: it is not late, its kernels are
// long). Each kernel's duration is its wait for the peers plus its data movement.
CompletedGroup SkewedGroup(uint64_t seq, bool measure_waits, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> jitter(0, 100'000);
  CompletedGroup g{kStragglerComm, "AllReduce", seq, {}, {}, {}, {}};
  const int64_t late = 2'000'000;
  for (int r = 0; r < 4; ++r) {
    const int64_t wait = r == 3 ? 10'000 + jitter(rng) : late + jitter(rng);
    const int64_t transfer = r == 0 ? 4'000'000 : 50'000;
    g.duration_ns.push_back(static_cast<uint64_t>(wait + transfer));
    g.gpu_start_ns.push_back(static_cast<uint64_t>(r) * 3'000'000'000 + seq * 20'000'000);
    g.sync_wait_ns.push_back(measure_waits || r != 2 ? wait : -1);
  }
  return g;
}

TEST(StragglerDetectorTest, GpuMeasuredWaitsForPeersNameTheLateRankWhereDurationsCannot) {
  std::mt19937 rng(7);
  StragglerDetector by_waits;
  std::set<int> flagged;
  for (uint64_t seq = 0; seq < 64; ++seq) {
    for (const FlagChange& c : by_waits.Observe(SkewedGroup(seq, true, rng))) {
      EXPECT_EQ(c.score.basis, LatenessBasis::kSyncWait);
      if (c.score.flagged) flagged.insert(c.score.rank);
    }
  }
  EXPECT_EQ(flagged, std::set<int>{3});
  const std::vector<RankScore> scores = by_waits.Scores(kStragglerComm);
  ASSERT_EQ(scores.size(), 4u);
  EXPECT_NEAR(scores[3].lateness_ns, 2'000'000, 150'000);
  EXPECT_FALSE(scores[3].clocks_aligned);

  // The same job with one rank's waits unmeasured falls back to kernel durations, where rank 0's
  // long kernels make every other rank look late.
  StragglerDetector by_durations;
  std::set<int> flagged_by_durations;
  for (uint64_t seq = 0; seq < 64; ++seq) {
    for (const FlagChange& c : by_durations.Observe(SkewedGroup(seq, false, rng))) {
      EXPECT_EQ(c.score.basis, LatenessBasis::kKernelDurations);
      if (c.score.flagged) flagged_by_durations.insert(c.score.rank);
    }
  }
  EXPECT_EQ(flagged_by_durations, (std::set<int>{1, 2, 3}));
}

TEST(StragglerDetectorTest, HealthyJitterFlagsNobodyAcrossSeeds) {
  for (unsigned seed = 0; seed < 20; ++seed) {
    StragglerDetector d;
    std::mt19937 rng(seed);
    for (uint64_t seq = 0; seq < 500; ++seq) {
      EXPECT_TRUE(d.Observe(Group(seq, Arrivals(rng, 16, -1, 0))).empty()) << "seed " << seed;
    }
  }
}

TEST(StragglerDetectorTest, NeedsMinimumEvidenceAndClearsWithHysteresis) {
  StragglerOptions opts;
  opts.window = 8;
  opts.min_groups = 4;
  opts.warmup_groups = 0;  // WarmUpEntersNoWindow tests the warm-up
  StragglerDetector d(opts);
  std::vector<int64_t> slow = {0, 0, 3'000'000, 0};
  for (uint64_t seq = 0; seq < 3; ++seq) EXPECT_TRUE(d.Observe(Group(seq, slow)).empty());
  auto flagged = d.Observe(Group(3, slow));  // 4th observation: enough evidence
  ASSERT_EQ(flagged.size(), 1u);
  EXPECT_EQ(flagged[0].score.rank, 2);
  // Lateness of 0.7 ms is below the 1 ms threshold but above the 0.5 ms clear level: stays.
  std::vector<int64_t> milder = {0, 0, 700'000, 0};
  for (uint64_t seq = 4; seq < 12; ++seq) EXPECT_TRUE(d.Observe(Group(seq, milder)).empty());
  std::vector<int64_t> healthy = {0, 0, 0, 0};
  std::vector<FlagChange> cleared;
  for (uint64_t seq = 12; seq < 20 && cleared.empty(); ++seq)
    cleared = d.Observe(Group(seq, healthy));
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_FALSE(cleared[0].score.flagged);
}

// A job's first steps are slow and uneven (compilation, allocator growth, connection set-up):
// rank 2 is 6 ms late at each of its class's first 16 collectives, then as punctual as the rest.
// Those enter no window, so nothing is flagged; without the warm-up the window's median holds the
// flag for as many collectives as the warm-up filled. A rank late from then on is flagged once
// `min_groups` collectives after the warm-up are in.
TEST(StragglerDetectorTest, WarmUpEntersNoWindow) {
  for (int warmup : {16, 0}) {
    StragglerOptions opts;
    opts.warmup_groups = warmup;
    StragglerDetector d(opts);
    std::mt19937 rng(5);
    int flags = 0;
    for (uint64_t seq = 0; seq < 48; ++seq) {
      for (const FlagChange& c :
           d.Observe(Group(seq, Arrivals(rng, 8, 2, seq < 16 ? 6'000'000 : 0)))) {
        EXPECT_EQ(c.score.rank, 2);
        flags += c.score.flagged ? 1 : 0;
      }
    }
    EXPECT_EQ(flags, warmup == 0 ? 1 : 0) << "warm-up " << warmup;
  }
  StragglerDetector d;  // the default warm-up: 16 collectives
  std::mt19937 rng(6);
  uint64_t flagged_at = 0;
  for (uint64_t seq = 0; seq < 48 && flagged_at == 0; ++seq) {
    if (!d.Observe(Group(seq, Arrivals(rng, 8, 4, 3'000'000))).empty()) flagged_at = seq + 1;
  }
  EXPECT_EQ(flagged_at, 16u + 8u);
  // An exchange class's warm-up is as many exchanges as move every rank 16 times (n / 2 each).
  StragglerDetector p;
  const int n = 8;
  uint64_t exchanges = 0, exchange_flagged_at = 0;
  for (uint64_t seq = 0; seq < 48 && exchange_flagged_at == 0; ++seq) {
    for (int s = 0; s < n && exchange_flagged_at == 0; s += 2) {
      CompletedGroup g{kStragglerComm, kP2pClass, seq, {}, {}, {}, {}, {s, s + 1}, n};
      const int64_t start[2] = {10'000'000, 10'000'000 + (s == 4 ? 3'000'000 : 0)};
      for (int64_t a : start) {
        g.gpu_start_ns.push_back(a);
        g.duration_ns.push_back(start[1] + 50'000 - a);
      }
      ++exchanges;
      if (!p.Observe(g).empty()) exchange_flagged_at = exchanges;
    }
  }
  // Rank 5 (the late end of the third exchange of each round) at its 8th exchange after warm-up.
  EXPECT_EQ(exchange_flagged_at, 16u * (n / 2) + 7u * (n / 2) + 3u);
}

// Skews rank r's GPU clock by (r even ? -skew : +skew), as on two nodes whose clocks disagree.
CompletedGroup Skewed(CompletedGroup g, int64_t skew_ns) {
  for (size_t r = 0; r < g.gpu_start_ns.size(); ++r) {
    g.gpu_start_ns[r] += r % 2 == 0 ? -skew_ns : skew_ns;
  }
  return g;
}

TEST(StragglerDetectorTest, UsesAlignedTimestampsOnlyWhenTheClocksAgree) {
  for (int64_t skew : {int64_t{0}, int64_t{50'000'000}}) {
    StragglerDetector d;
    std::mt19937 rng(3);
    std::vector<FlagChange> changes;
    for (uint64_t seq = 0; seq < 100; ++seq) {
      auto g = Skewed(Group(seq, Arrivals(rng, 8, 3, 2'000'000)), skew);
      for (auto& c : d.Observe(g)) changes.push_back(c);
    }
    ASSERT_EQ(changes.size(), 1u) << "skew " << skew;
    EXPECT_EQ(changes[0].score.rank, 3);
    EXPECT_EQ(changes[0].score.clocks_aligned, skew == 0) << "skew " << skew;
    // Both methods measure the same lateness: 2 ms + the distance to the earliest rank.
    EXPECT_NEAR(changes[0].score.lateness_ns, 2'200'000, 250'000) << "skew " << skew;
  }
}

TEST(StragglerDetectorTest, PeersOfAnEarlyRankAreNotStragglers) {
  // Rank 0 always arrives 1.5 ms before everybody else (it has less work before the collective):
  // the seven others are 1.5 ms "late" relative to it, over the 1 ms threshold, but none of them
  // is late compared with its peers.
  StragglerDetector d;
  std::mt19937 rng(5);
  for (uint64_t seq = 0; seq < 300; ++seq) {
    std::vector<int64_t> a = Arrivals(rng, 8, -1, 0);
    a[0] -= 1'500'000;
    EXPECT_TRUE(d.Observe(Group(seq, a)).empty()) << seq;
  }
  auto scores = d.Scores(kStragglerComm);
  EXPECT_GT(scores[3].lateness_ns, 1'000'000);  // an absolute rule would have flagged it
  EXPECT_LT(scores[3].excess_ns, 500'000);
}

TEST(StragglerDetectorTest, ASlowNodeWithMostOfTheRanksIsStillFound) {
  // Six of eight ranks are 2 ms late: the punctual quarter is the peer baseline.
  StragglerDetector d;
  std::mt19937 rng(9);
  std::uniform_int_distribution<int64_t> jitter(-200'000, 200'000);
  std::set<int> flagged;
  for (uint64_t seq = 0; seq < 100; ++seq) {
    std::vector<int64_t> a(8);
    for (int r = 0; r < 8; ++r) a[r] = 10'000'000 + jitter(rng) + (r >= 2 ? 2'000'000 : 0);
    for (auto& c : d.Observe(Group(seq, a))) {
      if (c.score.flagged) flagged.insert(c.score.rank);
    }
  }
  EXPECT_EQ(flagged, (std::set<int>{2, 3, 4, 5, 6, 7}));
}

TEST(StragglerDetectorTest, OwnHistoryTellsANewFaultFromAChronicOne) {
  StragglerDetector d;
  std::mt19937 rng(11);
  std::vector<FlagChange> changes;
  // Rank 1 is late from the start; rank 6 becomes late after 300 healthy collectives.
  for (uint64_t seq = 0; seq < 400; ++seq) {
    std::vector<int64_t> a = Arrivals(rng, 8, 1, 2'000'000);
    if (seq >= 300) a[6] += 3'000'000;
    for (auto& c : d.Observe(Group(seq, a))) changes.push_back(c);
  }
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].score.rank, 1);
  EXPECT_LT(changes[0].score.history_ratio, 1.5);  // chronic
  EXPECT_EQ(changes[1].score.rank, 6);
  EXPECT_GT(changes[1].score.history_ratio, 3);  // new
  EXPECT_GT(changes[1].score.peer_z, 3.5);       // and far outside its peers
}

// A communicator that runs four kinds of collective per step, rank 6 late only at the AllReduce
// (its delay falls just before it): a quarter of its collectives, a window median of nothing if
// the kinds were mixed. Per class it is flagged, and only in that class; it clears with it.
TEST(StragglerDetectorTest, ARankLateAtOneKindOfCollectiveIsFlaggedInThatClass) {
  StragglerDetector d;
  std::mt19937 rng(13);
  const std::vector<std::string> ops = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast"};
  std::vector<FlagChange> changes;
  uint64_t seq = 0;
  auto step = [&](bool late) {
    for (const std::string& op : ops) {
      CompletedGroup g =
          Group(seq++, Arrivals(rng, 8, late && op == "AllReduce" ? 6 : -1, 2'000'000));
      g.op = op;
      for (auto& c : d.Observe(g)) changes.push_back(c);
    }
  };
  for (int i = 0; i < 40; ++i) step(true);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].score.rank, 6);
  EXPECT_TRUE(changes[0].score.flagged);
  EXPECT_EQ(changes[0].score.op, "AllReduce");

  const std::vector<RankScore> scores = d.Scores(kStragglerComm);
  ASSERT_EQ(scores.size(), 8u);
  EXPECT_TRUE(scores[6].flagged);
  EXPECT_EQ(scores[6].op, "AllReduce");  // its worst class
  EXPECT_NEAR(scores[6].lateness_ns, 2'200'000, 250'000);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(scores[r].flagged, r == 6) << r;
  const std::vector<RankScore> notable = d.Notable(kStragglerComm);
  ASSERT_EQ(notable.size(), 1u);
  EXPECT_EQ(notable[0].rank, 6);
  ASSERT_TRUE(d.LatenessIn(kStragglerComm, "AllGather", 6).has_value());
  EXPECT_LT(*d.LatenessIn(kStragglerComm, "AllGather", 6), 500'000);  // not late there
  ASSERT_TRUE(d.LatenessIn(kStragglerComm, "AllReduce", 6).has_value());
  EXPECT_NEAR(*d.LatenessIn(kStragglerComm, "AllReduce", 6), 2'200'000, 250'000);
  EXPECT_FALSE(d.LatenessIn(kStragglerComm, "AllToAll", 6).has_value());
  EXPECT_FALSE(d.LatenessIn(CommKey{"job", 2}, "AllReduce", 6).has_value());

  for (int i = 0; i < 40; ++i) step(false);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_FALSE(changes[1].score.flagged);
  EXPECT_EQ(changes[1].score.rank, 6);
  EXPECT_TRUE(d.Notable(kStragglerComm).empty());
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

// A ring of 8 ranks exchanging with their neighbours (r sends to r + 1), as context-parallel ring
// attention does; rank 5 starts every exchange 2 ms late. Only point-to-point groups exist.
TEST(StragglerDetectorTest, PointToPointExchangesFlagTheLateEndOnly) {
  StragglerDetector d;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int64_t> jitter(-100'000, 100'000);
  std::vector<FlagChange> changes;
  const int n = 8;
  for (uint64_t seq = 0; seq < 100; ++seq) {
    for (int s = 0; s < n; ++s) {
      const int r = (s + 1) % n;
      CompletedGroup g{kStragglerComm, kP2pClass, seq, {}, {}, {}, {}, {s, r}, n};
      int64_t start[2];
      for (int i = 0; i < 2; ++i) {
        const int who = i == 0 ? s : r;
        start[i] = 10'000'000 + jitter(rng) + (who == 5 ? 2'000'000 : 0);
      }
      const int64_t end = std::max(start[0], start[1]) + 50'000;
      for (int i = 0; i < 2; ++i) {
        g.gpu_start_ns.push_back(start[i]);
        g.duration_ns.push_back(end - start[i]);
      }
      for (auto& c : d.Observe(g)) changes.push_back(c);
    }
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].score.rank, 5);
  EXPECT_EQ(changes[0].score.op, kP2pClass);
  EXPECT_TRUE(changes[0].score.flagged);
  const auto scores = d.Scores(kStragglerComm);
  ASSERT_EQ(scores.size(), static_cast<size_t>(n));
  EXPECT_NEAR(scores[5].lateness_ns, 2'000'000, 200'000);
  for (int r = 0; r < n; ++r) {
    if (r != 5) {
      EXPECT_LT(scores[r].lateness_ns, 250'000) << r;
    }
  }
  EXPECT_NEAR(*d.LatenessIn(kStragglerComm, kP2pClass, 5), 2'000'000, 200'000);
  // Without its exchanges, the communicator has nobody late.
  ASSERT_EQ(d.Notable(kStragglerComm).size(), 1u);
  EXPECT_TRUE(
      d.Notable(kStragglerComm, [](const std::string& op) { return op == kP2pClass; }).empty());
  // An exchange naming a rank outside the communicator changes nothing.
  CompletedGroup bad{kStragglerComm, kP2pClass, 0, {1, 1}, {1, 1}, {}, {}, {0, n}, n};
  EXPECT_TRUE(d.Observe(bad).empty());
}

}  // namespace
}  // namespace ncclwatch::aggregator
