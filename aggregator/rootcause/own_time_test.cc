#include "aggregator/rootcause/own_time.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "aggregator/detect/correlator.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

// A job as the own-time analysis sees it: communicators of world ranks, each rank a process on
// node rank / gpus_per_node, and a rule giving each rank's own time before each collective.
class FakeJob {
 public:
  struct Comm {
    CommKey key;
    std::string op;
    uint64_t bytes;
    std::vector<int> members;  // world ranks; index = communicator rank
    int n_nodes;
  };
  // own(world rank, communicator, collective index) in ns.
  using OwnFn = std::function<int64_t(int, const Comm&, int)>;

  FakeJob(int ranks, int gpus_per_node) : ranks_(ranks), gpus_per_node_(gpus_per_node) {}

  void AddComm(const std::string& name, const std::string& op, uint64_t bytes,
               std::vector<int> members) {
    std::set<int> nodes;
    for (int m : members) nodes.insert(m / gpus_per_node_);
    comms_.push_back(Comm{CommKey{"job", std::hash<std::string>()(name)}, op, bytes,
                          std::move(members), static_cast<int>(nodes.size())});
  }

  // Registers the members, then runs `groups` collectives on every communicator; returns the
  // world ranks that are slow at the end.
  std::set<int> Run(OwnTimeAnalyzer& a, int groups, const OwnFn& own) {
    for (const Comm& c : comms_) {
      const int n = static_cast<int>(c.members.size());
      for (int r = 0; r < n; ++r) {
        a.SetMember(c.key, n, r, Process(c.members[r]),
                    "node" + std::to_string(c.members[r] / gpus_per_node_));
      }
    }
    for (int g = 0; g < groups; ++g) {
      for (const Comm& c : comms_) {
        OwnTimeGroup group{c.key, c.op, c.bytes, c.n_nodes, {}};
        for (int m : c.members) group.own_time_ns.push_back(own(m, c, next_index_));
        a.Observe(group);
      }
      ++next_index_;
    }
    std::set<int> slow;
    for (int r = 0; r < ranks_; ++r) {
      if (a.IsSlow(Process(r))) slow.insert(r);
    }
    return slow;
  }

  static ProcessKey Process(int rank) {
    return ProcessKey{"job", "host" + std::to_string(rank), static_cast<uint32_t>(1000 + rank), 0};
  }

 private:
  int ranks_;
  int gpus_per_node_;
  std::vector<Comm> comms_;
  int next_index_ = 0;
};

// Deterministic jitter in [-amplitude, amplitude].
int64_t Jitter(int rank, int index, const std::string& comm, int64_t amplitude) {
  uint64_t x = std::hash<std::string>()(comm) ^ (static_cast<uint64_t>(rank) << 32) ^
               static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<int64_t>(x % (2 * amplitude + 1)) - amplitude;
}

// 4 nodes x 2 GPUs, TP 2 (inside a node), DP 2 and PP 2 across nodes, Megatron order
// (rank = tp + 2 * dp + 4 * pp): node 0 holds stage 0 of replica 0, node 1 stage 0 of replica 1,
// nodes 2 and 3 stage 1. Stage 0 carries the embedding: by design it spends 1.5x as long before
// the cross-stage collectives (model-parallel groups, world).
FakeJob ThreeD() {
  FakeJob job(8, 2);
  for (int i = 0; i < 4; ++i)
    job.AddComm("tp" + std::to_string(i), "AllReduce", 16 << 20, {2 * i, 2 * i + 1});
  job.AddComm("dp0", "ReduceScatter", 8 << 20, {0, 2});
  job.AddComm("dp1", "ReduceScatter", 8 << 20, {1, 3});
  job.AddComm("dp2", "ReduceScatter", 4 << 20, {4, 6});  // stage 1 holds fewer parameters
  job.AddComm("dp3", "ReduceScatter", 4 << 20, {5, 7});
  job.AddComm("mp0", "AllReduce", 8, {0, 1, 4, 5});
  job.AddComm("mp1", "AllReduce", 8, {2, 3, 6, 7});
  job.AddComm("world", "AllReduce", 4, {0, 1, 2, 3, 4, 5, 6, 7});
  return job;
}

int Stage(int rank) { return rank / 4; }

// Own time of a healthy 3D rank: 2 ms of work before each collective, 1.5x for stage 0 before
// the cross-stage ones, +-100 us of jitter.
int64_t HealthyOwn(int rank, const FakeJob::Comm& c, int index) {
  double own = 2'000'000;
  const bool cross_stage = c.op == "AllReduce" && c.bytes <= 8;
  if (cross_stage && Stage(rank) == 0) own *= 1.5;
  return static_cast<int64_t>(own) + Jitter(rank, index, std::to_string(c.key.comm_hash), 100'000);
}

TEST(OwnTimeAnalyzerTest, AHealthy3DJobWithAnImbalancedStageHasNoSlowGpu) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  EXPECT_EQ(job.Run(a, 64, HealthyOwn), std::set<int>{});
}

TEST(OwnTimeAnalyzerTest, ASlowGpuIn3DIsTheOnlyOneFlaggedNotItsPartnersOrItsStage) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  // Rank 2 (node 1, stage 0, replica 1) works 1.4x longer before everything.
  auto own = [](int rank, const FakeJob::Comm& c, int i) {
    const int64_t t = HealthyOwn(rank, c, i);
    return rank == 2 ? t * 14 / 10 : t;
  };
  EXPECT_EQ(job.Run(a, 64, own), std::set<int>{2});
  const std::vector<SlowProcess> slow = a.Slow("job");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].node, "node1");
  EXPECT_GT(slow[0].excess_ns, 600'000);  // 0.4 x 2 ms, less jitter
  EXPECT_TRUE(slow[0].slow);
}

// A finding's answer cites the evidence it was reported with while that still shows the GPU
// slow, even when another collective shows it more; then the strongest again.
TEST(OwnTimeAnalyzerTest, ViewKeepingCitesTheReportedEvidenceWhileItHolds) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  auto slower = [](int64_t t, int64_t tenths) { return t * tenths / 10; };
  job.Run(a, 64, [&](int rank, const FakeJob::Comm& c, int i) {
    return rank == 2 ? slower(HealthyOwn(rank, c, i), 14) : HealthyOwn(rank, c, i);
  });
  const SlowProcess kept = a.View(FakeJob::Process(2));
  ASSERT_TRUE(kept.slow);
  ASSERT_GE(kept.rank, 0);
  // Now three times as slow before every other collective, still 1.4x before the cited one.
  auto elsewhere = [&](int64_t tenths_there) {
    return [&, tenths_there](int rank, const FakeJob::Comm& c, int i) {
      const int64_t t = HealthyOwn(rank, c, i);
      if (rank != 2) return t;
      return c.key == kept.comm ? slower(t, tenths_there) : slower(t, 30);
    };
  };
  job.Run(a, 64, elsewhere(14));
  const SlowProcess strongest = a.View(FakeJob::Process(2));
  ASSERT_NE(strongest.comm, kept.comm) << "the test needs the strongest evidence to move";
  SlowProcess now = a.ViewKeeping(kept);
  EXPECT_EQ(now.comm, kept.comm);
  EXPECT_EQ(now.op, kept.op);
  EXPECT_EQ(now.bytes, kept.bytes);
  EXPECT_EQ(now.rank, kept.rank);
  EXPECT_GT(now.excess_ns, 600'000);
  EXPECT_TRUE(now.slow);
  // Healthy before the cited collective: the strongest evidence instead.
  job.Run(a, 64, elsewhere(10));
  now = a.ViewKeeping(kept);
  EXPECT_NE(now.comm, kept.comm);
  EXPECT_EQ(now.comm, a.View(FakeJob::Process(2)).comm);
}

TEST(OwnTimeAnalyzerTest, BothGpusOfASlowNodeIn3D) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  auto own = [](int rank, const FakeJob::Comm& c, int i) {
    const int64_t t = HealthyOwn(rank, c, i);
    return rank / 2 == 1 ? t * 14 / 10 : t;  // node 1: ranks 2 and 3
  };
  EXPECT_EQ(job.Run(a, 64, own), (std::set<int>{2, 3}));
}

TEST(OwnTimeAnalyzerTest, JobWideStallsAreNobodysFault) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  // Every 8th collective every rank pauses 50 ms, each a slightly different amount.
  auto own = [](int rank, const FakeJob::Comm& c, int i) {
    int64_t t = HealthyOwn(rank, c, i);
    if (i % 8 == 0) t += 50'000'000 + Jitter(rank, i, "stall", 5'000'000);
    return t;
  };
  EXPECT_EQ(job.Run(a, 64, own), std::set<int>{});
}

TEST(OwnTimeAnalyzerTest, AFaultThatEndsClearsAndOneThatStartsLaterIsFound) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  auto slow5 = [](int rank, const FakeJob::Comm& c, int i) {
    const int64_t t = HealthyOwn(rank, c, i);
    return rank == 5 ? t * 2 : t;
  };
  EXPECT_EQ(job.Run(a, 32, HealthyOwn), std::set<int>{});  // healthy first: it appears mid-run
  EXPECT_EQ(job.Run(a, 32, slow5), std::set<int>{5});
  EXPECT_EQ(job.Run(a, 32, HealthyOwn), std::set<int>{});
}

// Stage 0 of both replicas (nodes 0 and 1) slows to 1.4x mid-run: each GPU's counterpart in the
// other replica slows alike, and so do its TP and DP peers, so comparing cancels it everywhere.
// Its own past does not: the stage 0 GPUs' excess over stage 1 in the cross-stage groups grew
// while stage 1's did not.
TEST(OwnTimeAnalyzerTest, AFaultEveryReplicaSharesIsFoundByItsChangeInTime) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  auto stage0_slower = [](int rank, const FakeJob::Comm& c, int i) {
    const int64_t t = HealthyOwn(rank, c, i);
    return Stage(rank) == 0 ? t * 14 / 10 : t;
  };
  EXPECT_EQ(job.Run(a, 48, HealthyOwn), std::set<int>{});
  EXPECT_EQ(job.Run(a, 32, stage0_slower), (std::set<int>{0, 1, 2, 3}));
  const std::vector<SlowProcess> slow = a.Slow("job");
  ASSERT_EQ(slow.size(), 4u);
  for (const SlowProcess& p : slow) {
    EXPECT_TRUE(p.changed) << p.node;  // its replicas cannot tell: the evidence is its past
    EXPECT_GT(p.excess_ns, 400'000);
  }
  // Back to normal: cleared.
  EXPECT_EQ(job.Run(a, 32, HealthyOwn), std::set<int>{});
}

// 2 nodes x 4 GPUs, TP 2 x DP 2 inside each node: node 0 holds stage 0 of both replicas (ranks
// 0-3), node 1 stage 1 (ranks 4-7). The stages talk only through the world all-reduce, which
// follows other collectives at once (its own time is tiny), as pipeline exchanges follow the
// TP all-reduce.
FakeJob StagePerNode() {
  FakeJob job(8, 4);
  for (int i = 0; i < 4; ++i) {
    job.AddComm("tp" + std::to_string(i), "AllReduce", 4 << 20, {2 * i, 2 * i + 1});
    job.AddComm("dp" + std::to_string(i), "ReduceScatter", 8 << 20,
                {4 * (i / 2) + i % 2, 4 * (i / 2) + i % 2 + 2});
  }
  job.AddComm("world", "AllReduce", 4, {0, 1, 2, 3, 4, 5, 6, 7});
  return job;
}

int64_t StagePerNodeOwn(int rank, const FakeJob::Comm& c, int i) {
  const int64_t work = c.op == "ReduceScatter" ? 1'000'000 : c.bytes <= 4 ? 50'000 : 2'000'000;
  return work + Jitter(rank, i, std::to_string(c.key.comm_hash), work / 20);
}

TEST(OwnTimeAnalyzerTest, ANodeHoldingAStageOfEveryReplicaIsFoundByTheJobsChangeInTime) {
  // Node 0 slows to 1.3x after 300 healthy collectives: its TP and DP groups slow alike and the
  // world's own time is too small to tell, but its classes grew while the job's others did not.
  OwnTimeAnalyzer a;
  FakeJob job = StagePerNode();
  auto node0_slower = [](int rank, const FakeJob::Comm& c, int i) {
    const int64_t t = StagePerNodeOwn(rank, c, i);
    return rank < 4 && c.bytes > 4 ? t * 13 / 10 : t;
  };
  EXPECT_EQ(job.Run(a, 300, StagePerNodeOwn), std::set<int>{});
  EXPECT_EQ(job.Run(a, 200, node0_slower), (std::set<int>{0, 1, 2, 3}));
  for (const SlowProcess& p : a.Slow("job")) EXPECT_TRUE(p.changed) << p.node;
  // The whole job slowing alike is no fault.
  OwnTimeAnalyzer b;
  FakeJob whole = StagePerNode();
  auto all_slower = [](int rank, const FakeJob::Comm& c, int i) {
    return StagePerNodeOwn(rank, c, i) * 13 / 10;
  };
  EXPECT_EQ(whole.Run(b, 300, StagePerNodeOwn), std::set<int>{});
  EXPECT_EQ(whole.Run(b, 200, all_slower), std::set<int>{});
}

TEST(OwnTimeAnalyzerTest, AJobThatSlowsDownAsAWholeHasNoSlowGpu) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();  // with stage 0's design imbalance, which grows with the job
  auto all_slower = [](int rank, const FakeJob::Comm& c, int i) {
    return HealthyOwn(rank, c, i) * 14 / 10;  // a longer sequence length, an evaluation phase
  };
  EXPECT_EQ(job.Run(a, 48, HealthyOwn), std::set<int>{});
  EXPECT_EQ(job.Run(a, 48, all_slower), std::set<int>{});
}

TEST(OwnTimeAnalyzerTest, WarmUpIsNobodysFault) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  // The first 16 collectives of every communicator are slow and uneven: rank 3 twice as slow.
  auto warm = [](int rank, const FakeJob::Comm& c, int i) {
    const int64_t t = HealthyOwn(rank, c, i);
    return rank == 3 ? 2 * t : t + Jitter(rank, i, "warm", 1'000'000);
  };
  EXPECT_EQ(job.Run(a, 16, warm), std::set<int>{});
  EXPECT_EQ(job.Run(a, 48, HealthyOwn), std::set<int>{});
}

TEST(OwnTimeAnalyzerTest, TwoSlowGpusOnDifferentNodesAreBothFound) {
  OwnTimeAnalyzer a;
  FakeJob job = ThreeD();
  auto own = [](int rank, const FakeJob::Comm& c, int i) {
    const int64_t t = HealthyOwn(rank, c, i);
    return rank == 2 || rank == 5 ? t * 14 / 10 : t;
  };
  EXPECT_EQ(job.Run(a, 64, own), (std::set<int>{2, 5}));
}

TEST(OwnTimeAnalyzerTest, WithoutCrossStageGroupsTheWorldDoesNotBlameASlowNodesReplicas) {
  // The 3D job without model-parallel groups: the only cross-stage collective is the world's,
  // where stage 0's design and node 1's slowness mix; the DP groups settle it.
  FakeJob job(8, 2);
  for (int i = 0; i < 4; ++i)
    job.AddComm("tp" + std::to_string(i), "AllReduce", 16 << 20, {2 * i, 2 * i + 1});
  job.AddComm("dp0", "ReduceScatter", 8 << 20, {0, 2});
  job.AddComm("dp1", "ReduceScatter", 8 << 20, {1, 3});
  job.AddComm("dp2", "ReduceScatter", 4 << 20, {4, 6});
  job.AddComm("dp3", "ReduceScatter", 4 << 20, {5, 7});
  job.AddComm("world", "AllReduce", 4, {0, 1, 2, 3, 4, 5, 6, 7});
  OwnTimeAnalyzer a;
  auto own = [](int rank, const FakeJob::Comm& c, int i) {
    const int64_t t = HealthyOwn(rank, c, i);
    return rank / 2 == 1 ? t * 14 / 10 : t;
  };
  EXPECT_EQ(job.Run(a, 64, own), (std::set<int>{2, 3}));
}

// The world + per-node layout of a data-parallel job: 2 nodes x 4 GPUs.
FakeJob WorldAndNodes() {
  FakeJob job(8, 4);
  job.AddComm("world", "AllReduce", 32 << 20, {0, 1, 2, 3, 4, 5, 6, 7});
  job.AddComm("node0", "AllReduce", 16 << 20, {0, 1, 2, 3});
  job.AddComm("node1", "AllReduce", 16 << 20, {4, 5, 6, 7});
  return job;
}

TEST(OwnTimeAnalyzerTest, DataParallelSlowRankAndSlowNode) {
  auto flat = [](int rank, const FakeJob::Comm& c, int i) {
    return 5'000'000 + Jitter(rank, i, std::to_string(c.key.comm_hash), 300'000);
  };
  {
    OwnTimeAnalyzer a;
    FakeJob job = WorldAndNodes();
    auto own = [&](int rank, const FakeJob::Comm& c, int i) {
      return flat(rank, c, i) + (rank == 5 ? 2'000'000 : 0);
    };
    EXPECT_EQ(job.Run(a, 64, own), std::set<int>{5});
  }
  {
    OwnTimeAnalyzer a;
    FakeJob job = WorldAndNodes();
    auto own = [&](int rank, const FakeJob::Comm& c, int i) {
      return flat(rank, c, i) + (rank >= 4 ? 2'000'000 : 0);
    };
    EXPECT_EQ(job.Run(a, 64, own), (std::set<int>{4, 5, 6, 7}));
  }
  {
    OwnTimeAnalyzer a;
    FakeJob job = WorldAndNodes();
    EXPECT_EQ(job.Run(a, 64, flat), std::set<int>{});
  }
}

TEST(OwnTimeAnalyzerTest, UnknownOwnTimesAndUnknownMembersAreNotJudged) {
  OwnTimeAnalyzer a;
  const CommKey comm{"job", 1};
  OwnTimeGroup g{comm, "AllReduce", 1024, 2, {-1, 9'000'000}};
  EXPECT_TRUE(a.Observe(g).empty());  // members not known yet
  a.SetMember(comm, 2, 1, FakeJob::Process(1), "n1");
  EXPECT_TRUE(a.Observe(g).empty());  // rank 0 not known yet
  a.SetMember(comm, 2, 0, FakeJob::Process(0), "n0");
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(a.Observe(g).empty());
  EXPECT_TRUE(a.Slow("").empty());
}

TEST(OwnTimeAnalyzerTest, ForgettingTheOnlyEvidenceEndsTheVerdict) {
  OwnTimeAnalyzer a;
  const CommKey comm{"job", 1};
  a.SetMember(comm, 2, 0, FakeJob::Process(0), "n0");
  a.SetMember(comm, 2, 1, FakeJob::Process(1), "n0");
  std::vector<SlowProcess> changes;
  for (int i = 0; i < 32; ++i) {
    for (const SlowProcess& c : a.Observe({comm, "AllReduce", 1024, 1, {1'000'000, 4'000'000}})) {
      changes.push_back(c);
    }
  }
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].process, FakeJob::Process(1));
  EXPECT_EQ(changes[0].comm, comm);
  EXPECT_EQ(changes[0].rank, 1);
  EXPECT_DOUBLE_EQ(changes[0].excess_ns, 3'000'000);
  const std::vector<SlowProcess> ended = a.Forget(comm);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_FALSE(ended[0].slow);
  EXPECT_FALSE(a.IsSlow(FakeJob::Process(1)));
}

// The caller's cached slot finds the communicator's state while it lives; once it is forgotten
// the slot is not used (a collective of the unknown communicator is not judged), and once it is
// back the slot follows the new state.
TEST(OwnTimeAnalyzerTest, ACachedSlotIsDroppedWithTheCommunicatorsState) {
  OwnTimeAnalyzer a;
  const CommKey comm{"job", 1};
  CachedSlot slot;
  const OwnTimeGroup slow_second{comm, "AllReduce", 1024, 1, {1'000'000, 4'000'000}};
  auto members = [&] {
    a.SetMember(comm, 2, 0, FakeJob::Process(0), "n0");
    a.SetMember(comm, 2, 1, FakeJob::Process(1), "n0");
  };
  members();
  int verdicts = 0;
  for (int i = 0; i < 32; ++i) verdicts += static_cast<int>(a.Observe(slow_second, &slot).size());
  EXPECT_EQ(verdicts, 1);
  EXPECT_TRUE(a.IsSlow(FakeJob::Process(1)));
  a.Forget(comm);
  EXPECT_TRUE(a.Observe(slow_second, &slot).empty());
  members();  // back, from scratch: warm-up again before any verdict
  verdicts = 0;
  for (int i = 0; i < 16; ++i) verdicts += static_cast<int>(a.Observe(slow_second, &slot).size());
  EXPECT_EQ(verdicts, 0);
  for (int i = 0; i < 16; ++i) verdicts += static_cast<int>(a.Observe(slow_second, &slot).size());
  EXPECT_EQ(verdicts, 1);
}

// A communicator's members reach their processes' states without a lookup; forgetting one
// communicator (or replacing a rank's process) must leave the states the others still use, node
// included, and free those nothing uses any more.
TEST(OwnTimeAnalyzerTest, ForgettingOneCommunicatorKeepsWhatItsProcessesOthersStillUse) {
  OwnTimeAnalyzer a;
  const CommKey first{"job", 1};
  const CommKey second{"job", 2};
  for (const CommKey& comm : {first, second}) {
    a.SetMember(comm, 2, 0, FakeJob::Process(0), "n0");
    a.SetMember(comm, 2, 1, FakeJob::Process(1), "n1");
  }
  auto run = [&](const CommKey& comm, int groups) {
    for (int i = 0; i < groups; ++i)
      a.Observe({comm, "AllReduce", 1024, 2, {1'000'000, 4'000'000}});
  };
  run(first, 32);
  EXPECT_TRUE(a.IsSlow(FakeJob::Process(1)));
  a.Forget(first);  // its evidence goes; the second communicator's members stay known
  EXPECT_FALSE(a.IsSlow(FakeJob::Process(1)));
  EXPECT_EQ(a.ProcessesOnNode("job", "n1"), 1);
  run(second, 32);
  ASSERT_TRUE(a.IsSlow(FakeJob::Process(1)));
  EXPECT_EQ(a.View(FakeJob::Process(1)).node, "n1");
  // Rank 1 of the second communicator is another process now, and takes over its evidence; once
  // the communicator goes, nothing of its ranks' states is left but the old process's evidence.
  a.SetMember(second, 2, 1, FakeJob::Process(7), "n1");
  run(second, 64);
  EXPECT_TRUE(a.IsSlow(FakeJob::Process(7)));
  a.Forget(second);
  EXPECT_FALSE(a.IsSlow(FakeJob::Process(7)));
  EXPECT_EQ(a.View(FakeJob::Process(7)).node, "");  // forgotten
  EXPECT_EQ(a.ProcessesOnNode("job", "n0"), 0);
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

// 60 steps of an all-to-all on `ep` (8 ranks on 4 nodes, two a node), 100 ms apart: one exchange
// per ordered pair and step, each end's own time before it `2 ms + jitter + extra(rank)`.
template <typename Extra>
void AllToAll(OwnTimeAnalyzer& a, const CommKey& ep, int64_t jitter, Extra extra) {
  const int n = 8;
  for (int r = 0; r < n; ++r) {
    a.SetMember(ep, n, r, FakeJob::Process(r), "node" + std::to_string(r / 2));
  }
  auto own = [&](int who, int step) {
    return 2'000'000 + Jitter(who, step, "ep", jitter) + extra(who);
  };
  for (int step = 0; step < 60; ++step) {
    for (int s = 0; s < n; ++s) {
      for (int r = 0; r < n; ++r) {
        if (r != s)
          a.Observe(OwnTimeGroup{
              ep, kP2pClass, 0, 4, {own(s, step), own(r, step)}, step * 100'000'000LL, {s, r}});
      }
    }
  }
}

// Expert parallelism with an all-to-all token dispatch: 8 ranks on 4 nodes exchange with every
// other rank (one exchange per ordered pair and step), only point-to-point; rank 6's expert
// compute before the exchanges takes 1 ms longer. Its own time is longer in each of its
// exchanges; its partners' are not.
TEST(OwnTimeAnalyzerTest, AllToAllExchangesFindTheGpuSlowBeforeThem) {
  for (const int slow : {-1, 6}) {
    OwnTimeAnalyzer a;
    const CommKey ep{"job", 77};
    const int n = 8;
    AllToAll(a, ep, 100'000, [&](int who) { return who == slow ? 1'000'000 : 0; });
    for (int r = 0; r < n; ++r) EXPECT_EQ(a.IsSlow(FakeJob::Process(r)), r == slow) << slow << r;
    if (slow >= 0) {
      const SlowProcess v = a.View(FakeJob::Process(slow));
      EXPECT_EQ(v.op, kP2pClass);
      EXPECT_EQ(v.rank, slow);
      EXPECT_NEAR(v.excess_ns, 1'000'000, 150'000);
    }
    // Exchanges naming a rank outside the communicator are ignored.
    EXPECT_TRUE(a.Observe(OwnTimeGroup{ep, kP2pClass, 0, 4, {1, 1}, 0, {0, n}}).empty());
  }
}

// The same exchanges, rank 6 spending 0.25 ms longer before them: below its threshold (0.3 ms),
// not slow, but more than half of it: a peer on the way to a verdict, for the others only.
TEST(OwnTimeAnalyzerTest, SaysWhichExchangePeersAreOnTheWayToAVerdict) {
  for (const int building : {-1, 6}) {
    OwnTimeAnalyzer a;
    const CommKey ep{"job", 78};
    const int n = 8;
    AllToAll(a, ep, 50'000, [&](int who) { return who == building ? 250'000 : 0; });
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(a.IsSlow(FakeJob::Process(r))) << building << r;
      EXPECT_EQ(a.ExchangePeerBuilding(ep, r), building >= 0 && r != building) << building << r;
    }
    EXPECT_FALSE(a.ExchangePeerBuilding(CommKey{"job", 79}, 0));  // unknown
  }
}

// Pipeline exchanges between two stages, in two replicas (communicators A and B, each end on a
// node of its own): the later stage spends 0.5 ms longer before every exchange by design. A's
// reports come first; B's exchanges reach the aggregator only after A's first second (its nodes'
// first reports). Until then A has no counterpart, and its ends compared with each other would make
// the later stage's GPU slow: it is not (the comparison only holds origin-not-found pages), and
// once B is there a GPU slow before the exchanges still is.
// With the default flush interval (1 s, or unknown) the wait is 2 s; with plugins flushing every
// 5 s, B's reports may come 5 s after A's, and the wait is two of those intervals (A alone for
// 9 s: compared after 2 s, rank 1 would be slow).
TEST(OwnTimeAnalyzerTest, ExchangesWaitForTheirCounterpartsBeforeComparingTheirEnds) {
  struct Case {
    int slow;             // the world rank of the slow GPU, -1 for none
    int64_t interval_ns;  // the reports' flush interval (0: unknown)
  };
  for (const Case& c : {Case{-1, 0}, Case{1, 0}, Case{-1, 5'000'000'000}, Case{1, 5'000'000'000}}) {
    const int slow = c.slow;
    const int64_t interval_ns = c.interval_ns;
    OwnTimeAnalyzer a;
    const int alone = interval_ns > 1'000'000'000 ? 900 : 100;  // steps of 10 ms
    const CommKey pp_a{"job", 90}, pp_b{"job", 91};
    // A: world ranks 0 (node0) and 1 (node1); B: world ranks 2 (node2) and 3 (node3).
    for (int r = 0; r < 2; ++r) {
      a.SetMember(pp_a, 2, r, FakeJob::Process(r), "node" + std::to_string(r));
      a.SetMember(pp_b, 2, r, FakeJob::Process(2 + r), "node" + std::to_string(2 + r));
    }
    auto own = [&](int world, int step) {
      const int64_t design = world % 2 == 1 ? 1'500'000 : 1'000'000;
      const int64_t fault = world == slow ? 1'000'000 : 0;
      return design + fault + Jitter(world, step, "pp", 50'000);
    };
    const std::vector<int> ends = {0, 1};
    auto exchange = [&](const CommKey& c, int first_world, int step) {
      a.Observe(OwnTimeGroup{c,
                             kP2pClass,
                             0,
                             2,
                             {own(first_world, step), own(first_world + 1, step)},
                             step * 10'000'000LL,
                             ends,
                             interval_ns});
    };
    for (int step = 0; step < alone; ++step) exchange(pp_a, 0, step);  // A alone for 1 or 9 s
    for (int w = 0; w < 4; ++w) EXPECT_FALSE(a.IsSlow(FakeJob::Process(w))) << slow << w;
    // The comparison still tells the origin-not-found hold that rank 1 may be on its way.
    EXPECT_TRUE(a.ExchangePeerBuilding(pp_a, 0)) << slow;
    EXPECT_FALSE(a.ExchangePeerBuilding(pp_a, 1)) << slow;
    for (int step = alone; step < alone + 300; ++step) {
      exchange(pp_a, 0, step);
      exchange(pp_b, 2, step);
    }
    for (int w = 0; w < 4; ++w) EXPECT_EQ(a.IsSlow(FakeJob::Process(w)), w == slow) << slow << w;
  }
}

}  // namespace
}  // namespace ncclwatch::aggregator
