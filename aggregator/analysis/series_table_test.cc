#include "aggregator/analysis/series_table.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "gtest/gtest.h"
#include "proto/inspector.h"

namespace ncclwatch::aggregator {
namespace {

// Adds a report of the rank `labels` name (their hash is the fingerprint).
void Add(SeriesTable& table, const LabelPairs& labels, const ncclwatch::v1::RankReport& report,
         int64_t now_ns, std::vector<SeriesPoint>* points) {
  table.AddReport(
      absl::HashOf(labels), [&] { return labels; }, report, now_ns, points);
}

ncclwatch::v1::RankReport ReportWithDrops(uint64_t events_dropped) {
  ncclwatch::v1::RankReport r;
  r.mutable_drops()->set_events_dropped(events_dropped);
  r.set_interval_end_unix_ns(5'000'000'000);
  return r;
}

// One agent inventing series (many ranks, long labels) fills its own byte budget, not the table:
// the other agents' series still come in. --max-series alone counted series, so an agent sending
// long labels held what the bytes it sent made.
TEST(SeriesTableTest, OneSourceFillsItsOwnByteBudgetAndTheOthersStillComeIn) {
  constexpr size_t kBudget = 256 << 10;
  SeriesTable table(1'000'000, 60'000'000'000, kBudget);
  auto rank_of = [](const std::string& job, int rank) {
    ncclwatch::v1::RankReport r = ReportWithDrops(1);
    r.mutable_identity()->set_job_id(job);
    r.mutable_identity()->set_rank(rank);
    return r;
  };
  const std::string long_job(1000, 'x');
  for (int rank = 0; rank < 1000; ++rank) {
    const LabelPairs labels = {{"job_id", long_job}, {"rank", std::to_string(rank)}};
    table.AddReport(
        absl::HashOf(labels), [&] { return labels; }, rank_of(long_job, rank), 1, nullptr,
        "agent:flood");
  }
  EXPECT_LE(table.source_bytes("agent:flood"), kBudget);
  EXPECT_GT(table.source_bytes("agent:flood"), kBudget / 2);
  EXPECT_GT(table.capped_by_source(), 0u);
  const size_t flood_series = table.size();
  EXPECT_LT(flood_series, 5'000u) << "1,000 ranks x 5 series would be 5,000";
  // A genuine agent's ranks still come in.
  for (int rank = 0; rank < 8; ++rank) {
    const LabelPairs labels = {{"job_id", "train"}, {"rank", std::to_string(rank)}};
    table.AddReport(
        absl::HashOf(labels), [&] { return labels; }, rank_of("train", rank), 1, nullptr,
        "agent:node-7");
  }
  EXPECT_EQ(table.size(), flood_series + 8 * 5);
  // Expired, the flood's series give their bytes back.
  table.Expire(120'000'000'000);
  EXPECT_EQ(table.source_bytes("agent:flood"), 0u);
  EXPECT_EQ(table.size(), 0u);
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
  Add(table, labels, ReportWithDrops(3), 1'000'000'000, &points);
  ASSERT_EQ(points.size(), 5u);  // one per drop kind
  Add(table, labels, ReportWithDrops(7), 2'000'000'000, nullptr);
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
  Add(small, labels, ReportWithDrops(1), 1'000'000'000, nullptr);
  EXPECT_EQ(small.size(), 2u);
  EXPECT_EQ(small.capped(), 3u);
  // Forgotten after the TTL without updates.
  table.Expire(62'000'000'001);
  EXPECT_EQ(table.size(), 0u);
}

ncclwatch::v1::OpStats* AddStats(ncclwatch::v1::RankReport* r, const char* op, uint64_t tag,
                                 uint64_t count, double sum_us) {
  ncclwatch::v1::OpStats* s = r->add_stats();
  s->set_op(op);
  s->set_algo_proto("RING_SIMPLE");
  s->set_message_size("1-2MB");
  s->set_peer(-1);
  s->set_user_tag(tag);
  s->set_count(count);
  s->set_exec_time_us_sum(sum_us);
  return s;
}

TEST(SeriesTableTest, TaggedOperationsGetAPerTagBreakdownWithBoundedTags) {
  ncclwatch::v1::RankReport r;
  r.set_interval_end_unix_ns(5'000'000'000);
  r.mutable_identity()->set_nranks(8);
  AddStats(&r, "AllReduce", 0, 100, 100 * 50.0);  // untagged: Inspector series only
  AddStats(&r, "AllReduce", 7, 10, 10 * 400.0);   // tag 7: the forward pass, say
  AddStats(&r, "AllReduce", 7, 30, 30 * 200.0)->set_message_size("8-9KB");  // merged over sizes
  AddStats(&r, "AllReduce", 9, 5, 5 * 90.0);
  AddStats(&r, "AllGather", uint64_t{1} << 63 | 2, 4, 4 * 10.0);  // NCCL's reserved range
  SeriesTable table(1000, 60'000'000'000);
  std::vector<SeriesPoint> points;
  Add(table, {{"rank", "3"}}, r, 1'000'000'000, &points);
  std::map<std::string, double> tagged;
  double inspector_all_reduce = 0;
  for (const SeriesPoint& p : points) {
    const std::pair<std::string, std::string> bucket{"message_size", "1-2MB"};
    if (p.name == "nccl_collective_exec_time_microseconds" &&
        std::find(p.labels.begin(), p.labels.end(), bucket) != p.labels.end()) {
      inspector_all_reduce = p.value;
    }
    if (p.name != "ncclwatch_tagged_exec_time_microseconds") continue;
    ASSERT_EQ(p.labels.size(), 3u);
    EXPECT_EQ(p.labels[0], (std::pair<std::string, std::string>{"rank", "3"}));
    tagged[p.labels[1].second + "@" + p.labels[2].second] = p.value;
  }
  EXPECT_EQ(tagged, (std::map<std::string, double>{{"AllReduce@7", 250.0},
                                                   {"AllReduce@9", 90.0},
                                                   {"AllGather@0x8000000000000002", 10.0}}));
  // The Inspector series still cover every operation of the bucket, tagged or not.
  EXPECT_DOUBLE_EQ(inspector_all_reduce, (100 * 50.0 + 10 * 400.0 + 5 * 90.0) / 115);

  // A tag per step: only the most frequent keep a label of their own.
  ncclwatch::v1::RankReport steps;
  for (uint64_t step = 1; step <= 40; ++step)
    AddStats(&steps, "AllReduce", step, step, step * 10.0);
  std::vector<InspectorSample> samples = UserTagSamples(steps, 16);
  ASSERT_EQ(samples.size(), 17u);
  std::set<std::string> tags;
  for (const InspectorSample& s : samples) tags.insert(s.labels[1].second);
  EXPECT_TRUE(tags.contains("other"));
  EXPECT_TRUE(tags.contains("40"));
  EXPECT_FALSE(tags.contains("24"));  // 25..40 are the 16 most frequent
}

TEST(SeriesTableTest, ARanksSeriesAreUpdatedInAnyOrderAndRelabelledWhenItsNodeChanges) {
  SeriesTable table(1000, 60'000'000'000);
  ncclwatch::v1::RankReport r;
  r.set_interval_end_unix_ns(5'000'000'000);
  r.mutable_identity()->set_nranks(8);
  AddStats(&r, "AllReduce", 0, 10, 10 * 50.0);
  AddStats(&r, "AllGather", 0, 10, 10 * 20.0);
  const LabelPairs on_a = {{"rank", "3"}, {"node", "a"}};
  Add(table, on_a, r, 1'000'000'000, nullptr);
  const size_t series = table.size();
  ASSERT_EQ(series, 2u);  // the execution time of each operation
  // The next report lists the same operations the other way round, with new values.
  ncclwatch::v1::RankReport reversed = r;
  reversed.mutable_stats()->SwapElements(0, 1);
  reversed.mutable_stats(1)->set_exec_time_us_sum(10 * 70.0);  // AllReduce, now 70 us
  Add(table, on_a, reversed, 2'000'000'000, nullptr);
  EXPECT_EQ(table.size(), series);  // the same series, none twice
  std::vector<SeriesPoint> out;
  table.AppendTo(&out);
  const std::pair<std::string, std::string> all_reduce{"collective", "AllReduce"};
  int updated = 0;
  for (const SeriesPoint& p : out) {
    EXPECT_EQ(p.labels[1], (std::pair<std::string, std::string>{"node", "a"}));
    if (p.name == "nccl_collective_exec_time_microseconds" &&
        std::find(p.labels.begin(), p.labels.end(), all_reduce) != p.labels.end()) {
      EXPECT_DOUBLE_EQ(p.value, 70.0);
      ++updated;
    }
  }
  EXPECT_EQ(updated, 1);
  // The rank moved to another node: its series carry the new label from its next report on.
  const LabelPairs on_b = {{"rank", "3"}, {"node", "b"}};
  Add(table, on_b, reversed, 3'000'000'000, nullptr);
  EXPECT_EQ(table.size(), series);
  out.clear();
  table.AppendTo(&out);
  for (const SeriesPoint& p : out) {
    EXPECT_EQ(p.labels[1], (std::pair<std::string, std::string>{"node", "b"}));
  }
}

// The registry's cached slot spares the lookup of the rank; once a rank expires (the table's
// nodes may be gone), every slot is looked up again, so a slot never reaches a forgotten rank.
TEST(SeriesTableTest, ACachedSlotIsUsedWhileValidAndLookedUpAgainAfterAnExpiry) {
  constexpr int64_t kTtl = 60'000'000'000;
  SeriesTable table(1000, kTtl);
  const auto report = [](int rank, double us) {
    ncclwatch::v1::RankReport r;
    r.set_interval_end_unix_ns(5'000'000'000);
    r.mutable_identity()->set_job_id("j");
    r.mutable_identity()->set_nranks(8);
    r.mutable_identity()->set_rank(rank);
    AddStats(&r, "AllReduce", 0, 10, 10 * us);
    return r;
  };
  const auto add = [&](int rank, double us, int64_t now_ns, CachedSlot* slot) {
    const LabelPairs labels = {{"rank", std::to_string(rank)}};
    table.AddReport(
        absl::HashOf(labels), [&] { return labels; }, report(rank, us), now_ns, nullptr, "", slot);
  };
  const auto value_of = [&](int rank) {
    std::vector<SeriesPoint> out;
    table.AppendTo(&out);
    for (const SeriesPoint& p : out) {
      if (p.labels[0].second == std::to_string(rank)) return p.value;
    }
    return -1.0;
  };
  CachedSlot slot3;
  add(3, 50, 1'000'000'000, &slot3);
  ASSERT_NE(slot3.rank, nullptr);
  add(5, 60, 1'000'000'000, nullptr);
  add(3, 70, 2'000'000'000, &slot3);  // through the slot
  EXPECT_DOUBLE_EQ(value_of(3), 70);
  EXPECT_DOUBLE_EQ(value_of(5), 60);
  // Rank 3 goes quiet and expires; rank 5 carries on.
  add(5, 61, kTtl + 1'000'000'000, nullptr);
  table.Expire(kTtl + 3'000'000'000);
  EXPECT_DOUBLE_EQ(value_of(3), -1) << "rank 3 was forgotten";
  EXPECT_EQ(table.size(), 1u);
  add(3, 80, kTtl + 4'000'000'000, &slot3);  // its slot points at freed memory: not used
  EXPECT_DOUBLE_EQ(value_of(3), 80);
  EXPECT_EQ(table.size(), 2u);
}

// Ranks' series of the same operation and size share one label set; each still exports its own
// full labels, through another rank's expiry, and once every series that held a set is gone, a
// new one builds it again.
TEST(SeriesTableTest, RanksShareLabelSetsThatOutliveNoneOfTheirSeries) {
  constexpr int64_t kTtl = 60'000'000'000;
  SeriesTable table(1000, kTtl);
  const auto add = [&](int rank, const char* size, int64_t now_ns) {
    ncclwatch::v1::RankReport r;
    r.set_interval_end_unix_ns(5'000'000'000);
    r.mutable_identity()->set_job_id("j");
    r.mutable_identity()->set_nranks(8);
    r.mutable_identity()->set_rank(rank);
    AddStats(&r, "AllReduce", 0, 10, 100)->set_message_size(size);
    const LabelPairs labels = {{"rank", std::to_string(rank)}};
    table.AddReport(
        absl::HashOf(labels), [&] { return labels; }, r, now_ns, nullptr);
  };
  // rank -> the message sizes its series are labelled with.
  const auto sizes = [&] {
    std::vector<SeriesPoint> out;
    table.AppendTo(&out);
    std::map<std::string, std::set<std::string>> by_rank;
    for (const SeriesPoint& p : out) {
      auto size = std::find_if(p.labels.begin(), p.labels.end(),
                               [](const auto& l) { return l.first == "message_size"; });
      EXPECT_NE(size, p.labels.end());
      EXPECT_EQ(p.labels[0].first, "rank");
      if (size != p.labels.end()) by_rank[p.labels[0].second].insert(size->second);
    }
    return by_rank;
  };
  add(1, "1-2MB", 1'000'000'000);
  add(2, "1-2MB", 1'000'000'000);
  add(2, "4-5MB", 1'000'000'000);
  using Sizes = std::map<std::string, std::set<std::string>>;
  EXPECT_EQ(sizes(), (Sizes{{"1", {"1-2MB"}}, {"2", {"1-2MB", "4-5MB"}}}));
  add(2, "1-2MB", kTtl);  // rank 2's 4-5MB and rank 1 go quiet
  table.Expire(kTtl + 2'000'000'000);
  EXPECT_EQ(sizes(), (Sizes{{"2", {"1-2MB"}}}));
  add(3, "4-5MB", kTtl + 3'000'000'000);  // its label set went with the last series holding it
  EXPECT_EQ(sizes(), (Sizes{{"2", {"1-2MB"}}, {"3", {"4-5MB"}}}));
}

}  // namespace
}  // namespace ncclwatch::aggregator
