#include "proto/inspector.h"

#include <map>
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

// The aggregator finds a rank's series by InspectorStatKey instead of building their labels:
// the key must follow the labels InspectorStatLabels builds (and InspectorSamples exports): the
// same for the same labels, another when any one of them differs.
TEST(InspectorStatTest, ItsKeyFollowsExactlyTheLabelsItsSamplesCarry) {
  const ncclwatch::v1::RankReport report = Report();
  const auto stats = InspectorStats(report);
  ASSERT_EQ(stats.size(), 3u);
  const auto samples = InspectorSamples(report);
  size_t sample = 0;
  std::map<uint64_t, LabelPairs> labels_of_key;
  auto key_of = [&](const InspectorStat& stat, const ncclwatch::v1::RankIdentity& id) {
    const uint64_t key = InspectorStatKey(stat, id);
    const LabelPairs labels = InspectorStatLabels(stat, id);
    auto [it, fresh] = labels_of_key.emplace(key, labels);
    EXPECT_EQ(it->second, labels) << "two label sets under one key";
    return key;
  };
  for (const InspectorStat& stat : stats) {
    const LabelPairs labels = InspectorStatLabels(stat, report.identity());
    ASSERT_LT(sample, samples.size());
    EXPECT_EQ(samples[sample].name, std::string(stat.time_family()));
    EXPECT_EQ(samples[sample++].labels, labels);
    if (stat.has_bw) {
      EXPECT_EQ(samples[sample++].labels, labels);
    }
    const uint64_t key = key_of(stat, report.identity());
    // The same stat read from another report of the rank: the same key.
    const ncclwatch::v1::RankReport again = Report();
    EXPECT_EQ(key_of(InspectorStats(again)[&stat - stats.data()], again.identity()), key);
    // One label changed at a time: each a key of its own.
    InspectorStat other = stat;
    other.op = "Broadcast";
    EXPECT_NE(key_of(other, report.identity()), key);
    other = stat;
    other.message_size = "2-4MB";
    EXPECT_NE(key_of(other, report.identity()), key);
    other = stat;
    other.p2p = !stat.p2p;
    EXPECT_NE(key_of(other, report.identity()), key);
    if (!stat.p2p) {
      other = stat;
      other.algo_proto = other.algo_proto.empty() ? "TREE_LL" : "";
      EXPECT_NE(key_of(other, report.identity()), key);
    }
    ncclwatch::v1::RankIdentity id = report.identity();
    id.set_n_nodes(id.n_nodes() + 1);
    EXPECT_NE(key_of(stat, id), key);
    id = report.identity();
    id.set_nranks(id.nranks() + 1);
    EXPECT_NE(key_of(stat, id), key);
    // What the labels do not show (the rank, its job) does not change the key.
    id = report.identity();
    id.set_rank(id.rank() + 1);
    id.set_job_id("another");
    EXPECT_EQ(key_of(stat, id), key);
  }
  EXPECT_EQ(sample, samples.size());
  // The collective without an algorithm is labelled "unknown", as every exporter writes it.
  const LabelPairs unknown = InspectorStatLabels(stats[0], report.identity());
  EXPECT_EQ(unknown.back(), (std::pair<std::string, std::string>{"algo_proto", "unknown"}));
}

}  // namespace
}  // namespace ncclwatch
