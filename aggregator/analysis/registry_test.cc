#include "aggregator/analysis/registry.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

const CommKey kRegistryComm{"job-r", 0x5eed};

ncclwatch::v1::RankIdentity Identity(int rank, int nranks, const std::string& node) {
  ncclwatch::v1::RankIdentity id;
  id.set_job_id(kRegistryComm.job_id);
  id.set_comm_hash(kRegistryComm.comm_hash);
  id.set_host(node);
  id.set_node(node);
  id.set_pid(1000 + static_cast<uint32_t>(rank));
  id.set_cuda_device(rank % 4);
  id.set_rank(rank);
  id.set_nranks(nranks);
  id.set_n_nodes(2);
  return id;
}

const CommEntry* Report(CommRegistry& registry, int rank, int nranks, const std::string& node) {
  bool restarted = false, new_process = false;
  RankWho* who = nullptr;
  return registry.Record(kRegistryComm, Identity(rank, nranks, node), 1'000'000'000, "agent:a",
                         &restarted, &new_process, &who);
}

// The node index follows the ranks: a rank that joins or moves to another node, or the
// communicator re-created with another size, is seen at the next question.
TEST(CommRegistryTest, TheRanksOnANodeFollowJoinsMovesAndRestarts) {
  CommRegistry registry{RegistryOptions{}};
  for (int r = 0; r < 3; ++r) Report(registry, r, 4, r < 2 ? "node-0" : "node-1");
  const CommEntry* entry = registry.Find(kRegistryComm);
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->RanksOnNode("node-0"), (std::vector<int>{0, 1}));
  EXPECT_EQ(entry->RanksOnNode("node-1"), (std::vector<int>{2}));
  EXPECT_TRUE(entry->RanksOnNode("node-9").empty());

  Report(registry, 3, 4, "node-1");  // joins
  EXPECT_EQ(entry->RanksOnNode("node-1"), (std::vector<int>{2, 3}));
  Report(registry, 3, 4, "node-1");  // the same again: nothing moves
  EXPECT_EQ(entry->RanksOnNode("node-1"), (std::vector<int>{2, 3}));
  Report(registry, 1, 4, "node-1");  // moves
  EXPECT_EQ(entry->RanksOnNode("node-0"), (std::vector<int>{0}));
  EXPECT_EQ(entry->RanksOnNode("node-1"), (std::vector<int>{1, 2, 3}));

  Report(registry, 0, 2, "node-1");  // re-created with two ranks: only rank 0 has reported
  EXPECT_TRUE(entry->RanksOnNode("node-0").empty());
  EXPECT_EQ(entry->RanksOnNode("node-1"), (std::vector<int>{0}));
}

}  // namespace
}  // namespace ncclwatch::aggregator
