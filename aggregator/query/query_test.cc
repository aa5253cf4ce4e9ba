// QueryEngine::ListEvents over a real RocksDB store: paging across events that share a
// timestamp (one report can raise several), filtering by job, limits.
#include "aggregator/query/query.h"

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "aggregator/store/store.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;

TEST(ListEventsTest, PagesThroughSharedTimestampsWithoutLosingOrRepeatingEvents) {
  char tmpl[] = "/tmp/ncclwatch-events-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  {
    auto store = Store::Open(dir);
    ASSERT_THAT(store, IsOk());
    // 10,000 events, 7 per timestamp (so page boundaries fall inside groups), two jobs.
    constexpr int kEvents = 10'000;
    for (int i = 0; i < kEvents; ++i) {
      ncclwatch::v1::Event e;
      e.set_kind(ncclwatch::v1::Event::HANG);
      e.set_time_unix_ns(1'000'000'000ull + i / 7);
      e.set_summary(std::to_string(i));
      e.mutable_hang()->set_job_id(i % 3 == 0 ? "job-a" : "job-b");
      ASSERT_TRUE((*store)->PutEvent(e).ok());
    }
    Analyzer analyzer;
    QueryEngine core(**store, analyzer);

    ncclwatch::v1::ListEventsRequest all;
    all.set_limit(100'000);
    auto got = core.ListEvents(all);
    ASSERT_THAT(got, IsOk());
    ASSERT_EQ(got->events_size(), kEvents);
    for (int i = 0; i < kEvents; ++i) {
      ASSERT_EQ(got->events(i).summary(), std::to_string(i)) << "in write order, once each";
    }

    ncclwatch::v1::ListEventsRequest job_a;
    job_a.set_job_id("job-a");
    job_a.set_limit(100'000);
    got = core.ListEvents(job_a);
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(got->events_size(), (kEvents + 2) / 3);
    for (const auto& e : got->events()) EXPECT_EQ(e.hang().job_id(), "job-a");

    ncclwatch::v1::ListEventsRequest recent;
    recent.set_since_unix_ns(1'000'000'000ull + 1000);  // from event 7000 on
    recent.set_limit(5);
    got = core.ListEvents(recent);
    ASSERT_THAT(got, IsOk());
    ASSERT_EQ(got->events_size(), 5);
    EXPECT_EQ(got->events(0).summary(), "7000");

    // Page tokens: pages of 333 (boundaries inside groups of 7) give every event of job-b once.
    ncclwatch::v1::ListEventsRequest paged;
    paged.set_job_id("job-b");
    paged.set_limit(333);
    std::vector<std::string> seen;
    for (int pages = 0; pages < 100; ++pages) {
      got = core.ListEvents(paged);
      ASSERT_THAT(got, IsOk());
      for (const auto& e : got->events()) seen.push_back(e.summary());
      if (got->next_page_token().empty()) break;
      paged.set_page_token(got->next_page_token());
    }
    std::vector<std::string> want;
    for (int i = 0; i < kEvents; ++i) {
      if (i % 3 != 0) want.push_back(std::to_string(i));
    }
    EXPECT_EQ(seen, want);
    paged.set_page_token("garbage");
    EXPECT_EQ(core.ListEvents(paged).status().code(), absl::StatusCode::kInvalidArgument);

    ncclwatch::v1::ListEventsRequest defaults;  // limit 0 means 1000
    got = core.ListEvents(defaults);
    ASSERT_THAT(got, IsOk());
    EXPECT_EQ(got->events_size(), 1000);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

TEST(QueryRangeTest, SelectsStepsAndPagesThroughSeries) {
  char tmpl[] = "/tmp/ncclwatch-query-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  {
    auto store = Store::Open(dir);
    ASSERT_THAT(store, IsOk());
    std::vector<SeriesPoint> points;
    for (int rank = 0; rank < 5; ++rank) {
      for (int64_t t = 0; t < 60'000; t += 1'000) {
        points.push_back({"bw",
                          {{"job_id", "j"}, {"rank", std::to_string(rank)}},
                          static_cast<double>(rank * 1000 + t / 1000),
                          t});
      }
    }
    points.push_back({"other", {{"job_id", "j"}}, 1, 0});
    ASSERT_TRUE((*store)->AppendPoints(points).ok());
    Analyzer analyzer;
    QueryEngine core(**store, analyzer);

    ncclwatch::v1::QueryRangeRequest q;
    q.set_selector(R"(bw{rank=~"1|3"})");
    q.set_start_unix_ms(10'000);
    q.set_end_unix_ms(20'000);
    auto got = core.QueryRange(q, 0);
    ASSERT_THAT(got, IsOk());
    ASSERT_EQ(got->series_size(), 2);
    EXPECT_EQ(got->series(0).points_size(), 11);  // every stored point in [10 s, 20 s]
    EXPECT_EQ(got->series(1).points(0).value(), 3010);

    q.set_step_ms(4'000);  // 10, 14, 18 s: the latest point at or before each
    got = core.QueryRange(q, 0);
    ASSERT_THAT(got, IsOk());
    ASSERT_EQ(got->series(0).points_size(), 3);
    EXPECT_EQ(got->series(0).points(2).time_ms(), 18'000);
    EXPECT_EQ(got->series(0).points(2).value(), 1018);

    ncclwatch::v1::QueryRangeRequest paged;
    paged.set_selector("bw");
    paged.set_end_unix_ms(60'000);
    paged.set_max_series(2);
    std::vector<std::string> ranks;
    for (int pages = 0; pages < 10; ++pages) {
      got = core.QueryRange(paged, 0);
      ASSERT_THAT(got, IsOk());
      for (const auto& ts : got->series()) ranks.push_back(ts.labels(1).value());
      if (got->next_page_token().empty()) break;
      EXPECT_TRUE(got->truncated());
      paged.set_page_token(got->next_page_token());
    }
    EXPECT_EQ(ranks, (std::vector<std::string>{"0", "1", "2", "3", "4"}));

    q.set_selector("bw{");
    EXPECT_EQ(core.QueryRange(q, 0).status().code(), absl::StatusCode::kInvalidArgument);
    q.set_selector("bw");
    q.set_start_unix_ms(30'000);
    q.set_end_unix_ms(20'000);
    EXPECT_EQ(core.QueryRange(q, 0).status().code(), absl::StatusCode::kInvalidArgument);
    q.set_start_unix_ms(0);
    q.set_end_unix_ms(1'000'000'000);
    q.set_step_ms(1);
    EXPECT_EQ(core.QueryRange(q, 0).status().code(), absl::StatusCode::kInvalidArgument);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclwatch::aggregator
