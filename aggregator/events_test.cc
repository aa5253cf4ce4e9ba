// AggregatorCore::ListEvents over a real RocksDB store: paging across events that share a
// timestamp (one report can raise several), filtering by job, limits.
#include <cstdlib>
#include <filesystem>
#include <set>

#include "aggregator/services.h"
#include "aggregator/store.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

TEST(ListEventsTest, PagesThroughSharedTimestampsWithoutLosingOrRepeatingEvents) {
  char tmpl[] = "/tmp/ncclwatch-events-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  {
    auto store = Store::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
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
    MetricRegistry metrics;
    AggregatorCore core(**store, analyzer, metrics);

    ncclwatch::v1::ListEventsRequest all;
    all.set_limit(100'000);
    auto got = core.ListEvents(all);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->events_size(), kEvents);
    for (int i = 0; i < kEvents; ++i) {
      ASSERT_EQ(got->events(i).summary(), std::to_string(i)) << "in write order, once each";
    }

    ncclwatch::v1::ListEventsRequest job_a;
    job_a.set_job_id("job-a");
    job_a.set_limit(100'000);
    got = core.ListEvents(job_a);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->events_size(), (kEvents + 2) / 3);
    for (const auto& e : got->events()) EXPECT_EQ(e.hang().job_id(), "job-a");

    ncclwatch::v1::ListEventsRequest recent;
    recent.set_since_unix_ns(1'000'000'000ull + 1000);  // from event 7000 on
    recent.set_limit(5);
    got = core.ListEvents(recent);
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(got->events_size(), 5);
    EXPECT_EQ(got->events(0).summary(), "7000");

    ncclwatch::v1::ListEventsRequest defaults;  // limit 0 means 1000
    got = core.ListEvents(defaults);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->events_size(), 1000);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclwatch::aggregator
