#include "plugin/own_time.h"

#include "gtest/gtest.h"

namespace ncclwatch::plugin {
namespace {

TEST(OwnTimeTrackerTest, TheFirstOperationHasNoOwnTime) {
  OwnTimeTracker t;
  EXPECT_EQ(t.Observe(1000, 2000), -1);
}

TEST(OwnTimeTrackerTest, MeasuresFromTheLatestEarlierEndWhateverTheOrderSeen) {
  OwnTimeTracker t;
  EXPECT_EQ(t.Observe(1000, 2000), -1);
  // A communicator drained later: its operation ran before the one above ended.
  EXPECT_EQ(t.Observe(500, 900), -1);
  EXPECT_EQ(t.Observe(2500, 3000), 500);  // after the end at 2000, not the one at 900
  // An operation that overlaps a long one on another stream counts from the last end before it.
  EXPECT_EQ(t.Observe(2800, 9000), 2800 - 2000);
  EXPECT_EQ(t.Observe(3100, 3200), 100);  // the end at 3000; 9000 is still in the future
  EXPECT_EQ(t.Observe(9500, 9600), 500);
}

TEST(OwnTimeTrackerTest, ForgetsEndsBeyondItsHistory) {
  OwnTimeTracker t;
  t.Observe(0, 10);  // the only end before 15, pushed out by later operations below
  for (uint64_t i = 0; i < OwnTimeTracker::kHistory; ++i) t.Observe(1000 + i * 10, 1005 + i * 10);
  EXPECT_EQ(t.Observe(15, 20), -1);
  EXPECT_EQ(t.Observe(100'000, 100'001), 100'000 - (1005 + (OwnTimeTracker::kHistory - 1) * 10));
}

}  // namespace
}  // namespace ncclwatch::plugin
