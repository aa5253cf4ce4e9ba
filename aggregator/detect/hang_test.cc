#include "aggregator/detect/hang.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "aggregator/detect/rank_set.h"
#include "common/test_util.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::kS;
constexpr int64_t kMs = kS / 1000;

struct TestOp {
  std::string_view op;
  uint64_t seq;
  int64_t age_ns;
  int peer = -1;  // >= 0: a p2p operation with this peer
};

RankInterval OpsInterval(int rank, int nranks, const std::vector<TestOp>& ops, bool final = false) {
  RankInterval r;
  r.rank = rank;
  r.nranks = nranks;
  r.final = final;
  for (const auto& o : ops) {
    r.in_flight.push_back(
        InFlightOp{o.op, o.seq, o.peer >= 0, o.peer, static_cast<uint64_t>(o.age_ns)});
  }
  return r;
}

class HangTest : public ::testing::Test {
 protected:
  HangDetector detector_{HangOptions{10 * kS, 5 * kS}};
  const CommKey comm_{"job", 0xabc};

  // Every rank reports at `now`: ranks in `waiting` have AllReduce `seq` in flight since `since`.
  void ReportAll(int nranks, const std::vector<int>& waiting, uint64_t seq, int64_t since,
                 int64_t now, const std::vector<int>& quiet = {}) {
    for (int r = 0; r < nranks; ++r) {
      if (std::find(quiet.begin(), quiet.end(), r) != quiet.end()) continue;
      std::vector<TestOp> ops;
      if (std::find(waiting.begin(), waiting.end(), r) != waiting.end()) {
        ops.push_back({"AllReduce", seq, now - since});
      }
      detector_.Update(comm_, OpsInterval(r, nranks, ops), now);
    }
  }
};

// A report that took longer than its rank's others to arrive (it waited in its agent's queue)
// says where the rank stood when it was taken: it does not count as news from after the
// collective became old enough, so the rank is not named missing from a collective it reached
// after that report was taken.
TEST_F(HangTest, AReportHeldUpOnTheWayDoesNotNameItsRankMissing) {
  const int64_t t0 = 100 * kS;
  // Each report says when it was taken, on a clock 3 s off the aggregator's, and arrives 20 ms
  // later; rank 2 is late to AllReduce 7 (it reaches it at t0 + 0.2 s).
  auto report = [&](int rank, bool waiting, int64_t taken, int64_t arrives) {
    RankInterval r = OpsInterval(rank, 3, {});
    if (waiting) r.in_flight.push_back(InFlightOp{"AllReduce", 7, false, -1, 0});
    r.interval_end_ns = taken - 3 * kS;
    if (waiting) r.in_flight.back().age_ns = static_cast<uint64_t>(taken - t0);
    detector_.Update(comm_, r, arrives);
  };
  for (int64_t t = t0 - 5 * kS; t <= t0 + 9 * kS; t += kS) {
    for (int rank = 0; rank < 3; ++rank) report(rank, t >= t0, t, t + 20 * kMs);
  }
  ASSERT_TRUE(detector_.Evaluate(t0 + 9 * kS + 20 * kMs).empty());
  // At t0 + 10 s ranks 0 and 1 report AllReduce 7 in flight; rank 2's report arriving now was
  // taken at t0 + 0.1 s, before it got there (it waited 9.9 s in a queue).
  report(0, true, t0 + 10 * kS, t0 + 10 * kS + 20 * kMs);
  report(1, true, t0 + 10 * kS, t0 + 10 * kS + 20 * kMs);
  RankInterval stale = OpsInterval(2, 3, {});
  stale.interval_end_ns = t0 + 100 * kMs - 3 * kS;
  detector_.Update(comm_, stale, t0 + 10 * kS + 30 * kMs);
  EXPECT_TRUE(detector_.Evaluate(t0 + 10 * kS + 30 * kMs).empty())
      << "rank 2 has not said where it stands since the collective became old enough";
  // Its next report, on time, has it waiting too: every rank arrived, none finished.
  report(2, true, t0 + 10 * kS + 500 * kMs, t0 + 10 * kS + 520 * kMs);
  auto changes = detector_.Evaluate(t0 + 10 * kS + 520 * kMs);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].hang.kind, HangKind::kNoProgress);
  EXPECT_TRUE(changes[0].hang.missing.empty());
}

TEST_F(HangTest, ATimelyReportWithoutTheCollectiveStillNamesItsRankMissing) {
  const int64_t t0 = 100 * kS;
  auto report = [&](int rank, bool waiting, int64_t taken) {
    RankInterval r = OpsInterval(rank, 3, {});
    if (waiting) {
      r.in_flight.push_back(
          InFlightOp{"AllReduce", 7, false, -1, static_cast<uint64_t>(taken - t0)});
    }
    r.interval_end_ns = taken + 2 * kS;  // a clock 2 s ahead; every report arrives 20 ms later
    detector_.Update(comm_, r, taken + 20 * kMs);
  };
  for (int64_t t = t0 - 5 * kS; t <= t0 + 10 * kS; t += kS) {
    for (int rank = 0; rank < 3; ++rank) report(rank, t >= t0 && rank != 2, t);
  }
  auto changes = detector_.Evaluate(t0 + 10 * kS + 20 * kMs);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].hang.missing, std::vector<int>{2});
}

TEST_F(HangTest, RanksThatNeverArriveAreNamedOnceTheCollectiveIsOldEnough) {
  const int64_t t0 = 100 * kS;
  ReportAll(4, {0, 1, 2}, 7, t0, t0);
  EXPECT_TRUE(detector_.Evaluate(t0).empty());
  ReportAll(4, {0, 1, 2}, 7, t0, t0 + 9 * kS);
  EXPECT_TRUE(detector_.Evaluate(t0 + 9 * kS).empty()) << "younger than the threshold";
  ReportAll(4, {0, 1, 2}, 7, t0, t0 + 10 * kS);
  auto changes = detector_.Evaluate(t0 + 10 * kS);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].start);
  EXPECT_FALSE(changes[0].silent);
  const HangView& h = changes[0].hang;
  EXPECT_EQ(h.op, "AllReduce");
  EXPECT_EQ(h.seq, 7u);
  EXPECT_EQ(h.kind, HangKind::kMissingRanks);
  EXPECT_EQ(h.missing, std::vector<int>{3});
  EXPECT_EQ(h.arrived, 3);
  EXPECT_EQ(h.enqueued_ns, t0);
  EXPECT_TRUE(detector_.Missing(comm_, 3));
  EXPECT_FALSE(detector_.Missing(comm_, 0));
  // Still hung a second later: no new event.
  ReportAll(4, {0, 1, 2}, 7, t0, t0 + 11 * kS);
  EXPECT_TRUE(detector_.Evaluate(t0 + 11 * kS).empty());
  ASSERT_EQ(detector_.Hangs().size(), 1u);
  EXPECT_EQ(detector_.Hangs()[0].since_ns, t0 + 10 * kS);
  // The missing rank turns up and the collective completes: the hang ends.
  ReportAll(4, {}, 0, 0, t0 + 12 * kS);
  changes = detector_.Evaluate(t0 + 12 * kS);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].start);
  EXPECT_EQ(changes[0].hang.seq, 7u);
  EXPECT_FALSE(detector_.Hung(comm_));
}

TEST_F(HangTest, AllArrivedNoneFinishedIsAFabricHang) {
  const int64_t t0 = 50 * kS;
  ReportAll(8, {0, 1, 2, 3, 4, 5, 6, 7}, 3, t0, t0 + 12 * kS);
  auto changes = detector_.Evaluate(t0 + 12 * kS);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].hang.kind, HangKind::kNoProgress);
  EXPECT_TRUE(changes[0].hang.missing.empty());
  EXPECT_EQ(changes[0].hang.arrived, 8);
}

TEST_F(HangTest, LongButHealthyCollectivesAndYoungOperationsAreNotHangs) {
  const int64_t t0 = 10 * kS;
  for (int i = 0; i < 20; ++i) {
    // A new collective every second, each in flight for a moment on every rank.
    int64_t now = t0 + i * kS;
    ReportAll(4, {0, 1, 2, 3}, i, now - kS / 2, now);
    EXPECT_TRUE(detector_.Evaluate(now).empty()) << i;
  }
  EXPECT_TRUE(detector_.Hangs().empty());
  EXPECT_TRUE(detector_.Silent().empty());
}

TEST_F(HangTest, ARankThatStopsReportingIsSilentAndMissingFromTheHang) {
  const int64_t t0 = 10 * kS;
  // Rank 2 had reached the collective, then its process died: its last report still lists it.
  ReportAll(4, {0, 1, 2, 3}, 9, t0, t0);
  for (int s = 1; s <= 12; ++s) {
    ReportAll(4, {0, 1, 3}, 9, t0, t0 + s * kS, /*quiet=*/{2});
    auto changes = detector_.Evaluate(t0 + s * kS);
    if (s < 5) {
      EXPECT_TRUE(changes.empty()) << s;
    } else if (s == 5) {
      ASSERT_EQ(changes.size(), 1u);
      EXPECT_TRUE(changes[0].silent);
      EXPECT_TRUE(changes[0].start);
      EXPECT_EQ(changes[0].rank.rank, 2);
      EXPECT_EQ(changes[0].rank.last_report_ns, t0);
    } else if (s == 10) {
      ASSERT_EQ(changes.size(), 1u);
      EXPECT_FALSE(changes[0].silent);
      EXPECT_EQ(changes[0].hang.kind, HangKind::kMissingRanks);
      EXPECT_EQ(changes[0].hang.missing, std::vector<int>{2});
    } else {
      EXPECT_TRUE(changes.empty()) << s;
    }
  }
  EXPECT_TRUE(detector_.IsSilent(comm_, 2));
  // It comes back (e.g. a long pause, not a death): no longer silent.
  ReportAll(4, {}, 0, 0, t0 + 13 * kS);
  auto changes = detector_.Evaluate(t0 + 13 * kS);
  ASSERT_EQ(changes.size(), 2u);  // silence ends, hang ends
  EXPECT_FALSE(detector_.IsSilent(comm_, 2));
  EXPECT_FALSE(detector_.Hung(comm_));
}

// Evaluate skips a communicator while every rank was heard lately and nothing is in flight for
// long: the skip must never hide what a walk of its ranks would find, whenever Evaluate runs.
TEST_F(HangTest, EvaluatingSeldomFindsWhatEvaluatingOftenFinds) {
  const int64_t t0 = 10 * kS;
  ReportAll(4, {}, 0, 0, t0);
  EXPECT_TRUE(detector_.Evaluate(t0 + kS).empty());  // everyone fresh, nothing in flight
  // Rank 2 died at t0 holding nothing; the others wait in AllReduce 9 from t0 + 2 s on.
  for (int s = 2; s <= 14; ++s) ReportAll(4, {0, 1, 3}, 9, t0 + 2 * kS, t0 + s * kS, {2});
  auto changes = detector_.Evaluate(t0 + 14 * kS);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_TRUE(changes[0].silent && changes[0].start);
  EXPECT_EQ(changes[0].rank.rank, 2);
  EXPECT_FALSE(changes[1].silent);
  EXPECT_TRUE(changes[1].start);
  EXPECT_EQ(changes[1].hang.missing, std::vector<int>{2});
  // A new communicator's rank that only reports later is judged from its own first report.
  const CommKey other{"job", 0xdef};
  detector_.Update(other, OpsInterval(0, 2, {}), t0 + 14 * kS);
  detector_.Update(other, OpsInterval(1, 2, {}), t0 + 14 * kS);
  EXPECT_TRUE(detector_.Evaluate(t0 + 15 * kS).empty());
  for (int s = 16; s <= 21; ++s) detector_.Update(other, OpsInterval(0, 2, {}), t0 + s * kS);
  changes = detector_.Evaluate(t0 + 21 * kS);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rank.comm, other);
  EXPECT_EQ(changes[0].rank.rank, 1);
}

TEST_F(HangTest, AnAggregatorRestartSinglesOutNobodyButAFoundSilenceStays) {
  const int64_t t0 = 10 * kS;
  // Before the restart: every rank reports until t0 + 3 s, except rank 3, dead since t0.
  ReportAll(4, {}, 0, 0, t0);
  for (int s = 1; s <= 8; ++s) {
    ReportAll(4, {}, 0, 0, t0 + s * kS, /*quiet=*/{3});
    detector_.Evaluate(t0 + s * kS);
  }
  ASSERT_TRUE(detector_.IsSilent(comm_, 3));
  // The aggregator is down for 4 s and listens again at t0 + 12 s; its agents may take up to 5 s
  // to reconnect. Ranks 0 and 1 are back at once, rank 2's agent 6 s later.
  const int64_t listening = t0 + 12 * kS;
  detector_.StartListening(listening, listening + 5 * kS);
  for (int s = 0; s <= 6; ++s) {
    ReportAll(4, {}, 0, 0, listening + s * kS, /*quiet=*/{2, 3});
    EXPECT_TRUE(detector_.Evaluate(listening + s * kS).empty()) << s;
    EXPECT_FALSE(detector_.IsSilent(comm_, 2)) << s;
    EXPECT_TRUE(detector_.IsSilent(comm_, 3)) << s;
  }
  ReportAll(4, {}, 0, 0, listening + 7 * kS, /*quiet=*/{3});
  EXPECT_TRUE(detector_.Evaluate(listening + 7 * kS).empty());
  // A rank that does not come back is silent once the grace and the silence have passed.
  for (int s = 8; s < 15; ++s) {
    ReportAll(4, {}, 0, 0, listening + s * kS, /*quiet=*/{1, 3});
    detector_.Evaluate(listening + s * kS);
    EXPECT_EQ(detector_.IsSilent(comm_, 1), s >= 12) << s;
  }
}

// The grace is for ranks known from before the restart only: one that reports live after it and
// then dies is flagged as soon as ever.
TEST_F(HangTest, ARankHeardAfterTheRestartIsJudgedAsAlways) {
  const int64_t listening = 10 * kS;
  detector_.StartListening(listening, listening + 5 * kS);
  ReportAll(4, {}, 0, 0, listening + kS);
  for (int s = 2; s <= 12; ++s) {
    ReportAll(4, {}, 0, 0, listening + s * kS, /*quiet=*/{2});
    detector_.Evaluate(listening + s * kS);
    EXPECT_EQ(detector_.IsSilent(comm_, 2), s >= 6) << s;  // 5 s after its last report
  }
}

TEST_F(HangTest, AJobThatEndsOrIsCancelledSinglesNobodyOut) {
  const int64_t t0 = 10 * kS;
  ReportAll(4, {}, 0, 0, t0);
  // Ranks 0 and 1 finalize; 2 and 3 exit without (common: no destroy at exit), all at once.
  detector_.Update(comm_, OpsInterval(0, 4, {}, /*final=*/true), t0 + kS);
  detector_.Update(comm_, OpsInterval(1, 4, {}, /*final=*/true), t0 + kS);
  // Rank 3 is killed two seconds after rank 2.
  detector_.Update(comm_, OpsInterval(3, 4, {}), t0 + 2 * kS);
  for (int s = 2; s < 30; ++s) EXPECT_TRUE(detector_.Evaluate(t0 + s * kS).empty()) << s;
}

TEST_F(HangTest, ACommunicatorRecreatedWithAnotherSizeStartsOver) {
  const int64_t t0 = 10 * kS;
  ReportAll(4, {0, 1, 2}, 7, t0, t0 + 11 * kS);
  ASSERT_EQ(detector_.Evaluate(t0 + 11 * kS).size(), 1u);
  detector_.Update(comm_, OpsInterval(0, 2, {}), t0 + 12 * kS);
  auto changes = detector_.Evaluate(t0 + 12 * kS);
  EXPECT_TRUE(detector_.Hangs().empty());
  ASSERT_EQ(changes.size(), 1u) << "the old communicator's hang is closed";
  EXPECT_FALSE(changes[0].start);
  EXPECT_EQ(changes[0].hang.seq, 7u);
}

// A caller's cached slot (the registry keeps one per rank) spares the lookups, and stays right
// while ranks join (btree nodes split and move their states), a communicator is re-created with
// another size, or forgotten.
TEST_F(HangTest, ACachedSlotFollowsTheRankThroughInsertionsRecreationAndForgetting) {
  CachedSlot slot0;
  const auto in_flight_seq = [&](int rank) {
    auto ops = detector_.InFlightOf(comm_, rank);
    return ops.empty() ? uint64_t{0} : ops[0].seq;
  };
  detector_.Update(comm_, OpsInterval(0, 512, {{"AllReduce", 1, 0}}), kS, &slot0);
  for (int r = 1; r < 512; ++r) {  // enough ranks to split and move the tree's nodes many times
    CachedSlot other;
    detector_.Update(comm_, OpsInterval(r, 512, {{"AllReduce", 100u + r, 0}}), kS, &other);
  }
  detector_.Update(comm_, OpsInterval(0, 512, {{"AllReduce", 2, 0}}), 2 * kS, &slot0);
  EXPECT_EQ(in_flight_seq(0), 2u);
  EXPECT_EQ(in_flight_seq(1), 101u) << "rank 0's update went to rank 0";
  detector_.Update(comm_, OpsInterval(0, 512, {{"AllReduce", 3, 0}}), 3 * kS, &slot0);
  EXPECT_EQ(in_flight_seq(0), 3u) << "from the slot, now valid";
  // Re-created with another size: the old state is gone, the slot must not reach it.
  detector_.Update(comm_, OpsInterval(0, 4, {{"AllReduce", 4, 0}}), 4 * kS, &slot0);
  EXPECT_EQ(in_flight_seq(0), 4u);
  EXPECT_TRUE(detector_.InFlightOf(comm_, 1).empty()) << "rank 1 of the old communicator";
  detector_.Forget(comm_);
  detector_.Update(comm_, OpsInterval(0, 4, {{"AllReduce", 5, 0}}), 5 * kS, &slot0);
  EXPECT_EQ(in_flight_seq(0), 5u);
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

// With a hang threshold shorter than the silence delay, a rank that died holding the collective
// must not first be reported as a fabric hang (everybody arrived): the verdict waits for it.
TEST(HangVerdictTest, ADeadRankHoldingTheCollectiveIsNamedNotBlamedOnTheFabric) {
  HangDetector detector(HangOptions{2 * kS, 5 * kS});
  const CommKey comm{"job", 0xabc};
  const int64_t t0 = 10 * kS;
  for (int r = 0; r < 4; ++r) detector.Update(comm, OpsInterval(r, 4, {{"AllGather", 4, 0}}), t0);
  std::vector<HangChange> all;
  for (int s = 1; s <= 6; ++s) {
    for (int r : {0, 1, 3}) {
      detector.Update(comm, OpsInterval(r, 4, {{"AllGather", 4, s * kS}}), t0 + s * kS);
    }
    for (auto& c : detector.Evaluate(t0 + s * kS)) all.push_back(c);
  }
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(all[0].silent);
  EXPECT_EQ(all[0].rank.rank, 2);
  EXPECT_FALSE(all[1].silent);
  EXPECT_EQ(all[1].hang.kind, HangKind::kMissingRanks);
  EXPECT_EQ(all[1].hang.missing, std::vector<int>{2});
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

// A ring of Send/Recv where rank 2 never posts its pair: its neighbours' operations towards it
// have no counterpart, so rank 2 is named; with every rank posted, it is the fabric.
TEST(HangVerdictTest, PointToPointRingNamesThePeerThatNeverPosted) {
  for (bool all_posted : {false, true}) {
    HangDetector detector(HangOptions{2 * kS, 5 * kS});
    const CommKey comm{"job", 0xabc};
    const int64_t now = 20 * kS;
    for (int r = 0; r < 4; ++r) {
      std::vector<TestOp> ops;
      if (all_posted || r != 2) {
        ops.push_back({"Send", 0, 3 * kS, (r + 1) % 4});
        ops.push_back({"Recv", 0, 3 * kS, (r + 3) % 4});
      }
      detector.Update(comm, OpsInterval(r, 4, ops), now);
    }
    auto changes = detector.Evaluate(now);
    ASSERT_EQ(changes.size(), 1u) << all_posted;
    EXPECT_EQ(changes[0].hang.op, kP2pHangOp);
    if (all_posted) {
      EXPECT_EQ(changes[0].hang.kind, HangKind::kNoProgress);
      EXPECT_EQ(changes[0].hang.arrived, 4);
    } else {
      EXPECT_EQ(changes[0].hang.kind, HangKind::kMissingRanks);
      EXPECT_EQ(changes[0].hang.missing, std::vector<int>{2});
      EXPECT_EQ(changes[0].hang.arrived, 3);
    }
  }
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

TEST_F(HangTest, ARankOfAMillionRankCommunicatorCostsOneRankAndNamesABoundedFew) {
  // One rank claims a communicator of 2^20 ranks and is stuck: the other ranks never arrived.
  // They are all counted, the lowest kMaxNamedRanks named, and the rank that reported is
  // the only one that the detector keeps anything about.
  constexpr int kRanks = 1 << 20;
  detector_.Update(comm_, OpsInterval(kRanks - 1, kRanks, {{"AllReduce", 7, 11 * kS}}), 100 * kS);
  auto changes = detector_.Evaluate(100 * kS);
  ASSERT_EQ(changes.size(), 1u);
  const HangView& h = changes[0].hang;
  EXPECT_EQ(h.kind, HangKind::kMissingRanks);
  EXPECT_EQ(h.missing_count, kRanks - 1);
  ASSERT_EQ(h.missing.size(), kMaxNamedRanks);
  EXPECT_EQ(h.missing.front(), 0);
  EXPECT_EQ(h.missing.back(), static_cast<int>(kMaxNamedRanks) - 1);
  EXPECT_EQ(h.arrived, 1);
  EXPECT_TRUE(detector_.Missing(comm_, 5));
  EXPECT_FALSE(detector_.Missing(comm_, kRanks - 1));
}

TEST_F(HangTest, ReportingRanksThatNeverArrivedAreNamedBeforeTheBound) {
  // 1,000 ranks; ranks 500 and 900 report without the collective, ranks 0..299 never report.
  for (int r = 300; r < 1000; ++r) {
    std::vector<TestOp> ops;
    if (r != 500 && r != 900) ops.push_back({"AllReduce", 3, 12 * kS});
    detector_.Update(comm_, OpsInterval(r, 1000, ops), 50 * kS);
  }
  auto changes = detector_.Evaluate(50 * kS);
  ASSERT_EQ(changes.size(), 1u);
  const HangView& h = changes[0].hang;
  EXPECT_EQ(h.missing_count, 302);
  EXPECT_EQ(h.missing.size(), kMaxNamedRanks + 2);
  EXPECT_TRUE(std::is_sorted(h.missing.begin(), h.missing.end()));
  EXPECT_TRUE(detector_.Missing(comm_, 500));
  EXPECT_TRUE(detector_.Missing(comm_, 900));
  EXPECT_EQ(h.arrived, 698);
}

TEST(AbsentRanksTest, ListsTheGapsBetweenReportingRanksUpToTheLimit) {
  std::map<int, bool> present = {{-3, true}, {0, true}, {2, true}, {3, true}, {7, true}};
  std::vector<int> out;
  AppendAbsentRanks(present, 10, 100, &out);
  EXPECT_EQ(out, (std::vector<int>{1, 4, 5, 6, 8, 9}));
  out.clear();
  AppendAbsentRanks(present, 10, 3, &out);
  EXPECT_EQ(out, (std::vector<int>{1, 4, 5}));
  out.clear();
  AppendAbsentRanks(present, 5, 100, &out);  // a present rank beyond nranks is ignored
  EXPECT_EQ(out, (std::vector<int>{1, 4}));
  out.clear();
  AppendAbsentRanks(std::map<int, bool>{}, 1 << 30, 2, &out);
  EXPECT_EQ(out, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace ncclwatch::aggregator
