#include "aggregator/detect/correlator.h"

#include <string>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

const CommKey kCorrelatorComm{"job", 0x42};

TEST(CorrelatorTest, CompletesWhenEveryRankReported) {
  Correlator c;
  EXPECT_FALSE(c.Add(kCorrelatorComm, 3, "AllReduce", 7, 0, 100, 1000, 0));
  EXPECT_FALSE(c.Add(kCorrelatorComm, 3, "AllReduce", 7, 2, 300, 3000, 0));
  EXPECT_FALSE(c.Add(kCorrelatorComm, 3, "AllReduce", 7, 2, 999, 9999, 0));  // replay: ignored
  EXPECT_FALSE(c.Add(kCorrelatorComm, 3, "AllGather", 7, 1, 1, 1, 0));       // other op, same seq
  auto g = c.Add(kCorrelatorComm, 3, "AllReduce", 7, 1, 200, 2000, 0);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->op, "AllReduce");
  EXPECT_EQ(g->seq, 7u);
  EXPECT_EQ(g->duration_ns, (std::vector<uint64_t>{100, 200, 300}));
  EXPECT_EQ(g->gpu_start_ns, (std::vector<uint64_t>{1000, 2000, 3000}));
  EXPECT_EQ(c.completed(), 1u);
  EXPECT_EQ(c.open_groups(), 1u);  // the AllGather
}

TEST(CorrelatorTest, ACommunicatorsCollectiveNamesAreBoundedAndTheRestRefused) {
  Correlator c;
  for (size_t i = 0; i < Correlator::kMaxOpsPerComm; ++i) {
    EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "Op" + std::to_string(i), 1, 0, 1, 1, 0));
  }
  // One name too many: not kept, counted, and its groups never form.
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "Invented", 1, 0, 1, 1, 0));
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "Invented", 1, 1, 1, 1, 0));
  EXPECT_EQ(c.refused(), 2u);
  EXPECT_EQ(c.open_groups(), Correlator::kMaxOpsPerComm);
  // Known names still join, each with its own groups; another communicator has its own names.
  auto g = c.Add(kCorrelatorComm, 2, "Op63", 1, 1, 2, 2, 0);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->op, "Op63");
  EXPECT_EQ(g->duration_ns, (std::vector<uint64_t>{1, 2}));
  const CommKey other{"job", 0x43};
  EXPECT_FALSE(c.Add(other, 2, "Invented", 1, 0, 1, 1, 0));
  EXPECT_NE(c.Add(other, 2, "Invented", 1, 1, 1, 1, 0), nullptr);
  EXPECT_EQ(c.refused(), 2u);
}

TEST(CorrelatorTest, JoinsTheTwoEndsOfAPointToPointExchange) {
  Correlator c;
  // Rank 2 sends its 5th message to rank 0; rank 0 receives its 5th from rank 2. Exchanges in the
  // other direction and with other peers are other groups.
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, /*send=*/true, 2, 0, 5, 300, 3000, 0));
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, /*send=*/true, 0, 2, 5, 1, 1, 0));   // 0 -> 2
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, /*send=*/false, 0, 3, 5, 1, 1, 0));  // 3 -> 0
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, /*send=*/true, 2, 0, 5, 9, 9, 0));   // replay
  auto g = c.AddP2p(kCorrelatorComm, 4, /*send=*/false, 0, 2, 5, 100, 1000, 0, /*own=*/70);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->op, kP2pClass);
  EXPECT_EQ(g->seq, 5u);
  EXPECT_EQ(g->members, (std::vector<int>{2, 0}));  // sender, receiver
  EXPECT_EQ(g->nranks, 4);
  EXPECT_EQ(g->RankAt(0), 2);
  EXPECT_EQ(g->RankAt(1), 0);
  EXPECT_EQ(g->duration_ns, (std::vector<uint64_t>{300, 100}));
  EXPECT_EQ(g->gpu_start_ns, (std::vector<uint64_t>{3000, 1000}));
  EXPECT_EQ(g->own_time_ns, (std::vector<int64_t>{-1, 70}));
  EXPECT_EQ(c.open_groups(), 2u);
  // A collective of the same seq is not confused with it.
  EXPECT_FALSE(c.Add(kCorrelatorComm, 4, kP2pClass, 5, 0, 1, 1, 0));
  // Peers outside the communicator, or itself, are refused.
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, true, 1, 4, 0, 1, 1, 0));
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, true, 1, -1, 0, 1, 1, 0));
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, true, 1, 1, 0, 1, 1, 0));
  EXPECT_EQ(c.open_groups(), 3u);
}

TEST(CorrelatorTest, ExchangesWaitingForTheirOtherEndNeverEvictCollectives) {
  Correlator c(CorrelatorOptions{/*grace_ns=*/1'000'000, /*max_open_groups=*/2});
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "AllReduce", 0, 0, 1, 1, 0));
  for (uint64_t seq = 0; seq < 3; ++seq) {  // one more half than the cap: the oldest goes
    EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 2, /*send=*/true, 0, 1, seq, 1, 1, 0));
  }
  EXPECT_EQ(c.expired(), 1u);
  EXPECT_NE(c.Add(kCorrelatorComm, 2, "AllReduce", 0, 1, 1, 1, 0), nullptr);
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 2, /*send=*/false, 1, 0, 0, 1, 1, 0));  // evicted
  EXPECT_NE(c.AddP2p(kCorrelatorComm, 2, /*send=*/false, 1, 0, 2, 1, 1, 0), nullptr);
}

TEST(CorrelatorTest, ACachedSlotJoinsLikeALookupAndIsDroppedWhenItsGroupsAre) {
  // The communicator's caller keeps where its open groups are: records through it join the groups
  // others opened without it, and a group it opens is found without it.
  Correlator c(CorrelatorOptions{/*grace_ns=*/1000, /*max_open_groups=*/100});
  const CommKey other{"job", 0x43};
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "AllReduce", 1, 0, 10, 100, 0));
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 2, /*send=*/true, 0, 1, 3, 30, 300, 0));
  EXPECT_FALSE(c.Add(other, 2, "AllReduce", 1, 0, 1, 1, 0));  // another communicator's
  CachedSlot slot;
  auto first = c.Add(kCorrelatorComm, 2, "AllReduce", 1, 1, 11, 110, 0, -1, -1, &slot);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->duration_ns, (std::vector<uint64_t>{10, 11}));
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "AllReduce", 2, 1, 12, 120, 0, -1, -1, &slot));
  auto exchange = c.AddP2p(kCorrelatorComm, 2, /*send=*/false, 1, 0, 3, 31, 310, 0, -1, -1, &slot);
  ASSERT_NE(exchange, nullptr);
  EXPECT_EQ(exchange->members, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.open_groups(), 2u);  // seq 2 here, and the other communicator's
  EXPECT_NE(c.Add(kCorrelatorComm, 2, "AllReduce", 2, 0, 13, 130, 0), nullptr);
  // Expiry frees the communicator's (now empty) groups: the slot is not used again, and its
  // next record opens a group where the others' records find it.
  EXPECT_EQ(c.Expire(5000), 1u);  // the other communicator's
  EXPECT_EQ(c.open_groups(), 0u);
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "AllReduce", 4, 1, 14, 140, 5000, -1, -1, &slot));
  EXPECT_NE(c.Add(kCorrelatorComm, 2, "AllReduce", 4, 0, 15, 150, 5000), nullptr);
  c.Forget(kCorrelatorComm);
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "AllReduce", 5, 1, 1, 1, 5000, -1, -1, &slot));
  EXPECT_EQ(c.open_groups(), 1u);
}

TEST(CorrelatorTest, AnEmptiedTableIsKeptWhileItsCommunicatorIsActiveAndFreedAfterGrace) {
  // A pipeline's exchanges all complete between two expiry walks: freeing their emptied table at
  // every walk had it grown again within the second, and every cached slot dropped with it.
  Correlator c(CorrelatorOptions{/*grace_ns=*/1000, /*max_open_groups=*/100});
  CachedSlot slot;
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, /*send=*/true, 0, 1, 7, 10, 100, 4500, -1, -1, &slot));
  ASSERT_NE(c.AddP2p(kCorrelatorComm, 4, /*send=*/false, 1, 0, 7, 11, 110, 4600, -1, -1, &slot),
            nullptr);
  EXPECT_EQ(c.open_groups(), 0u);
  EXPECT_EQ(c.Expire(5000), 0u);
  EXPECT_EQ(c.held_comms(), 1u);  // its last group opened 500 ns ago, within the grace
  // The slot is still good: the next exchange joins through it and through a lookup alike.
  EXPECT_FALSE(c.AddP2p(kCorrelatorComm, 4, /*send=*/true, 2, 3, 8, 12, 120, 5100, -1, -1, &slot));
  ASSERT_NE(c.AddP2p(kCorrelatorComm, 4, /*send=*/false, 3, 2, 8, 13, 130, 5200), nullptr);
  EXPECT_EQ(c.Expire(6000), 0u);
  EXPECT_EQ(c.held_comms(), 1u);
  EXPECT_EQ(c.Expire(6200), 0u);  // none opened since 5100: idle for the grace period
  EXPECT_EQ(c.held_comms(), 0u);
  EXPECT_EQ(c.expired(), 0u);
}

TEST(CorrelatorTest, RejectsOutOfRangeRanks) {
  Correlator c;
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "AllReduce", 0, 2, 1, 1, 0));
  EXPECT_FALSE(c.Add(kCorrelatorComm, 2, "AllReduce", 0, -1, 1, 1, 0));
  EXPECT_FALSE(c.Add(kCorrelatorComm, 0, "AllReduce", 0, 0, 1, 1, 0));
  EXPECT_EQ(c.open_groups(), 0u);
}

TEST(CorrelatorTest, ExpiresIncompleteGroupsAfterGrace) {
  Correlator c(CorrelatorOptions{/*grace_ns=*/1000, /*max_open_groups=*/100});
  c.Add(kCorrelatorComm, 2, "AllReduce", 0, 0, 1, 1, /*now=*/0);
  c.Add(kCorrelatorComm, 2, "AllReduce", 1, 0, 1, 1, /*now=*/900);
  EXPECT_EQ(c.Expire(1500), 1u);  // seq 0 is older than the grace, seq 1 is not
  EXPECT_EQ(c.open_groups(), 1u);
  EXPECT_NE(c.Add(kCorrelatorComm, 2, "AllReduce", 1, 1, 1, 1, 1600), nullptr);
  EXPECT_EQ(c.expired(), 1u);
}

TEST(CorrelatorTest, MemoryIsBoundedPerCommunicator) {
  Correlator c(CorrelatorOptions{/*grace_ns=*/1'000'000'000, /*max_open_groups=*/10});
  for (uint64_t seq = 0; seq < 1000; ++seq) c.Add(kCorrelatorComm, 4, "AllReduce", seq, 0, 1, 1, 0);
  EXPECT_EQ(c.open_groups(), 10u);
  EXPECT_EQ(c.expired(), 990u);
  // The newest groups are the ones kept.
  c.Add(kCorrelatorComm, 4, "AllReduce", 999, 1, 1, 1, 0);
  c.Add(kCorrelatorComm, 4, "AllReduce", 999, 2, 1, 1, 0);
  EXPECT_NE(c.Add(kCorrelatorComm, 4, "AllReduce", 999, 3, 1, 1, 0), nullptr);
}

}  // namespace
}  // namespace ncclwatch::aggregator
