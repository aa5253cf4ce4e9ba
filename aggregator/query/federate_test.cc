#include "aggregator/query/federate.h"

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;
using ::ncclwatch::testutil::StatusIs;
using ::testing::HasSubstr;

std::vector<SeriesPoint> Samples() {
  return {
      {"ncclwatch_straggler", {{"job_id", "j1"}, {"rank", "5"}}, 1, 1000},
      {"ncclwatch_straggler", {{"job_id", "j1"}, {"rank", "4"}}, 0, 1000},
      {"nccl_bus_bandwidth_gbs", {{"job_id", "j2"}, {"collective", "AllReduce"}}, 12.5, 2000},
  };
}

std::string Render(std::vector<std::string> texts) {
  std::vector<Selector> sels;
  for (const auto& t : texts) {
    auto s = ParseSelector(t);
    EXPECT_TRUE(s.ok()) << t << ": " << s.status();
    if (s.ok()) sels.push_back(*s);
  }
  return RenderFederate(Samples(), sels);
}

TEST(FederateTest, MetricNameAndEqualityMatchers) {
  EXPECT_EQ(Render({"ncclwatch_straggler{rank=\"5\"}"}),
            "# HELP ncclwatch_straggler 1 while the rank is flagged as consistently late (absent "
            "otherwise).\n"
            "# TYPE ncclwatch_straggler gauge\n"
            "ncclwatch_straggler{job_id=\"j1\",rank=\"5\"} 1\n")
      << "typed, and live (no timestamp: Prometheus marks it stale once it is gone)";
}

TEST(FederateTest, RegexNegationAndUnionOfSelectors) {
  std::string both = Render({"{__name__=~\"ncclwatch_.*\", rank!=\"5\"}", "{job_id='j2'}"});
  EXPECT_NE(both.find("# TYPE nccl_bus_bandwidth_gbs gauge\n"
                      "nccl_bus_bandwidth_gbs{job_id=\"j2\",collective=\"AllReduce\"} 12.5 2000\n"),
            std::string::npos)
      << both;
  EXPECT_NE(both.find("# TYPE ncclwatch_straggler gauge\n"
                      "ncclwatch_straggler{job_id=\"j1\",rank=\"4\"} 0\n"),
            std::string::npos)
      << both;
  EXPECT_EQ(both.find("rank=\"5\""), std::string::npos);
  // Regexes are anchored: "j" alone matches nothing.
  EXPECT_EQ(Render({"{job_id=~\"j\"}"}), "");
  std::string j2 = Render({"{job_id!~\"j1\", collective=~\"All.*\"}"});
  EXPECT_NE(j2.find("nccl_bus_bandwidth_gbs{job_id=\"j2\""), std::string::npos);
  EXPECT_EQ(j2.find("j1"), std::string::npos);
  // An absent label counts as "".
  EXPECT_EQ(
      Render({"ncclwatch_straggler{collective=\"\"}"}).find("rank=\"4\"") != std::string::npos,
      true);
}

TEST(FederateTest, BadSelectorsAreRejectedWithAReason) {
  for (const char* bad :
       {"", "{}", "{job_id=\"\"}", "up{", "up{job=}", "up{job~\"x\"}", "up{job=\"x\"",
        "up{job=\"x\"} trailing", "{x=~\"(\"}", "1abc", "up{job=\"unterminated}"}) {
    EXPECT_THAT(ParseSelector(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("selector")))
        << "'" << bad << "'";
  }
}

TEST(FederateTest, EscapesInLabelValues) {
  auto s = ParseSelector("m{a=\"x\\\"y\", b=~\"\\\\d+\"}");
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->matchers[1].value, "x\"y");
  EXPECT_TRUE(s->matchers[2].Matches("123"));
  EXPECT_FALSE(s->matchers[2].Matches("12a"));
}

TEST(SelectorTest, MayMatchNameRejectsOnlyOnTheName) {
  // /federate answers from the detectors alone when no selector may match a per-rank family.
  auto exact = ParseSelector("ncclwatch_straggler");
  ASSERT_THAT(exact, IsOk());
  EXPECT_TRUE(exact->MayMatchName("ncclwatch_straggler"));
  EXPECT_FALSE(exact->MayMatchName("nccl_bus_bandwidth_gbs"));
  auto by_label = ParseSelector("{job_id=\"j1\"}");
  ASSERT_THAT(by_label, IsOk());
  EXPECT_TRUE(by_label->MayMatchName("nccl_bus_bandwidth_gbs"));
  auto regex = ParseSelector("{__name__=~\"ncclwatch_.+\"}");
  ASSERT_THAT(regex, IsOk());
  EXPECT_TRUE(regex->MayMatchName("ncclwatch_plugin_drops_total"));
  EXPECT_FALSE(regex->MayMatchName("nccl_bus_bandwidth_gbs"));
  auto negative = ParseSelector("{__name__!=\"nccl_bus_bandwidth_gbs\",job_id=\"j1\"}");
  ASSERT_THAT(negative, IsOk());
  EXPECT_FALSE(negative->MayMatchName("nccl_bus_bandwidth_gbs"));
  EXPECT_TRUE(negative->MayMatchName("nccl_p2p_bus_bandwidth_gbs"));
}

}  // namespace
}  // namespace ncclwatch::aggregator
