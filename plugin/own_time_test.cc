#include "plugin/own_time.h"

#include "gtest/gtest.h"

namespace ncclwatch::plugin {
namespace {

TEST(OwnTimeTrackerTest, TheFirstOperationHasNoOwnTime) {
  OwnTimeTracker t;
  EXPECT_EQ(t.Observe(1000, 2000), -1);
}

TEST(OwnTimeTrackerTest, MeasuresFromTheLatestEarlierEndWhateverTheOrderSeen) {
  constexpr int64_t kMs = 1'000'000;
  OwnTimeTracker t;
  EXPECT_EQ(t.Observe(10 * kMs, 20 * kMs), -1);
  // A communicator drained later: its operation ran before the one above ended.
  EXPECT_EQ(t.Observe(5 * kMs, 9 * kMs), -1);
  EXPECT_EQ(t.Observe(25 * kMs, 30 * kMs), 5 * kMs);  // after the end at 20, not the one at 9
  // An operation that overlaps a long one on another stream counts from the last end before it.
  EXPECT_EQ(t.Observe(28 * kMs, 90 * kMs), 8 * kMs);
  EXPECT_EQ(t.Observe(31 * kMs, 32 * kMs), 1 * kMs);  // the end at 30; 90 is still in the future
  EXPECT_EQ(t.Observe(95 * kMs, 96 * kMs), 5 * kMs);
}

// An operation whose timestamps were bogus: its end is unknown, so the own time of the one after
// it is too (-1), not its start minus an older end; the one after that is measured again.
TEST(OwnTimeTrackerTest, AfterAnOperationOfUnknownEndTheOwnTimeIsUnknown) {
  constexpr int64_t kMs = 1'000'000;
  OwnTimeTracker t;
  EXPECT_EQ(t.Observe(10 * kMs, 20 * kMs), -1);
  t.ObserveUnknownEnd(22 * kMs);
  EXPECT_EQ(t.Observe(30 * kMs, 31 * kMs), -1);
  EXPECT_EQ(t.Observe(33 * kMs, 34 * kMs), 2 * kMs);
}

TEST(OwnTimeTrackerTest, TheNextKernelMayStartAFewMicrosecondsBeforeThePreviousOneStopped) {
  // The previous kernel's last channel stops 3 us after the next kernel's first channel started:
  // no own time in between, not the gap to the kernel before.
  OwnTimeTracker t;
  t.Observe(0, 1'000'000);
  t.Observe(3'000'000, 5'000'003);
  EXPECT_EQ(t.Observe(5'000'000, 6'000'000), 0);
  // An operation of another stream that ends long after this one started does not count.
  t.Observe(6'500'000, 9'000'000);
  EXPECT_EQ(t.Observe(7'000'000, 7'100'000), 1'000'000);
}

TEST(OwnTimeTrackerTest, TheTasksOfOneLaunchShareTheOwnTimeBeforeIt) {
  // A grouped Send and Recv in one kernel: their channels start 3 us apart and the Send moves its
  // data in 40 us. The Recv's own time is still the 2 ms since the previous kernel, not 0.
  OwnTimeTracker t;
  t.Observe(0, 1'000'000);
  EXPECT_EQ(t.Observe(3'000'000, 3'040'000, /*p2p=*/true), 2'000'000);
  EXPECT_EQ(t.Observe(3'003'000, 3'500'000, /*p2p=*/true), 2'003'000);
  // The next launch counts from the latest end of that one.
  EXPECT_EQ(t.Observe(4'500'000, 4'600'000, /*p2p=*/true), 1'000'000);
  // Collectives as before: a short one right before another is its predecessor.
  EXPECT_EQ(t.Observe(5'000'000, 5'008'000), 400'000);
  EXPECT_EQ(t.Observe(5'013'000, 5'100'000), 5'000);
}

TEST(OwnTimeTrackerTest, ForgetsEndsBeyondItsHistory) {
  constexpr uint64_t kMs = 1'000'000;
  OwnTimeTracker t;
  t.Observe(0, 1 * kMs);  // the only end before 2 ms, pushed out by later operations below
  for (uint64_t i = 0; i < OwnTimeTracker::kHistory; ++i) {
    t.Observe((10 + i) * kMs, (10 + i) * kMs + kMs / 2);
  }
  EXPECT_EQ(t.Observe(2 * kMs, 3 * kMs), -1);
  const uint64_t last_end = (10 + OwnTimeTracker::kHistory - 1) * kMs + kMs / 2;
  EXPECT_EQ(t.Observe(1000 * kMs, 1001 * kMs), static_cast<int64_t>(1000 * kMs - last_end));
}

}  // namespace
}  // namespace ncclwatch::plugin
