// Unit tests of the Megatron layout (megatron_layout.h): rank order, communicator membership and
// names, the 1F1B program of every kind of stage, and the other shapes (MoE all-to-all, FSDP,
// interleaved 1F1B, context-parallel ring attention).
#include "tests/simjob/megatron_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace ncclwatch::simjob {
namespace {

// A compact signature of an op, with pipeline peers relative to the rank's stage: "tp", "dpRS",
// "S+1", "S+1R+1"; a p2p group on another communicator is its name and task count: "dpx6".
std::string Sig(const JobOp& op, int stage) {
  if (op.comm.family != CommFamily::kPp) {
    std::string s = FamilyName(op.comm.family);
    if (IsP2p(op.tasks[0].kind)) return s + "x" + std::to_string(op.tasks.size());
    if (op.tasks[0].kind == JobOpKind::kReduceScatter) s += "RS";
    if (op.tasks[0].kind == JobOpKind::kAllGather) s += "AG";
    return s;
  }
  std::string s;
  for (const JobTask& task : op.tasks) {
    const int d = task.peer - stage;
    s += (task.kind == JobOpKind::kSend ? "S" : "R") + std::string(d > 0 ? "+" : "") +
         std::to_string(d);
  }
  return s;
}

std::string Program(const MegatronLayout& layout, const ProgramSpec& spec, int rank) {
  std::vector<JobOp> ops;
  int64_t carry = 0;
  BuildIteration(layout, spec, rank, 0, &ops, &carry);
  std::string s;
  for (const JobOp& op : ops) s += (s.empty() ? "" : " ") + Sig(op, layout.Stage(rank));
  return s;
}

TEST(MegatronLayoutTest, RankOrderAndCommunicators) {
  const MegatronLayout l(2, 2, 2, 2);  // 4 nodes x 2 GPUs
  ASSERT_EQ(l.world_size(), 8);
  EXPECT_EQ(l.nodes(), 4);
  // rank 5 = tp_i 1 + 2 * (dp_i 0 + 2 * stage 1)
  EXPECT_EQ(l.TpIndex(5), 1);
  EXPECT_EQ(l.DpIndex(5), 0);
  EXPECT_EQ(l.Stage(5), 1);
  EXPECT_EQ(l.RankAt(1, 0, 1), 5);
  EXPECT_EQ(l.Members(CommFamily::kTp, 2), (std::vector<int>{4, 5}));
  EXPECT_EQ(l.Members(CommFamily::kDp, 3), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.Members(CommFamily::kPp, 1), (std::vector<int>{1, 5}));
  EXPECT_EQ(l.Members(CommFamily::kMp, 0), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(l.Members(CommFamily::kEmb, 1), (std::vector<int>{1, 5}));
  EXPECT_EQ(l.Members(CommFamily::kWorld, 0).size(), 8u);
  EXPECT_EQ(l.CommRank(CommFamily::kMp, 4), 2);
  EXPECT_EQ(l.CommRank(CommFamily::kPp, 5), 1);  // pp comm rank = stage
  // TP stays inside a node; DP and PP cross nodes.
  for (int g = 0; g < 4; ++g) EXPECT_EQ(l.NodesSpanned({CommFamily::kTp, g}), 1);
  EXPECT_EQ(l.NodesSpanned({CommFamily::kDp, 3}), 2);
  EXPECT_EQ(l.NodesSpanned({CommFamily::kPp, 1}), 2);
  std::vector<std::string> names;
  for (const CommRef& c : l.CommsOf(5)) names.push_back(l.CommName(c));
  EXPECT_EQ(names, (std::vector<std::string>{"world", "tp2", "dp3", "pp1", "mp0", "emb1"}));
  EXPECT_EQ(l.AllComms().size(), 1u + 4 + 4 + 4 + 2 + 4);
  for (const CommRef& c : l.AllComms()) {
    CommRef found;
    ASSERT_TRUE(l.FindComm(l.CommName(c), &found)) << l.CommName(c);
    EXPECT_EQ(found, c);
  }
  CommRef c;
  EXPECT_FALSE(l.FindComm("tp4", &c));
  EXPECT_FALSE(l.FindComm("tp", &c));
  EXPECT_FALSE(l.FindComm("bogus", &c));
}

TEST(MegatronLayoutTest, EmbeddingGroupHasFirstAndLastStageOnly) {
  const MegatronLayout l(1, 4, 2, 4);  // 2 nodes x 4 GPUs, tp 1, pp 4, dp 2
  EXPECT_FALSE(l.Exists(CommFamily::kTp));
  EXPECT_EQ(l.Members(CommFamily::kEmb, 1), (std::vector<int>{1, 7}));
  EXPECT_EQ(l.InstanceOf(CommFamily::kEmb, 3), -1);  // stage 1
  EXPECT_EQ(l.Members(CommFamily::kPp, 0), (std::vector<int>{0, 2, 4, 6}));
  for (const CommRef& c : l.CommsOf(3)) EXPECT_NE(c.family, CommFamily::kTp);
}

TEST(MegatronLayoutTest, OneFOneBOrderPerStage) {
  ProgramSpec spec;
  spec.layers = 1;
  spec.world_every = 0;
  const MegatronLayout two(2, 2, 2, 2);
  // Stage 0: one warm-up forward, three steady 1F1B, one cool-down backward.
  EXPECT_EQ(Program(two, spec, 0),
            "tp S+1 tp S+1R+1 tp tp S+1R+1 tp tp S+1R+1 tp R+1 tp dpRS emb mp dpAG");
  // The last stage: no warm-up; batched Send/Recv back to stage 0.
  EXPECT_EQ(Program(two, spec, 4),
            "R-1 tp tp S-1R-1 tp tp S-1R-1 tp tp S-1R-1 tp tp S-1 dpRS emb mp dpAG");
  // A middle stage of four, M = 4: two warm-up forwards, two steady, two cool-down.
  const MegatronLayout four(1, 4, 1, 1);
  EXPECT_EQ(Program(four, spec, 1),
            "R-1 S+1 R-1 S+1 R-1 S+1R+1 S-1R-1 S+1R+1 S-1 R+1 S-1 R+1 S-1 mp");
  // Fewer microbatches than the warm-up wants: all forwards, then all backwards.
  spec.microbatches = 2;
  EXPECT_EQ(Program(four, spec, 0), "S+1 S+1 R+1 R+1 emb mp");
  // Compute precedes ops: L forward + L backward layers per microbatch, then the optimizer.
  spec.microbatches = 4;
  spec.layers = 2;
  std::vector<JobOp> ops;
  int64_t carry = 0;
  BuildIteration(two, spec, 0, 0, &ops, &carry);
  int64_t total = 0;
  for (const JobOp& op : ops) total += op.compute_ns;
  EXPECT_EQ(total, 4 * 2 * 3 * spec.layer_fwd_ns + spec.optimizer_ns);
  EXPECT_EQ(carry, 0);
}

// MoE with the AllGather/ReduceScatter dispatcher: every layer pass adds the DP dispatch, the
// expert compute and the combine; in each pass exactly one rank of each DP group is the hot
// expert (all members agree), and which one moves from pass to pass.
TEST(MegatronLayoutTest, MixtureOfExpertsDispatchesOverTheDpGroupWithAMovingHotRank) {
  ProgramSpec spec;
  spec.layers = 1;
  spec.world_every = 0;
  spec.moe_expert_ns = 1'000'000;
  spec.moe_hot_factor = 2.0;
  const MegatronLayout layout(2, 2, 4, 2);  // TP 2, PP 2, DP 4: rank = tp + 2 * (dp + 4 * pp)
  EXPECT_EQ(Program(layout, spec, 0).substr(0, 24), "tp dpAG dpRS S+1 tp dpAG");
  // The compute before each combine (dpRS): 1 ms, or 2 ms on the pass's hot rank.
  auto expert_ns = [&](int rank) {
    std::vector<JobOp> ops;
    int64_t carry = 0;
    BuildIteration(layout, spec, rank, 3, &ops, &carry);
    std::vector<int64_t> out;
    for (const JobOp& op : ops) {
      if (op.comm.family == CommFamily::kDp && op.tasks[0].bytes == spec.moe_bytes &&
          op.tasks[0].kind == JobOpKind::kReduceScatter) {
        out.push_back(op.compute_ns);
      }
    }
    return out;
  };
  const std::vector<int> group = {0, 2, 4, 6};  // DP group of stage 0, TP position 0
  std::vector<std::vector<int64_t>> by_rank;
  for (int r : group) by_rank.push_back(expert_ns(r));
  ASSERT_EQ(by_rank[0].size(), 8u);  // 4 microbatches x (forward + backward) x 1 layer
  std::set<int> hot_ranks;
  for (size_t pass = 0; pass < by_rank[0].size(); ++pass) {
    std::vector<int64_t> ns;
    for (const auto& r : by_rank) ns.push_back(r[pass]);
    const auto hot = std::max_element(ns.begin(), ns.end());
    const int64_t normal = *std::min_element(ns.begin(), ns.end());
    EXPECT_EQ(*hot, 2 * normal) << "pass " << pass;
    EXPECT_EQ(std::count(ns.begin(), ns.end(), normal), 3) << "pass " << pass;
    hot_ranks.insert(group[hot - ns.begin()]);
  }
  EXPECT_GE(hot_ranks.size(), 2u);  // the hot expert moves with the routing
}

// Iterations [0, iterations) of every rank.
std::vector<std::vector<JobOp>> BuildAll(const MegatronLayout& layout, const ProgramSpec& spec,
                                         int64_t iterations) {
  std::vector<std::vector<JobOp>> ops(layout.world_size());
  for (int r = 0; r < layout.world_size(); ++r) {
    int64_t carry = 0;
    for (int64_t k = 0; k < iterations; ++k) BuildIteration(layout, spec, r, k, &ops[r], &carry);
  }
  return ops;
}

// The programs of all ranks fit together: the members of every communicator instance issue the
// same collectives (kind and size) in the same order, every p2p group holds tasks of one kind per
// peer and direction at most twice, and the n-th Send from i to j on a communicator has the n-th
// Recv at j from i, of the same size (NCCL's per-(comm, peer, direction) matching).
void CheckProgramsMatch(const MegatronLayout& layout, const std::vector<std::vector<JobOp>>& ops) {
  using Coll = std::vector<std::pair<JobOpKind, uint64_t>>;
  std::map<std::pair<int, int>, Coll> colls;  // (comm id, global rank) -> collectives in order
  // (comm id, sender, receiver) -> sizes in order
  std::map<std::tuple<int, int, int>, std::vector<uint64_t>> sent, received;
  for (int r = 0; r < layout.world_size(); ++r) {
    for (const JobOp& op : ops[r]) {
      ASSERT_FALSE(op.tasks.empty());
      ASSERT_EQ(op.n_tasks, static_cast<int>(op.tasks.size()));
      const int id = layout.CommId(op.comm);
      ASSERT_EQ(layout.Members(op.comm.family, op.comm.instance)[op.comm_rank], r);
      for (const JobTask& task : op.tasks) {
        if (!IsP2p(task.kind)) {
          ASSERT_EQ(op.tasks.size(), 1u);
          colls[{id, r}].emplace_back(task.kind, task.bytes);
          continue;
        }
        ASSERT_GE(task.peer, 0);
        ASSERT_NE(task.peer, op.comm_rank);
        ASSERT_LT(task.peer,
                  static_cast<int>(layout.Members(op.comm.family, op.comm.instance).size()));
        if (task.kind == JobOpKind::kSend) {
          sent[{id, op.comm_rank, task.peer}].push_back(task.bytes);
        } else {
          received[{id, task.peer, op.comm_rank}].push_back(task.bytes);
        }
      }
    }
  }
  for (const CommRef& c : layout.AllComms()) {
    const std::vector<int>& m = layout.Members(c.family, c.instance);
    const Coll& first = colls[{layout.CommId(c), m[0]}];
    for (int r : m) {
      EXPECT_EQ((colls[{layout.CommId(c), r}]), first) << layout.CommName(c) << " rank " << r;
    }
  }
  EXPECT_EQ(sent, received);
}

// Per op on `family` of `rank`'s program: its tasks.
std::vector<const JobOp*> OpsOn(const std::vector<JobOp>& ops, CommFamily family) {
  std::vector<const JobOp*> out;
  for (const JobOp& op : ops) {
    if (op.comm.family == family) out.push_back(&op);
  }
  return out;
}

// MoE with the all-to-all dispatcher: per layer pass ONE group of a Send and a Recv with every
// other member of the DP (expert-parallel) group to dispatch, the expert compute, and one such
// group to combine; sizes follow the routing, and the combine returns what the dispatch brought.
TEST(MegatronLayoutTest, MoeAllToAllDispatchesToEveryExpertPeerInOneGroup) {
  ProgramSpec spec;
  spec.layers = 1;
  spec.world_every = 0;
  spec.moe_expert_ns = 1'000'000;
  spec.moe_dispatcher = MoeDispatcher::kAllToAll;
  const MegatronLayout layout(2, 2, 4, 2);  // DP 4: each all-to-all is 3 Sends + 3 Recvs
  EXPECT_EQ(Program(layout, spec, 0).substr(0, 20), "tp dpx6 dpx6 S+1 tp ");
  const std::vector<std::vector<JobOp>> all = BuildAll(layout, spec, 3);
  CheckProgramsMatch(layout, all);
  for (int r : {0, 6, 13}) {
    const std::vector<const JobOp*> a2a = OpsOn(all[r], CommFamily::kDp);
    // 4 microbatches x (forward + backward) x 1 layer x (dispatch + combine), then the DP
    // ReduceScatter and AllGather of the dense gradients, per iteration.
    ASSERT_EQ(a2a.size(), 3u * (16 + 2));
    std::set<uint64_t> sizes;
    for (size_t i = 0; i < a2a.size(); ++i) {
      const JobOp& op = *a2a[i];
      if (i % 18 >= 16) {
        EXPECT_FALSE(IsP2p(op.tasks[0].kind));
        continue;
      }
      ASSERT_EQ(op.tasks.size(), 6u) << "rank " << r << " op " << i;
      std::map<int, int> sends, recvs;  // peer -> tasks
      for (const JobTask& t : op.tasks) {
        (t.kind == JobOpKind::kSend ? sends : recvs)[t.peer]++;
        EXPECT_GE(t.bytes, spec.moe_bytes / 4 / 2);
        EXPECT_LT(t.bytes, spec.moe_bytes / 4 * 3 / 2);
        EXPECT_EQ(t.bytes % 16, 0u);
        sizes.insert(t.bytes);
      }
      const std::map<int, int> every_other = [&] {
        std::map<int, int> m;
        for (int p = 0; p < 4; ++p) {
          if (p != op.comm_rank) m[p] = 1;
        }
        return m;
      }();
      EXPECT_EQ(sends, every_other);
      EXPECT_EQ(recvs, every_other);
      if (i % 2 == 1) {
        // The combine sends each peer what the dispatch received from it, and vice versa.
        const JobOp& dispatch = *a2a[i - 1];
        for (size_t t = 0; t < op.tasks.size(); t += 2) {
          EXPECT_EQ(op.tasks[t].bytes, dispatch.tasks[t + 1].bytes);
          EXPECT_EQ(op.tasks[t + 1].bytes, dispatch.tasks[t].bytes);
        }
      }
    }
    EXPECT_GT(sizes.size(), 100u);  // the routing varies per pass, peer and iteration
  }
  // The bytes depend on the iteration: the same pass differs the next time.
  EXPECT_NE(MoeA2aBytes(spec, 4, 0, 0, 0, 1, 2), MoeA2aBytes(spec, 4, 0, 1, 0, 1, 2));
  EXPECT_NE(MoeA2aBytes(spec, 4, 0, 0, 0, 1, 2), MoeA2aBytes(spec, 4, 0, 0, 0, 2, 1));
}

// FSDP: each layer pass AllGathers its parameters, one layer ahead (the gather of layer l+1 is
// issued before layer l computes); backward layers ReduceScatter their gradients; the
// end-of-iteration DP sync of the dense path is gone.
TEST(MegatronLayoutTest, FsdpGathersEveryLayerAheadAndReducesEveryBackwardLayer) {
  ProgramSpec spec;
  spec.layers = 1;
  spec.world_every = 0;
  spec.fsdp = true;
  const MegatronLayout two(2, 2, 2, 2);
  EXPECT_EQ(Program(two, spec, 0),
            "dpAG tp S+1 dpAG tp S+1R+1 dpAG tp dpRS dpAG tp S+1R+1 dpAG tp dpRS dpAG tp S+1R+1 "
            "dpAG tp dpRS R+1 dpAG tp dpRS emb mp");
  CheckProgramsMatch(two, BuildAll(two, spec, 2));
  // Three layers, no pipeline (--pp 1): the prefetch is visible, each gather a third of the
  // stage's parameters.
  spec.layers = 3;
  spec.microbatches = 2;
  const MegatronLayout flat(2, 1, 4, 2);
  EXPECT_EQ(Program(flat, spec, 5),
            "dpAG dpAG tp dpAG tp tp "                 // forward of microbatch 0
            "dpAG dpAG tp dpRS dpAG tp dpRS tp dpRS "  // its backward
            "dpAG dpAG tp dpAG tp tp dpAG dpAG tp dpRS dpAG tp dpRS tp dpRS mp");
  std::vector<JobOp> ops;
  int64_t carry = 0;
  BuildIteration(flat, spec, 5, 0, &ops, &carry);
  for (const JobOp& op : ops) {
    if (op.comm.family == CommFamily::kDp) {
      EXPECT_EQ(op.tasks[0].bytes, spec.dp_bytes / 3);
    }
  }
  CheckProgramsMatch(flat, BuildAll(flat, spec, 2));
  // --fsdp-layer-mb, and the stage factor scales it like the dense gradients.
  spec.fsdp_layer_bytes = 1 << 20;
  spec.stage_factors = {1.5};
  ops.clear();
  BuildIteration(flat, spec, 5, 0, &ops, &carry);
  for (const JobOp& op : ops) {
    if (op.comm.family == CommFamily::kDp) {
      EXPECT_EQ(op.tasks[0].bytes, 3u << 19);
    }
  }
}

// F (1) or B (2) for every layer pass of `rank`, read from the compute before its TP AllReduces
// (one layer per chunk, backward twice the forward).
std::string Passes(const std::vector<JobOp>& ops, const ProgramSpec& spec) {
  std::string s;
  for (const JobOp& op : ops) {
    if (op.comm.family != CommFamily::kTp) continue;
    s += op.compute_ns == spec.layer_fwd_ns       ? 'F'
         : op.compute_ns == 2 * spec.layer_fwd_ns ? 'B'
                                                  : '?';
  }
  return s;
}

// Interleaved 1F1B: V chunks per rank, Megatron's warm-up of (V - 1) P + 2 (P - 1 - stage)
// forwards, then one forward and one backward per round, then the cool-down; neighbour exchanges
// in one group per round, and the pipeline communicator wraps around (stage P-1 feeds stage 0).
TEST(MegatronLayoutTest, InterleavedOneFOneBWarmsUpLikeMegatronAndWrapsTheRing) {
  ProgramSpec spec;
  spec.layers = 2;
  spec.virtual_stages = 2;
  spec.microbatches = 8;
  spec.world_every = 0;
  const MegatronLayout layout(2, 4, 1, 2);  // TP 2, PP 4: rank = tp_i + 2 * stage
  const std::vector<std::vector<JobOp>> all = BuildAll(layout, spec, 2);
  CheckProgramsMatch(layout, all);
  const int n = 16;  // V x M chunk passes each way
  for (int stage = 0; stage < 4; ++stage) {
    std::vector<JobOp> ops;
    int64_t carry = 0;
    BuildIteration(layout, spec, 2 * stage, 0, &ops, &carry);
    const int warmup = 4 + 2 * (3 - stage);
    const std::string expected = std::string(warmup, 'F') + [&] {
      std::string s;
      for (int i = 0; i < n - warmup; ++i) s += "FB";
      return s;
    }() + std::string(warmup, 'B');
    EXPECT_EQ(Passes(ops, spec), expected) << "stage " << stage;
    // Who it talks to: both neighbours, stage 0 and 3 with each other through the wrap.
    std::map<std::pair<JobOpKind, int>, int> tasks;
    for (const JobOp* op : OpsOn(ops, CommFamily::kPp)) {
      ASSERT_LE(op->tasks.size(), 4u);
      for (const JobTask& t : op->tasks) tasks[{t.kind, t.peer}]++;
    }
    const int next = (stage + 1) % 4;
    const int prev = (stage + 3) % 4;
    // Forward: every chunk pass sends on except the last virtual stage's (stage 3, chunk 1);
    // backward: every one except the first virtual stage's (stage 0, chunk 0).
    EXPECT_EQ((tasks[{JobOpKind::kSend, next}]), stage == 3 ? 8 : 16) << stage;
    EXPECT_EQ((tasks[{JobOpKind::kRecv, prev}]), stage == 0 ? 8 : 16) << stage;
    EXPECT_EQ((tasks[{JobOpKind::kSend, prev}]), stage == 0 ? 8 : 16) << stage;
    EXPECT_EQ((tasks[{JobOpKind::kRecv, next}]), stage == 3 ? 8 : 16) << stage;
    EXPECT_EQ(tasks.size(), 4u);
  }
  // Two stages: both neighbours are the same rank; a round's group can hold all four tasks.
  spec.microbatches = 4;
  const MegatronLayout two(1, 2, 2, 2);
  const std::vector<std::vector<JobOp>> pairs = BuildAll(two, spec, 2);
  CheckProgramsMatch(two, pairs);
  size_t widest = 0;
  for (const JobOp* op : OpsOn(pairs[0], CommFamily::kPp))
    widest = std::max(widest, op->tasks.size());
  EXPECT_EQ(widest, 4u);
  // Three chunks of one layer each.
  spec.layers = 3;
  spec.virtual_stages = 3;
  CheckProgramsMatch(layout, BuildAll(layout, spec, 1));
}

// Context parallel: ring attention replaces the TP AllReduce; each layer pass runs tp - 1 ring
// steps, ONE group each with a Send to the next TP rank and a Recv from the previous one, and
// 1/tp of the layer's compute before each step.
TEST(MegatronLayoutTest, RingAttentionStepsAroundTheTpGroup) {
  ProgramSpec spec;
  spec.world_every = 0;
  spec.cp_ring = true;
  spec.cp_bytes = 1 << 20;
  const MegatronLayout layout(4, 1, 2, 4);  // TP 4, DP 2, no pipeline
  const std::vector<std::vector<JobOp>> all = BuildAll(layout, spec, 2);
  CheckProgramsMatch(layout, all);
  for (int r = 0; r < 8; ++r) {
    std::vector<JobOp> ops;
    int64_t carry = 0;
    BuildIteration(layout, spec, r, 0, &ops, &carry);
    const std::vector<const JobOp*> ring = OpsOn(ops, CommFamily::kTp);
    ASSERT_EQ(ring.size(), 4u * 2 * 2 * 3);  // M x (fwd + bwd) x L x (tp - 1)
    const int me = layout.TpIndex(r);
    for (const JobOp* op : ring) {
      ASSERT_EQ(op->tasks.size(), 2u);
      EXPECT_EQ(op->tasks[0].kind, JobOpKind::kSend);
      EXPECT_EQ(op->tasks[0].peer, (me + 1) % 4);
      EXPECT_EQ(op->tasks[1].kind, JobOpKind::kRecv);
      EXPECT_EQ(op->tasks[1].peer, (me + 3) % 4);
      EXPECT_EQ(op->tasks[0].bytes, 1u << 20);
      EXPECT_EQ(op->tasks[1].bytes, 1u << 20);
    }
    // The first step of the first layer follows a quarter of its compute; all compute is kept.
    EXPECT_EQ(ring[0]->compute_ns, spec.layer_fwd_ns / 4);
    int64_t total = carry;
    for (const JobOp& op : ops) total += op.compute_ns;
    EXPECT_EQ(total, 4 * 2 * 3 * spec.layer_fwd_ns + spec.optimizer_ns);
  }
  // TP 2: the next and the previous rank are the same; the step size defaults to the TP size.
  spec.cp_bytes = 0;
  const MegatronLayout two(2, 2, 2, 2);
  std::vector<JobOp> ops;
  int64_t carry = 0;
  BuildIteration(two, spec, 1, 0, &ops, &carry);
  for (const JobOp* op : OpsOn(ops, CommFamily::kTp)) {
    ASSERT_EQ(op->tasks.size(), 2u);
    EXPECT_EQ(op->tasks[0].peer, 0);
    EXPECT_EQ(op->tasks[1].peer, 0);
    EXPECT_EQ(op->tasks[0].bytes, spec.tp_bytes);
  }
  CheckProgramsMatch(two, BuildAll(two, spec, 2));
}

// Every shape at once still fits together.
TEST(MegatronLayoutTest, AllShapesTogetherStillMatch) {
  ProgramSpec spec;
  spec.layers = 2;
  spec.microbatches = 4;
  spec.virtual_stages = 2;
  spec.fsdp = true;
  spec.cp_ring = true;
  spec.moe_expert_ns = 500'000;
  spec.moe_dispatcher = MoeDispatcher::kAllToAll;
  spec.world_every = 1;
  const MegatronLayout layout(2, 2, 4, 4);
  CheckProgramsMatch(layout, BuildAll(layout, spec, 2));
}

}  // namespace
}  // namespace ncclwatch::simjob
