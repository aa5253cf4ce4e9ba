#include "common/periodic_task.h"

#include <atomic>

#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

TEST(PeriodicTaskTest, RunsEveryPeriodUntilStoppedAndNeverAfter) {
  std::atomic<int> runs{0};
  PeriodicTask task(absl::Milliseconds(1), [&] { ++runs; });
  task.Start();
  ASSERT_TRUE(task.WaitForIterations(5, absl::Seconds(30)));
  EXPECT_GE(runs.load(), 5);
  task.Stop();
  const int after_stop = runs.load();
  EXPECT_EQ(task.iterations(), static_cast<uint64_t>(after_stop));
  task.Stop();  // idempotent
  EXPECT_EQ(runs.load(), after_stop);
}

TEST(PeriodicTaskTest, StopDoesNotWaitForTheNextPeriod) {
  std::atomic<int> runs{0};
  PeriodicTask task(absl::Hours(1), [&] { ++runs; });
  task.Start();
  task.Stop();  // would hang for an hour if Stop waited for the period
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(task.iterations(), 0u);
}

TEST(PeriodicTaskTest, RunFirstRunsAtStartThenEveryPeriod) {
  std::atomic<int> runs{0};
  PeriodicTask task(
      absl::Hours(1), [&] { ++runs; }, /*run_first=*/true);
  task.Start();
  task.Start();  // once only
  ASSERT_TRUE(task.WaitForIterations(1, absl::Seconds(30)));
  task.Stop();  // the next run is an hour away
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(task.iterations(), 1u);
}

TEST(PeriodicTaskTest, AStoppedTaskThatNeverStartedIsFine) {
  PeriodicTask task(absl::Milliseconds(1), [] {});
  EXPECT_FALSE(task.WaitForIterations(1, absl::Milliseconds(1)));
}

}  // namespace
}  // namespace ncclwatch
