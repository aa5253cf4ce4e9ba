#include "aggregator/rootcause/min_elsewhere.h"

#include <deque>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

// The answer by definition: the smallest value among members on another node.
struct Plain {
  struct Member {
    uint64_t node;
    std::optional<double> value;
  };
  std::vector<Member> members;  // in the same order as MinElsewhere's (Remove moves the last)
  std::optional<double> SmallestElsewhere(uint64_t node) const {
    std::optional<double> best;
    for (const Member& m : members) {
      if (m.value && m.node != node && (!best || *m.value < *best)) best = m.value;
    }
    return best;
  }
};

std::optional<double> Ask(const MinElsewhere& m, uint64_t node) {
  double v = 0;
  if (!m.SmallestElsewhere(node, &v)) return std::nullopt;
  return v;
}

TEST(MinElsewhereTest, AnswersWithTheSmallestOnAnotherNode) {
  MinElsewhere m;
  std::deque<int> index(4);
  m.Add(1, &index[0]);
  m.Add(1, &index[1]);
  m.Add(2, &index[2]);
  m.Add(3, &index[3]);
  EXPECT_EQ(Ask(m, 1), std::nullopt);  // nobody has a value yet
  m.Set(index[0], true, 5);
  EXPECT_EQ(Ask(m, 1), std::nullopt);  // the only value is on node 1
  EXPECT_EQ(Ask(m, 2), 5);
  m.Set(index[2], true, 7);
  m.Set(index[3], true, 9);
  EXPECT_EQ(Ask(m, 1), 7);
  EXPECT_EQ(Ask(m, 2), 5);
  m.Set(index[0], true, 8);  // the smallest grows: node 2's 7 is the smallest now
  EXPECT_EQ(Ask(m, 1), 7);
  EXPECT_EQ(Ask(m, 2), 8);
  EXPECT_EQ(Ask(m, 3), 7);
  m.Set(index[1], true, 1);  // node 1 again, smaller than all
  EXPECT_EQ(Ask(m, 1), 7);
  EXPECT_EQ(Ask(m, 3), 1);
  m.Remove(index[1]);  // the last member moves into its place, and is told where
  EXPECT_EQ(index[3], 1);
  EXPECT_EQ(Ask(m, 3), 7);
  m.Set(index[3], false, 0);
  EXPECT_EQ(Ask(m, 2), 8);
}

// Random moves, values that tie, members that come, lose their value and leave: after every
// change the answer for every node is the one a full pass gives.
TEST(MinElsewhereTest, RandomChangesAlwaysAnswerLikeAFullPass) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    MinElsewhere m;
    Plain plain;
    std::deque<int> index;       // stable addresses
    std::vector<int*> owner_of;  // owner_of[i]: the int that holds member i's index
    const int nodes = 1 + static_cast<int>(rng() % 4);
    for (int step = 0; step < 3000; ++step) {
      const uint32_t what = rng() % 100;
      if (plain.members.empty() || what < 5) {
        const uint64_t node = rng() % nodes;
        index.push_back(-1);
        m.Add(node, &index.back());
        plain.members.push_back({node, std::nullopt});
        owner_of.push_back(&index.back());
        ASSERT_EQ(index.back(), static_cast<int>(plain.members.size()) - 1);
      } else if (what < 8) {
        const int i = static_cast<int>(rng() % plain.members.size());
        ASSERT_EQ(*owner_of[i], i);
        m.Remove(i);
        plain.members[i] = plain.members.back();
        plain.members.pop_back();
        owner_of[i] = owner_of.back();
        owner_of.pop_back();
        if (i < static_cast<int>(owner_of.size())) {
          ASSERT_EQ(*owner_of[i], i);
        }
      } else {
        const int i = static_cast<int>(rng() % plain.members.size());
        const bool has = rng() % 20 != 0;
        const double value = static_cast<double>(rng() % 50);  // ties are common
        m.Set(i, has, value);
        plain.members[i].value = has ? std::optional<double>(value) : std::nullopt;
      }
      for (int node = 0; node < nodes; ++node) {
        ASSERT_EQ(Ask(m, node), plain.SmallestElsewhere(node))
            << "seed " << seed << " step " << step << " node " << node;
      }
    }
  }
}

}  // namespace
}  // namespace ncclwatch::aggregator
