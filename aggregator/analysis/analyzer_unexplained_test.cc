// Lateness no root cause explains, through the Analyzer (rootcause/unexplained.h): it pages after
// the hold, marked "origin not found", as a node where a whole node is late; it ends when the
// lateness clears, or is replaced when a root cause is found; lateness every replica shares is
// design and never pages.
#include <set>
#include <string>
#include <vector>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/analysis/answers.h"
#include "gtest/gtest.h"
#include "proto/samples.h"
#include "proto/testing/report_builder.h"

namespace ncclwatch::aggregator {
namespace {

using ncclwatch::v1::Event;

constexpr int64_t kSecond = 1'000'000'000;

struct Comm {
  std::string name;
  uint64_t hash;
  int nranks;
  int n_nodes;
  int first_process;  // rank r is process (GPU) first_process + r * stride, on node process / 4
  int stride;
};

// One rank's report: `n` AllReduces from `first_seq`, the rank arriving `late_ns` late (every
// rank's kernel ends at the same moment) after `own_ns` of its own work.
ncclwatch::v1::RankReport OwnTimeReport(const Comm& c, int rank, uint64_t first_seq, int n,
                                        int64_t late_ns, int64_t own_ns) {
  const int process = c.first_process + rank * c.stride;
  const std::string node = "node-" + std::to_string(process / 4);
  ncclwatch::v1::RankReport r = testing::ReportFrom({.job_id = "job-u",
                                                     .host = node,
                                                     .pid = static_cast<uint32_t>(100 + process),
                                                     .cuda_device = process % 4,
                                                     .comm_hash = c.hash,
                                                     .comm_name = c.name,
                                                     .rank = rank,
                                                     .nranks = c.nranks,
                                                     .n_nodes = c.n_nodes,
                                                     .node = node});
  SampleColumnWriter writer(&r);
  for (int i = 0; i < n; ++i) {
    const uint64_t start = 1'000'000 + late_ns + rank * 10'000;
    writer.Add("AllReduce", "RING_SIMPLE", 1 << 25, 4,
               Sample{first_seq + i, start, 9'000'000 - start, own_ns});
  }
  return r;
}

// Feeds `intervals` reports of 10 collectives per rank of `c` at `now_ns`; `late(rank)` and
// `own(rank)` give each rank's lateness and own time.
template <typename Late, typename Own>
std::vector<Event> Feed(Analyzer& a, const Comm& c, int* interval, int intervals, int64_t now_ns,
                        Late late, Own own) {
  std::vector<Event> events;
  for (int i = 0; i < intervals; ++i, ++*interval) {
    for (int rank = 0; rank < c.nranks; ++rank) {
      for (auto& e :
           a.Ingest(OwnTimeReport(c, rank, *interval * 10, 10, late(rank), own(rank)), now_ns)
               .events) {
        events.push_back(std::move(e));
      }
    }
  }
  return events;
}

const Comm kWorld{"world", 0xa11, 8, 2, 0, 1};  // processes 0-7: nodes node-0 and node-1

int64_t SameOwnTime(int) { return 5'000'000; }

TEST(UnexplainedLatenessTest, ALateNodeNoGpuExplainsPagesAsASlowNodeAfterTheHold) {
  Analyzer analyzer;
  int interval = 0;
  auto node1_late = [](int rank) { return rank >= 4 ? 2'000'000 : 0; };
  // Every rank spends the same time on its own work: the own-time analysis finds nobody.
  EXPECT_TRUE(Feed(analyzer, kWorld, &interval, 3, kSecond, node1_late, SameOwnTime).empty());
  EXPECT_TRUE(analyzer.answers().SlowProcesses("job-u").empty());
  EXPECT_TRUE(analyzer.Tick(kSecond).empty());      // late (beyond any family) since 1 s
  EXPECT_TRUE(analyzer.Tick(kSecond * 2).empty());  // held 1 s of 1.5

  std::vector<Event> events = analyzer.Tick(kSecond * 5 / 2);
  ASSERT_EQ(events.size(), 1u);
  const Event& start = events[0];
  EXPECT_EQ(start.kind(), Event::NODE_STRAGGLER);
  EXPECT_EQ(start.phase(), Event::START);
  EXPECT_TRUE(start.node_straggler().origin_not_found());
  EXPECT_EQ(start.node_straggler().node(), "node-1");
  EXPECT_EQ(start.node_straggler().comm_name(), "world");
  EXPECT_EQ(std::vector<int>(start.node_straggler().ranks().begin(),
                             start.node_straggler().ranks().end()),
            (std::vector<int>{4, 5, 6, 7}));
  EXPECT_NE(start.summary().find("origin not found"), std::string::npos) << start.summary();
  EXPECT_TRUE(analyzer.Tick(kSecond * 3).empty());  // once

  // Answered and exported like any slow node.
  const auto nodes = analyzer.answers().SlowNodes("job-u");
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(nodes[0].origin_not_found());
  const auto comms = analyzer.answers().Comms("job-u");
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].health(), "straggler");
  std::set<std::string> slow_nodes;
  for (const auto& s : analyzer.Series(true)) {
    if (s.name == "ncclwatch_node_straggler" && s.value == 1) {
      for (const auto& [k, v] : s.labels) {
        if (k == "node") slow_nodes.insert(v);
      }
    }
  }
  EXPECT_EQ(slow_nodes, (std::set<std::string>{"node-1"}));

  // The node is punctual again: once its flags clear, the page ends.
  Feed(
      analyzer, kWorld, &interval, 4, kSecond * 4, [](int) { return 0; }, SameOwnTime);
  events = analyzer.Tick(kSecond * 4);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), Event::NODE_STRAGGLER);
  EXPECT_EQ(events[0].phase(), Event::END);
  EXPECT_EQ(events[0].end_reason(), "fault cleared");
  EXPECT_TRUE(analyzer.answers().SlowNodes("job-u").empty());
}

TEST(UnexplainedLatenessTest, ARootCauseFoundLaterReplacesThePage) {
  Analyzer analyzer;
  int interval = 0;
  auto rank5_late = [](int rank) { return rank == 5 ? 2'000'000 : 0; };
  Feed(analyzer, kWorld, &interval, 3, kSecond, rank5_late, SameOwnTime);
  EXPECT_TRUE(analyzer.Tick(kSecond).empty());
  std::vector<Event> events = analyzer.Tick(kSecond * 3);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), Event::STRAGGLER);
  EXPECT_TRUE(events[0].straggler().origin_not_found());
  EXPECT_FALSE(events[0].has_root_cause());
  EXPECT_EQ(events[0].straggler().rank(), 5);
  const auto stragglers = analyzer.answers().Stragglers("job-u");
  ASSERT_EQ(stragglers.size(), 1u);
  EXPECT_TRUE(stragglers[0].origin_not_found());

  // Now rank 5's own work takes 2 ms longer: the own-time analysis names its GPU. The page ends
  // ("root cause found") before the root cause starts, so the two never overlap.
  events = Feed(analyzer, kWorld, &interval, 3, kSecond * 4, rank5_late,
                [](int rank) { return rank == 5 ? 7'000'000 : 5'000'000; });
  for (const Event& e : analyzer.Tick(kSecond * 5)) events.push_back(e);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind(), Event::STRAGGLER);
  EXPECT_EQ(events[0].phase(), Event::END);
  EXPECT_EQ(events[0].end_reason(), "root cause found");
  EXPECT_TRUE(events[0].straggler().origin_not_found());
  EXPECT_EQ(events[1].phase(), Event::START);
  EXPECT_TRUE(events[1].has_root_cause());
  EXPECT_EQ(events[1].root_cause().pid(), 105u);
  EXPECT_TRUE(analyzer.answers().Stragglers("job-u").empty());
  EXPECT_TRUE(analyzer.Tick(kSecond * 8).empty());
}

// Four embedding-like communicators (ranks 0 and 1 on different nodes), one per replica, fed
// three intervals at 1 s in which rank 1 arrives 2 ms late in every one of them, the pipeline's
// design; a tick at 4 s finds nothing. `intervals` is where each one's reports are.
std::vector<Comm> FourReplicasLateByDesign(Analyzer& analyzer, std::vector<int>* intervals) {
  std::vector<Comm> emb;
  for (int i = 0; i < 4; ++i) {
    emb.push_back({"emb" + std::to_string(i), 0xe0u + i, 2, 2, 8 * i, 4});
  }
  auto design = [](int rank) { return rank == 1 ? 2'000'000 : 0; };
  intervals->assign(4, 0);
  for (int i = 0; i < 4; ++i)
    Feed(analyzer, emb[i], &(*intervals)[i], 3, kSecond, design, SameOwnTime);
  EXPECT_TRUE(analyzer.Tick(kSecond * 4).empty());
  return emb;
}

// The one page of FourReplicasLateByDesign's replica 2, rank 1, origin not found.
void ExpectEmb2Rank1Pages(const std::vector<Event>& events) {
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), Event::STRAGGLER);
  EXPECT_TRUE(events[0].straggler().origin_not_found());
  EXPECT_EQ(events[0].straggler().comm_name(), "emb2");
  EXPECT_EQ(events[0].straggler().rank(), 1);
}

// Only where a rank is later than in the other replicas is it a symptom.
TEST(UnexplainedLatenessTest, LatenessEveryReplicaSharesIsDesign) {
  Analyzer analyzer;
  std::vector<int> intervals;
  const std::vector<Comm> emb = FourReplicasLateByDesign(analyzer, &intervals);

  // Replica 2's rank 1 becomes 3 ms later than its counterparts: that pages, by itself.
  Feed(
      analyzer, emb[2], &intervals[2], 3, kSecond * 4,
      [](int rank) { return rank == 1 ? 5'000'000 : 0; }, SameOwnTime);
  // The hold counts from when it went beyond its family, not from its (design) flag at 1 s.
  EXPECT_TRUE(analyzer.Tick(kSecond * 5).empty());
  ExpectEmb2Rank1Pages(analyzer.Tick(kSecond * 7));
}

// The design moves while one replica has no collective: the other three become punctual, so
// the one still 2 ms late is late beyond its family although nothing of its own changed since the
// tick that found it design (what that tick found is not kept past its family's change).
TEST(UnexplainedLatenessTest, AReplicaLeftLateWhenItsFamilyMovesPages) {
  Analyzer analyzer;
  std::vector<int> intervals;
  const std::vector<Comm> emb = FourReplicasLateByDesign(analyzer, &intervals);
  for (int i : {0, 1, 3}) {
    Feed(
        analyzer, emb[i], &intervals[i], 3, kSecond * 4, [](int) { return 0; }, SameOwnTime);
  }
  EXPECT_TRUE(analyzer.Tick(kSecond * 5).empty());  // beyond its family since 5 s
  ExpectEmb2Rank1Pages(analyzer.Tick(kSecond * 7));
}

// GPU 4 is late in a two-rank communicator with GPU 0 (GPU 0 waits for it there), and then both
// are late in the world communicator: GPU 0's lateness is a consequence; GPU 4 alone pages.
TEST(UnexplainedLatenessTest, AGpuThatWaitedForAnotherLateGpuIsItsConsequence) {
  Analyzer analyzer;
  const Comm pair{"pair", 0xb0, 2, 2, 0, 4};  // GPUs 0 (node-0) and 4 (node-1)
  int pair_interval = 0, world_interval = 0;
  Feed(
      analyzer, pair, &pair_interval, 3, kSecond,
      [](int rank) { return rank == 1 ? 2'000'000 : 0; }, SameOwnTime);
  Feed(
      analyzer, kWorld, &world_interval, 3, kSecond,
      [](int rank) { return rank == 0 || rank == 4 ? 2'000'000 : 0; }, SameOwnTime);
  EXPECT_TRUE(analyzer.Tick(kSecond).empty());
  const std::vector<Event> events = analyzer.Tick(kSecond * 3);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), Event::STRAGGLER);
  EXPECT_TRUE(events[0].straggler().origin_not_found());
  EXPECT_EQ(events[0].straggler().node(), "node-1");
  EXPECT_EQ(events[0].straggler().cuda_device(), 0);
}

// One rank's report in a two-rank exchange communicator: `n` exchanges from `first_seq`, rank 1
// sending to rank 0, the sender `sender_late_ns` later than the receiver after `sender_extra_ns`
// more of its own work (both ends spend 5 ms otherwise).
ncclwatch::v1::RankReport ExchangeReport(const Comm& c, int rank, uint64_t first_seq, int n,
                                         int64_t sender_late_ns, int64_t sender_extra_ns) {
  ncclwatch::v1::RankReport r = OwnTimeReport(c, rank, 0, 0, 0, 0);
  SampleColumnWriter writer(&r);
  for (int i = 0; i < n; ++i) {
    const uint64_t start = 1'000'000 + (rank == 1 ? sender_late_ns : 0);
    writer.Add(rank == 1 ? "Send" : "Recv", "", 1 << 20, 1,
               Sample{first_seq + i, start, 9'000'000 - start,
                      5'000'000 + (rank == 1 ? sender_extra_ns : 0)},
               /*peer=*/1 - rank);
  }
  return r;
}

// Feeds three intervals of 10 exchanges per rank of `ep` (ExchangeReport) at 1 s; none pages.
void FeedExchanges(Analyzer& a, const Comm& ep, int64_t sender_late_ns, int64_t sender_extra_ns) {
  for (int i = 0; i < 3; ++i) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(
          a.Ingest(ExchangeReport(ep, rank, i * 10, 10, sender_late_ns, sender_extra_ns), kSecond)
              .events.empty());
    }
  }
}

// GPU 0 late in the world, where nobody waits for anybody else: it pages "origin not found" at
// `pages_at_ms`, not a quarter second before.
void ExpectGpu0PagesAt(Analyzer& a, int64_t pages_at_ms) {
  int world_interval = 0;
  Feed(
      a, kWorld, &world_interval, 3, kSecond, [](int rank) { return rank == 0 ? 2'000'000 : 0; },
      SameOwnTime);
  EXPECT_TRUE(a.answers().SlowProcesses("job-u").empty());
  EXPECT_TRUE(a.Tick(kSecond).empty());  // GPU 0 late beyond any family since 1 s
  EXPECT_TRUE(a.Tick((pages_at_ms - 250) * 1'000'000).empty());
  const std::vector<Event> events = a.Tick(pages_at_ms * 1'000'000);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), Event::STRAGGLER);
  EXPECT_TRUE(events[0].straggler().origin_not_found());
  EXPECT_EQ(events[0].straggler().comm_name(), "world");
  EXPECT_EQ(events[0].straggler().rank(), 0);
}

// Before it was late in the world, GPU 0 waited in an exchange for GPU 4, flagged late there and
// not slow by its own time. GPU 0 is the symptom, GPU 4 the likelier origin: GPU 0 pages only
// after the exchange hold too (at 4 s: 1.5 + 1.5 s after it went late, not at 2.5 s), and still
// pages.
TEST(UnexplainedLatenessTest, AGpuThatWaitedInAnExchangeHoldsLongerAndStillPages) {
  Analyzer analyzer;
  FeedExchanges(analyzer, Comm{"ep", 0xc0, 2, 2, 0, 4}, 2'000'000, 0);  // GPUs 0 and 4
  ExpectGpu0PagesAt(analyzer, 4'000);
}

// GPU 4 is punctual in the exchange, but spends 0.5 ms more on its own work before it: short of
// its threshold (15% of the 5 ms own time), over half of it, on the way to a verdict. GPU 0
// holds for it just the same.
TEST(UnexplainedLatenessTest, AGpuHoldsForAnExchangePeerOnTheWayToAVerdict) {
  Analyzer analyzer;
  FeedExchanges(analyzer, Comm{"ep", 0xc0, 2, 2, 0, 4}, 0, 500'000);
  ExpectGpu0PagesAt(analyzer, 4'000);
}

// Every replica's exchange waits for its sender alike (a pipeline's design): that peer is no
// likelier origin than anybody, and GPU 0 pages after the plain hold.
TEST(UnexplainedLatenessTest, AnExchangeLateByDesignDoesNotHold) {
  Analyzer analyzer;
  for (int replica = 0; replica < 4; ++replica) {
    FeedExchanges(analyzer, Comm{"ep" + std::to_string(replica), 0xc0u + replica, 2, 2, replica, 4},
                  2'000'000, 0);
  }
  ExpectGpu0PagesAt(analyzer, 2'500);
}

}  // namespace
}  // namespace ncclwatch::aggregator
