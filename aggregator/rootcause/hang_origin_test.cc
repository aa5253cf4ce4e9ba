#include "aggregator/rootcause/hang_origin.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::kS;

// Communicators of world ranks, each world rank one process, and what each rank has in flight.
class HangingJob {
 public:
  explicit HangingJob(std::string id) : id_(std::move(id)) {}

  CommKey Comm(const std::string& name, const std::vector<int>& members) {
    const CommKey key{id_, std::hash<std::string>()(id_ + name)};
    for (int r = 0; r < static_cast<int>(members.size()); ++r) {
      index_.Set(key, r, ProcessKey{id_, "host", static_cast<uint32_t>(members[r]), 0});
    }
    names_[key] = name;
    return key;
  }
  void InFlight(const CommKey& comm, int rank, const std::string& op, uint64_t seq,
                int64_t enqueued_ns, bool started) {
    in_flight_[{comm, rank}].push_back(
        HangDetector::InFlight{op, seq, false, -1, enqueued_ns, started});
  }
  static HangView Hang(const CommKey& comm, const std::string& op, uint64_t seq,
                       std::vector<int> missing, int arrived, int64_t enqueued_ns) {
    HangView h;
    h.comm = comm;
    h.op = op;
    h.seq = seq;
    h.missing = std::move(missing);
    h.kind = h.missing.empty() ? HangKind::kNoProgress : HangKind::kMissingRanks;
    h.arrived = arrived;
    h.enqueued_ns = enqueued_ns;
    return h;
  }
  // The groups as "origin <- consequence, consequence".
  std::vector<HangGroup> Grouped(const std::vector<HangView>& hangs) const {
    return GroupHangsByOrigin(hangs, index_, [this](const CommKey& c, int r) {
      auto it = in_flight_.find({c, r});
      return it == in_flight_.end() ? std::vector<HangDetector::InFlight>{} : it->second;
    });
  }
  std::vector<std::string> Groups(const std::vector<HangView>& hangs) const {
    std::vector<std::string> out;
    for (const HangGroup& g : Grouped(hangs)) {
      std::string line = names_.at(g.origin.comm) + (g.settled ? "" : " (unsettled)");
      for (size_t i = 0; i < g.consequences.size(); ++i) {
        line += (i == 0 ? " <- " : ", ") + names_.at(g.consequences[i].comm);
      }
      out.push_back(line);
    }
    return out;
  }
  ProcessIndex& index() { return index_; }

 private:
  std::string id_;
  ProcessIndex index_;
  std::map<CommKey, std::string> names_;
  std::map<std::pair<CommKey, int>, std::vector<HangDetector::InFlight>> in_flight_;
};

TEST(HangOriginTest, AFabricHangInOneDpGroupIsTheOriginOfTheHangsQueuedBehindIt) {
  // 2 nodes x 2 GPUs: TP {0,1} and {2,3} inside the nodes, DP {0,2} and {1,3} across them.
  HangingJob job("j");
  const CommKey tp0 = job.Comm("tp0", {0, 1}), tp1 = job.Comm("tp1", {2, 3});
  const CommKey dp0 = job.Comm("dp0", {0, 2}), dp1 = job.Comm("dp1", {1, 3});
  // dp0's ReduceScatter never completes although both ranks run it.
  job.InFlight(dp0, 0, "ReduceScatter", 7, 10 * kS, true);
  job.InFlight(dp0, 1, "ReduceScatter", 7, 10 * kS, true);
  // Their hosts ran ahead: the next TP AllReduce is queued behind it on ranks 0 and 2, while their
  // partners 1 and 3 started it and wait inside.
  job.InFlight(tp0, 0, "AllReduce", 40, 11 * kS, false);
  job.InFlight(tp0, 1, "AllReduce", 40, 11 * kS, true);
  job.InFlight(tp1, 0, "AllReduce", 40, 11 * kS, false);
  job.InFlight(tp1, 1, "AllReduce", 40, 11 * kS, true);
  // So 1 and 3 queue dp1's ReduceScatter behind their stuck TP AllReduce.
  job.InFlight(dp1, 0, "ReduceScatter", 7, 12 * kS, false);
  job.InFlight(dp1, 1, "ReduceScatter", 7, 12 * kS, false);
  const std::vector<HangView> hangs = {
      HangingJob::Hang(tp0, "AllReduce", 40, {}, 2, 11 * kS),
      HangingJob::Hang(dp1, "ReduceScatter", 7, {}, 2, 12 * kS),
      HangingJob::Hang(dp0, "ReduceScatter", 7, {}, 2, 10 * kS),
      HangingJob::Hang(tp1, "AllReduce", 40, {}, 2, 11 * kS),
  };
  EXPECT_EQ(job.Groups(hangs), std::vector<std::string>{"dp0 <- tp0, tp1, dp1"});
}

TEST(HangOriginTest, ARankThatStoppedIsOneHangWhereverItIsMissing) {
  // Rank 3 stops. Its TP partner 2 waits for it in tp1 (enqueued at 9 s); the world's next
  // AllReduce (10 s) then misses both 3 (stopped) and 2 (stuck in tp1).
  HangingJob job("j");
  const CommKey tp1 = job.Comm("tp1", {2, 3});
  const CommKey world = job.Comm("world", {0, 1, 2, 3});
  job.InFlight(tp1, 0, "AllReduce", 90, 9 * kS, true);
  job.InFlight(world, 0, "AllReduce", 12, 10 * kS, true);
  job.InFlight(world, 1, "AllReduce", 12, 10 * kS, true);
  const std::vector<HangView> hangs = {
      HangingJob::Hang(world, "AllReduce", 12, {2, 3}, 2, 10 * kS),
      HangingJob::Hang(tp1, "AllReduce", 90, {1}, 1, 9 * kS),
  };
  EXPECT_EQ(job.Groups(hangs), std::vector<std::string>{"tp1 <- world"});
}

TEST(HangOriginTest, IndependentHangsAndJobsStayApart) {
  HangingJob a("a"), b("b");
  const CommKey wa = a.Comm("world", {0, 1});
  const CommKey wb = b.Comm("world", {0, 1});
  a.InFlight(wa, 0, "AllReduce", 1, 5 * kS, true);
  b.InFlight(wb, 1, "AllGather", 3, 6 * kS, true);
  const std::vector<HangView> hangs_a = {HangingJob::Hang(wa, "AllReduce", 1, {1}, 1, 5 * kS)};
  EXPECT_EQ(a.Groups(hangs_a), std::vector<std::string>{"world"});
  // A rank that is merely waiting inside a running kernel in another communicator does not make
  // a hang a consequence: only older operations or queued ones do.
  HangingJob c("c");
  const CommKey x = c.Comm("x", {0, 1}), y = c.Comm("y", {0, 1});
  c.InFlight(x, 0, "AllReduce", 1, 5 * kS, true);
  c.InFlight(x, 1, "AllReduce", 1, 5 * kS, true);
  c.InFlight(y, 0, "AllReduce", 1, 4 * kS, true);
  c.InFlight(y, 1, "AllReduce", 1, 4 * kS, true);
  EXPECT_EQ(c.Groups({HangingJob::Hang(x, "AllReduce", 1, {}, 2, 5 * kS),
                      HangingJob::Hang(y, "AllReduce", 1, {}, 2, 4 * kS)}),
            (std::vector<std::string>{"y", "x"}));
}

TEST(HangOriginTest, HangsThatPointAtEachOtherEndAtTheOldest) {
  // Stale reports can make two hangs look stuck behind each other: one origin, the oldest.
  HangingJob job("j");
  const CommKey x = job.Comm("x", {0, 1}), y = job.Comm("y", {0, 1});
  job.InFlight(x, 0, "AllReduce", 1, 5 * kS, false);
  job.InFlight(y, 0, "AllReduce", 1, 4 * kS, false);
  job.InFlight(x, 1, "AllReduce", 1, 3 * kS, true);
  job.InFlight(y, 1, "AllReduce", 1, 2 * kS, true);
  EXPECT_EQ(job.Groups({HangingJob::Hang(x, "AllReduce", 1, {}, 2, 3 * kS),
                        HangingJob::Hang(y, "AllReduce", 1, {}, 2, 2 * kS)}),
            std::vector<std::string>{"y <- x"});
}

TEST(HangOriginTest, ARankMissingInAPipelineIsStuckInWhatItEnqueuedLater) {
  // 1F1B: the last stage (rank 1) reaches the step's DP ReduceScatter at 10 s, long before the
  // first stage (rank 0), which enqueued its pipeline Send at 12 s and is stuck in it because its
  // peer (rank 2) stopped. In rank 0's program order the Send comes first: dp is a consequence.
  HangingJob job("j");
  const CommKey dp = job.Comm("dp", {0, 1});
  const CommKey pp = job.Comm("pp", {0, 2});
  job.InFlight(dp, 1, "ReduceScatter", 8, 10 * kS, true);
  job.InFlight(pp, 0, "Send", 0, 12 * kS, true);
  EXPECT_EQ(job.Groups({HangingJob::Hang(dp, "ReduceScatter", 8, {0}, 1, 10 * kS),
                        HangingJob::Hang(pp, "Send", 0, {1}, 1, 12 * kS)}),
            std::vector<std::string>{"pp <- dp"});
}

TEST(HangOriginTest, AHangHeldByAnOperationNotDeclaredHungIsNotSettled) {
  // Rank 0 is missing from x and has an operation of y in flight that is not (yet) a hang: x may
  // be stuck behind y's hang once that is declared, so x is no origin yet.
  HangingJob job("j");
  const CommKey x = job.Comm("x", {0, 1}), y = job.Comm("y", {0, 1});
  job.InFlight(x, 1, "AllReduce", 3, 5 * kS, true);
  job.InFlight(y, 0, "AllGather", 2, 6 * kS, true);
  EXPECT_EQ(job.Groups({HangingJob::Hang(x, "AllReduce", 3, {0}, 1, 5 * kS)}),
            std::vector<std::string>{"x (unsettled)"});
}

TEST(HangOriginsTest, OneFindingPerOriginThatStaysPut) {
  HangingJob job("j");
  const CommKey a = job.Comm("a", {0, 1}), b = job.Comm("b", {0, 2});
  HangOrigins origins;
  const HangView ha = HangingJob::Hang(a, "AllReduce", 4, {1}, 1, 5 * kS);
  const HangView hb = HangingJob::Hang(b, "AllReduce", 9, {1}, 1, 6 * kS);
  // a alone: reported.
  std::vector<HangGroupChange> changes = origins.Update({HangGroup{ha, true, {}}});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].start);
  EXPECT_EQ(changes[0].group.origin.comm, a);
  // An unsettled origin is not reported.
  EXPECT_TRUE(origins.Update({HangGroup{ha, true, {}}, HangGroup{hb, false, {}}}).empty());
  // A later grouping puts a under b (the same stopped rank, equally old): a stays the origin,
  // b joins it as a consequence, nothing pages again.
  EXPECT_TRUE(origins.Update({HangGroup{hb, true, {ha}}}).empty());
  ASSERT_EQ(origins.origins().size(), 1u);
  EXPECT_EQ(origins.origins().begin()->second.origin.comm, a);
  ASSERT_EQ(origins.origins().begin()->second.consequences.size(), 1u);
  EXPECT_EQ(origins.origins().begin()->second.consequences[0].comm, b);
  EXPECT_TRUE(origins.IsOrigin(a));
  EXPECT_FALSE(origins.IsOrigin(b));
  // a hangs in a later operation: the old finding ends, a new one starts.
  HangView later = ha;
  later.seq = 5;
  changes = origins.Update({HangGroup{later, true, {}}});
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_FALSE(changes[0].start);
  EXPECT_EQ(changes[0].group.origin.seq, 4u);
  EXPECT_TRUE(changes[1].start);
  EXPECT_EQ(changes[1].group.origin.seq, 5u);
  // The hang ends.
  changes = origins.Update({});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].start);
  EXPECT_TRUE(origins.origins().empty());
}

}  // namespace
}  // namespace ncclwatch::aggregator
