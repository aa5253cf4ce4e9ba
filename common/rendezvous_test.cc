#include "common/rendezvous.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

using ::ncclwatch::testutil::IsOk;

std::vector<std::string> Members(int n) {
  std::vector<std::string> m;
  for (int i = 0; i < n; ++i) {
    m.push_back("ncclwatch-aggregator-" + std::to_string(i) + ".ncclwatch-aggregator:9470");
  }
  return m;
}

TEST(RendezvousTest, SpreadsKeysEvenly) {
  const auto members = Members(4);
  std::vector<int> owned(4);
  for (int j = 0; j < 4000; ++j) ++owned[RendezvousOwner("job-" + std::to_string(j), members)];
  for (int n : owned) {
    EXPECT_GT(n, 850) << "share skewed";  // 1000 expected
    EXPECT_LT(n, 1150) << "share skewed";
  }
}

TEST(RendezvousTest, OrderOfMembersDoesNotMatter) {
  auto members = Members(5);
  auto reversed = members;
  std::reverse(reversed.begin(), reversed.end());
  for (int j = 0; j < 500; ++j) {
    const std::string key = "train-" + std::to_string(j);
    EXPECT_EQ(members[RendezvousOwner(key, members)], reversed[RendezvousOwner(key, reversed)]);
  }
}

TEST(RendezvousTest, AddingAMemberMovesOnlyWhatItTakesOver) {
  const auto three = Members(3);
  const auto four = Members(4);
  int moved = 0;
  for (int j = 0; j < 3000; ++j) {
    const std::string key = "job-" + std::to_string(j);
    const std::string before = three[RendezvousOwner(key, three)];
    const std::string after = four[RendezvousOwner(key, four)];
    if (before != after) {
      ++moved;
      EXPECT_EQ(after, four[3]) << key << " moved between old members";
    }
  }
  EXPECT_GT(moved, 600);  // about a quarter: 750
  EXPECT_LT(moved, 900);
}

TEST(RendezvousTest, RemovingAMemberMovesOnlyItsKeys) {
  const auto four = Members(4);
  const std::vector<std::string> without_1 = {four[0], four[2], four[3]};
  for (int j = 0; j < 2000; ++j) {
    const std::string key = "job-" + std::to_string(j);
    const std::string before = four[RendezvousOwner(key, four)];
    if (before == four[1]) continue;
    EXPECT_EQ(before, without_1[RendezvousOwner(key, without_1)]) << key;
  }
}

TEST(RendezvousTest, ScoresAreStableAndSeparateNameFromKey) {
  // Fixed values: agents and aggregators of different builds must agree on every owner.
  EXPECT_EQ(RendezvousScore("a", "b"), 0xe20c15d4f85d4a7bull);
  EXPECT_EQ(RendezvousScore("agg-0:9470", "job-1"), 0x5beb782be0b2330full);
  EXPECT_NE(RendezvousScore("ab", "c"), RendezvousScore("a", "bc"));
  EXPECT_NE(RendezvousScore("a", "b"), RendezvousScore("b", "a"));
  EXPECT_EQ(RendezvousOwner("anything", {"only"}), 0u);
}

TEST(RendezvousTest, MembersAreNamedOrNamedByTheirAddress) {
  const ShardMember named = ParseShardMember("agg-1=10.0.3.7:9470");
  EXPECT_EQ(named.name, "agg-1");
  EXPECT_EQ(named.address, "10.0.3.7:9470");
  const ShardMember plain = ParseShardMember("aggregator.ncclwatch:9470");
  EXPECT_EQ(plain.name, "aggregator.ncclwatch:9470");
  EXPECT_EQ(plain.address, "aggregator.ncclwatch:9470");
}

TEST(RendezvousTest, AMemberListNamesEachMemberOnce) {
  auto ok = ParseShardMembers({"a=10.0.0.1:9470", "10.0.0.2:9470"}, "--x");
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ((*ok)[1].name, "10.0.0.2:9470");
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"a=1:1", "a=2:2"}, std::vector<std::string>{"=1:1"},
        std::vector<std::string>{"a="}}) {
    auto parsed = ParseShardMembers(bad, "--x");
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status())) << bad[0];
    EXPECT_NE(parsed.status().message().find("--x entry"), std::string::npos);
  }
}

}  // namespace
}  // namespace ncclwatch
