#include "aggregator/detect/median.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

TEST(MedianTest, OddEvenAndEmpty) {
  EXPECT_EQ(Median(std::vector<double>{}), 0);
  EXPECT_EQ(Median(std::vector<double>{3, 1, 2}), 2);
  EXPECT_EQ(Median(std::vector<double>{4, 1, 3, 2}), 2.5);
}

TEST(MedianTest, TheSlidingMedianIsTheWindowsMedianAtEveryStep) {
  std::mt19937 gen(7);
  // Few distinct values, so that evictions often meet equal ones.
  std::uniform_int_distribution<int> value(0, 9);
  for (size_t window : {1u, 2u, 5u, 32u}) {
    std::vector<double> ring;
    std::vector<double> sorted;
    size_t next = 0;
    for (int i = 0; i < 500; ++i) {
      const double v = value(gen) * 0.5;
      double evicted = 0;
      const bool full = ring.size() >= window;
      if (full) {
        evicted = ring[next];
        ring[next] = v;
        next = (next + 1) % window;
      } else {
        ring.push_back(v);
      }
      const double slid = SlideMedian(sorted, full ? &evicted : nullptr, v);
      ASSERT_EQ(slid, Median(ring)) << "window " << window << " step " << i;
      std::vector<double> expected = ring;
      std::sort(expected.begin(), expected.end());
      ASSERT_EQ(sorted, expected) << "window " << window << " step " << i;
    }
  }
}

}  // namespace
}  // namespace ncclwatch::aggregator
