// A job's end: its open findings end at once with the reason, its detection series go, it is
// listed as ended, and what the detectors would derive later does not end the findings twice.
#include "aggregator/analysis/job_lifecycle.h"

#include <string>
#include <vector>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/analysis/analyzer_test_util.h"
#include "aggregator/analysis/answers.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ncclwatch::v1::Event;

constexpr int64_t kT0 = 1'000'000'000;

// Rank 5 of job-7's 8 ranks arrives 2 ms late for three intervals: one STRAGGLER START.
std::vector<Event> RunWithAStraggler(Analyzer& analyzer) {
  std::vector<Event> events;
  for (int interval = 0; interval < 3; ++interval) {
    for (int rank = 0; rank < 8; ++rank) {
      for (auto& e : analyzer.Ingest(Report(rank, 8, interval * 10, 10, 5), kT0).events) {
        events.push_back(e);
      }
    }
  }
  return events;
}

int FlaggedSeries(const Analyzer& analyzer) {
  int flagged = 0;
  for (const SeriesPoint& s : analyzer.Series(/*detection_only=*/true)) {
    flagged += s.name == "ncclwatch_straggler" && s.value == 1;
  }
  return flagged;
}

const ncclwatch::v1::JobInfo* FindJob(const std::vector<ncclwatch::v1::JobInfo>& jobs,
                                      const std::string& id) {
  for (const auto& j : jobs) {
    if (j.job_id() == id) return &j;
  }
  return nullptr;
}

TEST(JobLifecycleTest, FinalReportsEndTheJobAndItsOpenFindingsAtOnce) {
  Analyzer analyzer;
  std::vector<Event> started = RunWithAStraggler(analyzer);
  ASSERT_EQ(started.size(), 1u);
  ASSERT_EQ(started[0].kind(), Event::STRAGGLER);
  ASSERT_EQ(FlaggedSeries(analyzer), 1);

  std::vector<Event> ended;
  for (int rank = 0; rank < 8; ++rank) {
    ncclwatch::v1::RankReport last = Report(rank, 8, 30, 0, -1);
    last.set_final(true);
    const int64_t at = kT0 + 500'000'000 + rank;
    for (auto& e : analyzer.Ingest(last, at).events) ended.push_back(e);
    if (rank < 7) {
      EXPECT_TRUE(ended.empty()) << "the job runs until its last rank finalizes";
      ASSERT_EQ(analyzer.answers().Jobs().at(0).state(), "running");
    }
  }
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].kind(), Event::STRAGGLER);
  EXPECT_EQ(ended[0].phase(), Event::END);
  EXPECT_EQ(ended[0].end_reason(), kEndJobEnded);
  EXPECT_EQ(ended[0].straggler().rank(), 5);
  EXPECT_EQ(ended[0].time_unix_ns(), static_cast<uint64_t>(kT0 + 500'000'007));
  EXPECT_NE(ended[0].summary().find("job job-7 ended (every rank sent its final report)"),
            std::string::npos)
      << ended[0].summary();

  EXPECT_EQ(FlaggedSeries(analyzer), 0) << "the alert's series is gone at once";
  EXPECT_TRUE(analyzer.answers().Stragglers("job-7").empty());
  // Its communicator stays readable, marked ended, as long as the job is listed.
  const auto comms = analyzer.answers().Comms("job-7");
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].comm_name(), "world");
  EXPECT_EQ(comms[0].nranks(), 8);
  EXPECT_EQ(comms[0].health().rfind("ended", 0), 0u) << comms[0].health();
  const auto jobs = analyzer.answers().Jobs();
  const ncclwatch::v1::JobInfo* job = FindJob(jobs, "job-7");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->state(), "ended");
  EXPECT_EQ(job->ended_unix_ns(), static_cast<uint64_t>(kT0 + 500'000'007));
  EXPECT_EQ(job->end_reason(), "every rank sent its final report");
  EXPECT_EQ(job->ranks(), 8u);

  // What the detectors settle later (holds, expiries) does not end the finding again.
  for (int64_t t = kT0 + 1'000'000'000; t <= kT0 + 700'000'000'000; t += 10'000'000'000) {
    for (const Event& e : analyzer.Tick(t)) ADD_FAILURE() << "after the end: " << e.summary();
  }
}

TEST(JobLifecycleTest, AJobWhoseRanksAllFallSilentEndsAfterTheSilenceTime) {
  AnalyzerOptions options;
  options.job_end_silence_ns = 120'000'000'000;
  Analyzer analyzer(options);
  ASSERT_EQ(RunWithAStraggler(analyzer).size(), 1u);
  EXPECT_TRUE(analyzer.Tick(kT0 + 119'000'000'000).empty()) << "silent, not yet long enough";
  std::vector<Event> ended = analyzer.Tick(kT0 + 121'000'000'000);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].phase(), Event::END);
  EXPECT_EQ(ended[0].end_reason(), kEndJobEnded);
  const auto jobs = analyzer.answers().Jobs();
  ASSERT_NE(FindJob(jobs, "job-7"), nullptr);
  EXPECT_EQ(FindJob(jobs, "job-7")->end_reason(), "every rank silent for 120 s");
  EXPECT_EQ(FlaggedSeries(analyzer), 0);

  // The same job id reporting again (a restart) is running again, its findings fresh.
  analyzer.Ingest(Report(0, 8, 0, 10, -1), kT0 + 130'000'000'000);
  EXPECT_EQ(FindJob(analyzer.answers().Jobs(), "job-7")->state(), "running");
}

// What `ncclwatch stragglers` lists as slow nodes: the open NODE_STRAGGLER findings, per job.
TEST(JobLifecycleTest, OpenListsTheStartsOfOneKindUntilTheyEnd) {
  JobLifecycle lifecycle;
  const auto slow_node = [](const std::string& job, const std::string& node, uint64_t t) {
    Event e;
    e.set_kind(Event::NODE_STRAGGLER);
    e.set_phase(Event::START);
    e.set_time_unix_ns(t);
    e.mutable_node_straggler()->set_job_id(job);
    e.mutable_node_straggler()->set_node(node);
    return e;
  };
  Event hang;
  hang.set_kind(Event::HANG);
  hang.set_phase(Event::START);
  hang.mutable_hang()->set_job_id("j");
  std::vector<Event> events = {slow_node("j", "n2", 20), slow_node("j", "n1", 10),
                               slow_node("k", "n3", 30), hang};
  lifecycle.Filter(&events);
  std::vector<Event> open = lifecycle.Open(Event::NODE_STRAGGLER, "j");
  ASSERT_EQ(open.size(), 2u);
  EXPECT_EQ(open[0].node_straggler().node(), "n1");  // oldest first
  EXPECT_EQ(open[1].node_straggler().node(), "n2");
  EXPECT_EQ(lifecycle.Open(Event::NODE_STRAGGLER, "").size(), 3u);
  Event recovered = slow_node("j", "n1", 40);
  recovered.set_phase(Event::END);
  events = {recovered};
  lifecycle.Filter(&events);
  open = lifecycle.Open(Event::NODE_STRAGGLER, "j");
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].node_straggler().node(), "n2");
}

TEST(JobLifecycleTest, AFindingThatClearsEndsOnceAsFaultCleared) {
  JobLifecycle lifecycle;
  Event start;
  start.set_kind(Event::HANG);
  start.set_phase(Event::START);
  start.mutable_hang()->set_job_id("j");
  std::vector<Event> events = {start};
  lifecycle.Filter(&events);
  EXPECT_EQ(lifecycle.open_findings(), 1u);
  Event end = start;
  end.set_phase(Event::END);
  events = {end};
  lifecycle.Filter(&events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].end_reason(), kEndFaultCleared);
  EXPECT_EQ(lifecycle.open_findings(), 0u);

  // Ended with its job: the detector's own END later is dropped, another job's is not.
  events = {start};
  lifecycle.Filter(&events);
  ncclwatch::v1::JobInfo job;
  job.set_job_id("j");
  std::vector<Event> ended;
  lifecycle.End(job, "every rank silent for 120 s", 5, &ended);
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].end_reason(), kEndJobEnded);
  Event other = end;
  other.mutable_hang()->set_job_id("k");
  events = {end, other};
  lifecycle.Filter(&events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].hang().job_id(), "k");
  // Listed as ended for the TTL, then forgotten.
  EXPECT_TRUE(lifecycle.IsEnded("j"));
  lifecycle.Expire(5 + JobLifecycleOptions().ended_ttl_ns + 1);
  EXPECT_FALSE(lifecycle.IsEnded("j"));
}

TEST(JobLifecycleTest, EndedJobsKeepTheirCommunicatorsWithinABound) {
  JobLifecycleOptions options;
  options.max_ended_comms = 4;
  JobLifecycle lifecycle(options);
  auto comms = [](const std::string& job, int n, const std::string& health) {
    std::vector<ncclwatch::v1::CommInfo> out(n);
    for (int i = 0; i < n; ++i) {
      out[i].set_job_id(job);
      out[i].set_comm_hash(i + 1);
      out[i].set_health(health);
    }
    return out;
  };
  auto job = [](const std::string& id) {
    ncclwatch::v1::JobInfo info;
    info.set_job_id(id);
    return info;
  };
  std::vector<Event> events;
  lifecycle.End(job("a"), "done", 1000, &events, comms("a", 3, "straggler"));
  ASSERT_EQ(lifecycle.EndedComms("a").size(), 3u);
  EXPECT_EQ(lifecycle.EndedComms("a")[0].health(), "ended, was straggler");
  lifecycle.End(job("b"), "done", 2000, &events, comms("b", 3, "ok"));
  EXPECT_TRUE(lifecycle.EndedComms("a").empty()) << "the oldest job's go first";
  ASSERT_EQ(lifecycle.EndedComms("b").size(), 3u);
  EXPECT_EQ(lifecycle.EndedComms("b")[0].health(), "ended");
  EXPECT_TRUE(lifecycle.IsEnded("a")) << "the job itself stays listed";
  lifecycle.End(job("c"), "done", 3000, &events, comms("c", 5, "ok"));
  EXPECT_TRUE(lifecycle.EndedComms("c").empty()) << "alone beyond the bound: not kept";
  EXPECT_EQ(lifecycle.EndedComms("b").size(), 0u);
  lifecycle.End(job("d"), "done", 4000, &events, comms("d", 2, "ok"));
  lifecycle.Resume("d");  // running again: nothing kept of its end
  EXPECT_TRUE(lifecycle.EndedComms("d").empty());
  EXPECT_FALSE(lifecycle.IsEnded("d"));
  lifecycle.End(job("e"), "done", 5000, &events, comms("e", 4, "ok"));
  EXPECT_EQ(lifecycle.EndedComms("e").size(), 4u) << "the count went back with d's";
}

}  // namespace
}  // namespace ncclwatch::aggregator
