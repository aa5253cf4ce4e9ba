#include "common/metrics.h"

#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

TEST(MetricRegistryTest, HistogramRendersCumulativeBucketsSumAndCount) {
  MetricRegistry metrics;
  Histogram* h =
      metrics.GetHistogram("push_seconds", "Push time.", {0.01, 0.1, 1}, {{"to", "agg"}});
  EXPECT_EQ(metrics.GetHistogram("push_seconds", "Push time.", {5}, {{"to", "agg"}}), h);
  for (double v : {0.005, 0.01, 0.05, 0.5, 3.0}) h->Observe(v);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("# TYPE push_seconds histogram"), std::string::npos) << text;
  EXPECT_NE(text.find("push_seconds_bucket{to=\"agg\",le=\"0.01\"} 2\n"), std::string::npos)
      << text;  // a value equal to a bound belongs to that bucket
  EXPECT_NE(text.find("push_seconds_bucket{to=\"agg\",le=\"0.1\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("push_seconds_bucket{to=\"agg\",le=\"1\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("push_seconds_bucket{to=\"agg\",le=\"+Inf\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("push_seconds_count{to=\"agg\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("push_seconds_sum{to=\"agg\"} 3.565\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace ncclwatch
