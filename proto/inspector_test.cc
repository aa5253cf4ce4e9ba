#include "proto/inspector.h"

#include <string>

#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

ncclwatch::v1::RankReport Report() {
  ncclwatch::v1::RankReport r;
  auto* id = r.mutable_identity();
  id->set_n_nodes(2);
  id->set_nranks(16);
  auto add = [&](bool p2p, const std::string& op, const std::string& size,
                 const std::string& algo_proto, double bw_log_sum) {
    auto* s = r.add_stats();
    s->set_p2p(p2p);
    s->set_op(op);
    s->set_message_size(size);
    s->set_algo_proto(algo_proto);
    s->set_count(4);
    s->set_exec_time_us_sum(40);
    s->set_bus_bw_gbs_log_sum(bw_log_sum);
    s->set_bw_samples(bw_log_sum > 0 ? 4 : 0);
  };
  add(false, "AllReduce", "1-2MB", "RING_SIMPLE", 4);
  add(false, "AllGather", "8-9KB", "", 0);  // algo_proto unknown
  add(true, "Send", "1-2MB", "", 4);
  return r;
}

// The aggregator finds a rank's series with InspectorStatMatches instead of building their
// labels: it must accept exactly the labels InspectorStatLabels builds (and InspectorSamples
// exports), and nothing that differs in one label.
TEST(InspectorStatTest, MatchesExactlyTheLabelsItsSamplesCarry) {
  const ncclwatch::v1::RankReport report = Report();
  const auto stats = InspectorStats(report);
  ASSERT_EQ(stats.size(), 3u);
  const auto samples = InspectorSamples(report);
  size_t sample = 0;
  for (const InspectorStat& stat : stats) {
    const LabelPairs labels = InspectorStatLabels(stat, report.identity());
    ASSERT_LT(sample, samples.size());
    EXPECT_EQ(samples[sample].name, std::string(stat.time_family()));
    EXPECT_EQ(samples[sample++].labels, labels);
    if (stat.has_bw) EXPECT_EQ(samples[sample++].labels, labels);
    EXPECT_TRUE(InspectorStatMatches(stat, report.identity(), labels));
    for (size_t i = 0; i < labels.size(); ++i) {
      LabelPairs other = labels;
      other[i].second += "x";
      EXPECT_FALSE(InspectorStatMatches(stat, report.identity(), other)) << other[i].first;
      other = labels;
      other[i].first += "x";
      EXPECT_FALSE(InspectorStatMatches(stat, report.identity(), other)) << other[i].first;
    }
    LabelPairs longer = labels;
    longer.emplace_back("extra", "1");
    EXPECT_FALSE(InspectorStatMatches(stat, report.identity(), longer));
  }
  EXPECT_EQ(sample, samples.size());
  // The collective without an algorithm is labelled "unknown", as every exporter writes it.
  const LabelPairs unknown = InspectorStatLabels(stats[0], report.identity());
  EXPECT_EQ(unknown.back(), (std::pair<std::string, std::string>{"algo_proto", "unknown"}));
}

}  // namespace
}  // namespace ncclwatch
