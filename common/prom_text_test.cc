#include "common/prom_text.h"

#include <cmath>
#include <limits>

#include "common/metrics.h"
#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

TEST(PromTextTest, EscapesAndFormats) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(FormatPromValue(1.0), "1");
  EXPECT_EQ(FormatPromValue(0.1), "0.1");
  EXPECT_EQ(FormatPromValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatPromValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatPromValue(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(PromTextTest, WriterProducesExpositionLines) {
  PromTextWriter w;
  w.Family("x_total", "Things.", "counter");
  w.Sample("x_total", {{"a", "1"}, {"b", "q\""}}, 3, 1700000000123);
  w.Sample("x_total", {}, 0.5);
  EXPECT_EQ(w.text(),
            "# HELP x_total Things.\n# TYPE x_total counter\n"
            "x_total{a=\"1\",b=\"q\\\"\"} 3 1700000000123\nx_total 0.5\n");
}

TEST(MetricRegistryTest, GroupsLabelledSeriesUnderOneFamily) {
  MetricRegistry registry;
  registry.GetCounter("req_total", "Requests.", {{"reason", "a"}})->Increment(2);
  registry.GetGauge("depth", "Depth.")->Set(7);
  registry.GetCounter("req_total", "Requests.", {{"reason", "b"}})->Increment();
  // Same (name, labels) returns the same counter.
  registry.GetCounter("req_total", "Requests.", {{"reason", "a"}})->Increment();
  registry.AddCollector([](PromTextWriter& w) { w.Sample("extra", {}, 1); });
  EXPECT_EQ(registry.Render(),
            "# HELP req_total Requests.\n# TYPE req_total counter\n"
            "req_total{reason=\"a\"} 3\nreq_total{reason=\"b\"} 1\n"
            "# HELP depth Depth.\n# TYPE depth gauge\ndepth 7\nextra 1\n");
}

}  // namespace
}  // namespace ncclwatch
