#include "aggregator/analysis/series_table.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

ncclwatch::v1::RankReport ReportWithDrops(uint64_t events_dropped) {
  ncclwatch::v1::RankReport r;
  r.mutable_drops()->set_events_dropped(events_dropped);
  r.set_interval_end_unix_ns(5'000'000'000);
  return r;
}

TEST(SeriesTableTest, KeepsTheLatestValueAndExportsNameAndLabelsExactly) {
  SeriesTable table(100, 60'000'000'000);
  // Label values with the characters an encoding could trip on.
  const LabelPairs labels = {{"job_id",
                              "a:b=c\x1f"
                              "d"},
                             {"comm_name", ""},
                             {"rank", "12"}};
  std::vector<SeriesPoint> points;
  table.AddReport(labels, ReportWithDrops(3), 1'000'000'000, &points);
  ASSERT_EQ(points.size(), 5u);  // one per drop kind
  table.AddReport(labels, ReportWithDrops(7), 2'000'000'000, nullptr);
  EXPECT_EQ(table.size(), 5u);
  std::vector<SeriesPoint> out;
  table.AppendTo(&out);
  ASSERT_EQ(out.size(), 5u);
  int events = 0;
  for (const SeriesPoint& p : out) {
    EXPECT_EQ(p.name, "ncclwatch_plugin_drops_total");
    ASSERT_EQ(p.labels.size(), 4u);
    EXPECT_EQ(p.labels[0], labels[0]);
    EXPECT_EQ(p.labels[1], labels[1]);
    EXPECT_EQ(p.labels[2], labels[2]);
    EXPECT_EQ(p.labels[3].first, "kind");
    EXPECT_EQ(p.time_ms, 5'000);
    if (p.labels[3].second == "events") {
      ++events;
      EXPECT_EQ(p.value, 7);
    }
  }
  EXPECT_EQ(events, 1);
  // Beyond the cap: neither kept nor exported, counted.
  SeriesTable small(2, 60'000'000'000);
  small.AddReport(labels, ReportWithDrops(1), 1'000'000'000, nullptr);
  EXPECT_EQ(small.size(), 2u);
  EXPECT_EQ(small.capped(), 3u);
  // Forgotten after the TTL without updates.
  table.Expire(62'000'000'001);
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace ncclwatch::aggregator
