// The sharded Query service's pieces: merging answers (jobs once, events in time order with one
// page token over every aggregator's cursor), the job a selector names, the peer list's checks,
// and an in-process aggregator whose peer is down: a call about the peer's job fails naming it, a
// call about all jobs is answered by the rest and says who is missing.
#include "aggregator/server/shard_router.h"

#include <filesystem>
#include <string>
#include <vector>

#include "aggregator/server/aggregator_server.h"
#include "common/rendezvous.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;

ncclwatch::v1::JobInfo JobAnswer(const std::string& id, const std::string& state, uint64_t last) {
  ncclwatch::v1::JobInfo j;
  j.set_job_id(id);
  j.set_state(state);
  j.set_last_report_unix_ns(last);
  return j;
}

TEST(MergeJobsTest, ListsEachJobOnceTheRunningOneFirst) {
  std::vector<ncclwatch::v1::ListJobsResponse> answers(2);
  *answers[0].add_jobs() = JobAnswer("moved", "ended", 50);  // where it ran before
  *answers[0].add_jobs() = JobAnswer("b", "running", 10);
  *answers[1].add_jobs() = JobAnswer("moved", "running", 40);
  *answers[1].add_jobs() = JobAnswer("a", "ended", 5);
  *answers[1].add_jobs() = JobAnswer("old", "ended", 5);
  *answers[0].add_jobs() = JobAnswer("old", "ended", 9);
  const auto merged = MergeJobs(answers);
  ASSERT_EQ(merged.jobs_size(), 4);
  EXPECT_EQ(merged.jobs(0).job_id(), "a");
  EXPECT_EQ(merged.jobs(1).job_id(), "b");
  EXPECT_EQ(merged.jobs(2).job_id(), "moved");
  EXPECT_EQ(merged.jobs(2).state(), "running");
  EXPECT_EQ(merged.jobs(3).last_report_unix_ns(), 9u);  // both ended: the latest
}

ncclwatch::v1::Event At(uint64_t t, const std::string& what) {
  ncclwatch::v1::Event e;
  e.set_time_unix_ns(t);
  e.set_summary(what);
  return e;
}

// Events of one aggregator's log from `cursor` ("t.n" or ""), at most `limit`, as
// QueryEngine::ListEvents reads them.
ncclwatch::v1::ListEventsResponse Read(const std::vector<ncclwatch::v1::Event>& log,
                                       const std::string& cursor, size_t limit) {
  uint64_t t = 0, n = 0;
  if (!cursor.empty()) {
    t = std::stoull(cursor.substr(0, cursor.find('.')));
    n = std::stoull(cursor.substr(cursor.find('.') + 1));
  }
  ncclwatch::v1::ListEventsResponse out;
  uint64_t seen_at_t = 0;
  for (const auto& e : log) {
    if (e.time_unix_ns() < t) continue;
    if (e.time_unix_ns() == t && ++seen_at_t <= n) continue;
    if (static_cast<size_t>(out.events_size()) == limit) {
      out.set_next_page_token("more");
      break;
    }
    *out.add_events() = e;
  }
  return out;
}

TEST(MergeEventsTest, PagesThroughEveryLogInTimeOrderWithEqualTimesSpanningPages) {
  // Three aggregators' logs; several events share a time, within a log and across logs.
  const std::vector<std::vector<ncclwatch::v1::Event>> logs = {
      {At(1, "a1"), At(5, "a5"), At(5, "a5'"), At(5, "a5''"), At(9, "a9")},
      {At(2, "b2"), At(5, "b5"), At(7, "b7")},
      {},
  };
  for (uint32_t limit : {1u, 2u, 3u, 4u, 100u}) {
    std::vector<std::string> cursors(3);
    std::vector<std::string> got;
    for (int pages = 0; pages < 50; ++pages) {
      std::vector<ncclwatch::v1::ListEventsResponse> answers;
      for (size_t i = 0; i < logs.size(); ++i) answers.push_back(Read(logs[i], cursors[i], limit));
      const auto page = MergeEvents(answers, cursors, limit);
      ASSERT_LE(page.events_size(), static_cast<int>(limit));
      for (const auto& e : page.events()) got.push_back(e.summary());
      if (page.next_page_token().empty()) break;
      auto next = ParseEventCursors(page.next_page_token(), 3);
      ASSERT_THAT(next, IsOk());
      cursors = *next;
    }
    EXPECT_EQ(got, (std::vector<std::string>{"a1", "b2", "a5", "a5'", "a5''", "b5", "b7", "a9"}))
        << "limit " << limit;
  }
}

TEST(MergeEventsTest, RefusesATokenOfAnotherShape) {
  EXPECT_FALSE(ParseEventCursors("12.3", 3).ok());            // an unsharded aggregator's
  EXPECT_FALSE(ParseEventCursors("shards:1.1;2.2", 3).ok());  // made for two aggregators
  EXPECT_FALSE(ParseEventCursors("shards:x;;", 3).ok());
  ASSERT_THAT(ParseEventCursors("shards:1.1;;4.0", 3), IsOk());
  EXPECT_EQ(ParseEventCursors("", 2)->size(), 2u);
}

TEST(SeriesPageTest, TokensRoundTripAndOthersAreRefused) {
  for (const std::string& own : {std::string(""), std::string("4711")}) {
    auto page = ParseSeriesPage(SeriesPageToken(2, own), 3);
    ASSERT_THAT(page, IsOk());
    EXPECT_EQ(page->peer, 2u);
    EXPECT_EQ(page->token, own);
  }
  EXPECT_EQ(ParseSeriesPage("", 3)->peer, 0u);                    // the first page
  EXPECT_FALSE(ParseSeriesPage("4711", 3).ok());                  // an unsharded aggregator's
  EXPECT_FALSE(ParseSeriesPage(SeriesPageToken(3, ""), 3).ok());  // no fourth aggregator
  EXPECT_FALSE(ParseSeriesPage("shards:x;1", 3).ok());
  EXPECT_FALSE(ParseSeriesPage("shards:1", 3).ok());
}

TEST(SelectorJobTest, FindsAnEqualityMatcherOnJobId) {
  EXPECT_EQ(SelectorJob(R"(nccl_rank_lateness_seconds{job_id="train-3",rank="1"})"), "train-3");
  EXPECT_EQ(SelectorJob(R"(nccl_rank_lateness_seconds{job_id=~"train-.*"})"), "");
  EXPECT_EQ(SelectorJob("nccl_rank_lateness_seconds"), "");
  EXPECT_EQ(SelectorJob("{{bad"), "");
}

TEST(ShardRouterTest, RefusesAPeerListWithoutSelfOrNamingOneTwice) {
  MetricRegistry metrics;
  ShardOptions o;
  o.peers = {"a=127.0.0.1:1", "b=127.0.0.1:2"};
  o.self = "c";
  EXPECT_TRUE(absl::IsInvalidArgument(ShardRouter::Create(o, metrics).status()));
  o.peers = {"a=127.0.0.1:1", "a=127.0.0.1:2"};
  o.self = "a";
  EXPECT_TRUE(absl::IsInvalidArgument(ShardRouter::Create(o, metrics).status()));
  o.peers = {"=127.0.0.1:1", "b=127.0.0.1:2"};
  EXPECT_TRUE(absl::IsInvalidArgument(ShardRouter::Create(o, metrics).status()));
  o.peers = {"a=127.0.0.1:1", "127.0.0.1:2"};
  auto ok = ShardRouter::Create(o, metrics);
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ((*ok)->peers(), (std::vector<std::string>{"a", "127.0.0.1:2"}));
  EXPECT_EQ((*ok)->self(), 0u);
}

TEST(ShardRouterTest, APeerDownFailsItsJobsCallsAndLeavesTheOthersAnswered) {
  char tmpl[] = "/tmp/ncclwatch-shard-router-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  AggregatorServerOptions o;
  o.listen_host = "127.0.0.1";
  o.grpc_port = 0;
  o.http_port = 0;
  o.data_dir = dir;
  // Port 1 of loopback: nothing listens there, a connection is refused at once.
  o.shard = ShardOptions{.peers = {"up=127.0.0.1:2", "down=127.0.0.1:1"},
                         .self = "up",
                         .credentials = nullptr,
                         .timeout = absl::Seconds(2)};
  {
    AggregatorServer server(o);
    ASSERT_THAT(server.Start(), IsOk());
    auto stub = ncclwatch::v1::Query::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server.grpc_port()), grpc::InsecureChannelCredentials()));
    // A job the down aggregator owns.
    std::string job;
    for (int j = 0; job.empty(); ++j) {
      const std::string id = "job-" + std::to_string(j);
      if (RendezvousOwner(id, {"up", "down"}) == 1) job = id;
    }
    {
      grpc::ClientContext context;
      ncclwatch::v1::ListStragglersRequest request;
      request.set_job_id(job);
      ncclwatch::v1::ListStragglersResponse response;
      const grpc::Status s = stub->ListStragglers(&context, request, &response);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
      EXPECT_NE(s.error_message().find("aggregator down is unreachable"), std::string::npos)
          << s.error_message();
    }
    {
      grpc::ClientContext context;
      ncclwatch::v1::ListJobsResponse response;
      ASSERT_THAT(stub->ListJobs(&context, {}, &response), IsOk());
      const auto& trailers = context.GetServerTrailingMetadata();
      auto it = trailers.find(kUnreachableTrailer);
      ASSERT_NE(it, trailers.end());
      EXPECT_EQ(std::string(it->second.data(), it->second.size()), "down");
    }
    // A peer's call is answered where it lands: never forwarded again.
    {
      grpc::ClientContext context;
      context.AddMetadata(kShardHopHeader, "1");
      ncclwatch::v1::ListStragglersRequest request;
      request.set_job_id(job);
      ncclwatch::v1::ListStragglersResponse response;
      EXPECT_THAT(stub->ListStragglers(&context, request, &response), IsOk());
    }
    server.Stop();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclwatch::aggregator
