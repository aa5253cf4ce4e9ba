// Unit tests of the Megatron layout (megatron_layout.h): rank order, communicator membership and
// names, and the 1F1B program of every kind of stage.
#include "tests/simjob/megatron_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace ncclwatch::simjob {
namespace {

// A compact signature of an op, with p2p peers relative to the rank's stage: "tp", "dpRS", "S+1",
// "S+1R+1".
std::string Sig(const JobOp& op, int stage) {
  if (op.comm.family != CommFamily::kPp) {
    std::string s = FamilyName(op.comm.family);
    if (op.tasks[0].kind == JobOpKind::kReduceScatter) s += "RS";
    if (op.tasks[0].kind == JobOpKind::kAllGather) s += "AG";
    return s;
  }
  std::string s;
  for (int t = 0; t < op.n_tasks; ++t) {
    const int d = op.tasks[t].peer - stage;
    s += (op.tasks[t].kind == JobOpKind::kSend ? "S" : "R") + std::string(d > 0 ? "+" : "") +
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

}  // namespace
}  // namespace ncclwatch::simjob
