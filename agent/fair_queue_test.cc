#include "agent/fair_queue.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::agent {
namespace {

TEST(FairQueueTest, ServesSourcesInTurnKeepingEachSourcesOrder) {
  FairQueue q(100, 1 << 20);
  for (const char* r : {"a1", "a2", "a3"}) q.Push(r, 1);
  for (const char* r : {"b1", "b2"}) q.Push(r, 2);
  q.Push("c1", 3);
  std::vector<std::string> out;
  while (!q.empty()) {
    EXPECT_EQ(q.NextSize(), 2u);
    out.push_back(q.Pop());
  }
  EXPECT_EQ(out, (std::vector<std::string>{"a1", "b1", "c1", "a2", "b2", "a3"}));
  EXPECT_EQ(q.bytes(), 0);
}

TEST(FairQueueTest, WhenFullTheSourceHoldingTheMostBytesLosesItsOldest) {
  FairQueue q(100, 1000);
  q.Push(std::string(100, 'q'), 1);  // a quiet source
  uint64_t dropped = 0;
  for (int i = 0; i < 50; ++i) dropped += q.Push(std::string(300, 'a' + i % 26), 2);  // a flood
  EXPECT_EQ(dropped, 47u);
  EXPECT_LE(q.bytes(), 1000);
  EXPECT_EQ(q.size(), 4);
  EXPECT_EQ(q.Pop(), std::string(100, 'q')) << "the quiet source's report survived";
  EXPECT_EQ(q.Pop(), std::string(300, 'a' + 47 % 26)) << "the flood kept its newest three";
  // A bound on the number of reports works the same way.
  FairQueue few(3, 1 << 20);
  few.Push("quiet", 7);
  for (int i = 0; i < 10; ++i) few.Push("loud" + std::to_string(i), 8);
  EXPECT_EQ(few.size(), 3);
  EXPECT_EQ(few.Pop(), "quiet");
  EXPECT_EQ(few.Pop(), "loud8");
}

}  // namespace
}  // namespace ncclwatch::agent
