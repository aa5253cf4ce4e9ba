#include "aggregator/analysis/analyzer.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "aggregator/analysis/analyzer_test_util.h"
#include "aggregator/analysis/answers.h"
#include "gtest/gtest.h"
#include "proto/samples.h"

namespace ncclwatch::aggregator {
namespace {

const std::string* Label(const SeriesPoint& s, const std::string& name) {
  for (const auto& [k, v] : s.labels) {
    if (k == name) return &v;
  }
  return nullptr;
}

TEST(AnalyzerTest, FlagsTheSlowRankWithNodeAndGpuAndExportsSeries) {
  Analyzer analyzer;
  std::vector<ncclwatch::v1::Event> events;
  for (int interval = 0; interval < 3; ++interval) {
    for (int rank = 0; rank < 8; ++rank) {
      for (auto& e : analyzer.Ingest(Report(rank, 8, interval * 10, 10, 5), 1'000'000'000).events) {
        events.push_back(e);
      }
    }
  }
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), ncclwatch::v1::Event::STRAGGLER);
  EXPECT_EQ(events[0].phase(), ncclwatch::v1::Event::START);
  EXPECT_EQ(events[0].straggler().rank(), 5);
  EXPECT_EQ(events[0].straggler().node(), "node-b");
  EXPECT_EQ(events[0].straggler().cuda_device(), 1);
  EXPECT_NEAR(events[0].straggler().lateness_seconds(), 0.002, 1e-9);
  EXPECT_NE(events[0].summary().find("rank 5 (node node-b, GPU1)"), std::string::npos)
      << events[0].summary();

  auto stragglers = analyzer.answers().Stragglers("");
  ASSERT_EQ(stragglers.size(), 1u);
  EXPECT_EQ(stragglers[0].since_unix_ns(), 1'000'000'000u);
  EXPECT_TRUE(analyzer.answers().Stragglers("other-job").empty());

  int flagged = 0, bus = 0, p2p_bus = 0;
  for (const SeriesPoint& s : analyzer.Series()) {
    EXPECT_EQ(s.time_ms, 1000);
    EXPECT_EQ(*Label(s, "job_id"), "job-7");
    EXPECT_EQ(*Label(s, "comm_hash"), "0x000000000000feed");
    if (s.name == "ncclwatch_straggler" && s.value == 1) {
      ++flagged;
      EXPECT_EQ(*Label(s, "rank"), "5");
      EXPECT_EQ(*Label(s, "node"), "node-b");
      EXPECT_EQ(*Label(s, "gpu"), "GPU1");
    }
    if (s.name == "nccl_bus_bandwidth_gbs") {
      ++bus;
      EXPECT_NEAR(s.value, 20.0, 1e-9);  // geometric mean of the interval
      EXPECT_EQ(*Label(s, "algo_proto"), "RING_SIMPLE");
      EXPECT_EQ(*Label(s, "collective"), "AllReduce");
      EXPECT_EQ(*Label(s, "nranks"), "8");
      EXPECT_EQ(*Label(s, "n_nodes"), "2");
    }
    if (s.name == "nccl_p2p_bus_bandwidth_gbs") {
      ++p2p_bus;
      EXPECT_EQ(*Label(s, "p2p_operation"), "Send");
      EXPECT_EQ(Label(s, "algo_proto"), nullptr);
    }
  }
  EXPECT_EQ(flagged, 1);
  EXPECT_EQ(bus, 8);
  EXPECT_EQ(p2p_bus, 8);
  EXPECT_EQ(analyzer.counters().groups_completed, 30u);
}

TEST(AnalyzerTest, CommRanksCarryTheGpuUuidAndPodAsLastReported) {
  Analyzer analyzer;
  ncclwatch::v1::RankReport r0 = Report(0, 2, 0, 0, -1);
  auto* id = r0.mutable_identity();
  id->set_gpu_uuid("GPU-11111111-2222-3333-4444-555555555555");
  id->set_pod("trainer-0");
  id->set_pod_namespace("ml");
  id->set_container("pytorch");
  analyzer.Ingest(r0, 1'000'000'000);
  analyzer.Ingest(Report(1, 2, 0, 0, -1), 1'000'000'000);  // outside Kubernetes: none of them

  auto comms = analyzer.answers().Comms("job-7");
  ASSERT_EQ(comms.size(), 1u);
  ASSERT_EQ(comms[0].ranks_size(), 2);
  const auto& a = comms[0].ranks(0);
  EXPECT_EQ(a.node(), "node-a");
  EXPECT_EQ(a.gpu_uuid(), "GPU-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(a.pod(), "trainer-0");
  EXPECT_EQ(a.pod_namespace(), "ml");
  EXPECT_EQ(a.container(), "pytorch");
  const auto& b = comms[0].ranks(1);
  EXPECT_EQ(b.cuda_device(), 1);
  EXPECT_EQ(b.gpu_uuid(), "");
  EXPECT_EQ(b.pod(), "");
  EXPECT_EQ(b.pod_namespace(), "");

  // The pod moves with the rank's latest report (a restarted job lands in a new pod).
  id->set_pod("trainer-0-retry");
  analyzer.Ingest(r0, 2'000'000'000);
  EXPECT_EQ(analyzer.answers().Comms("job-7")[0].ranks(0).pod(), "trainer-0-retry");
}

// A copy of every series (/federate, remote-write) lets go of the analyzer between its parts, so
// ingest goes on meanwhile: a report taken between two parts (on this very thread, which would
// deadlock on a lock held for the whole copy) is not held up.
TEST(AnalyzerTest, ACopyOfEverySeriesLetsIngestInBetweenItsParts) {
  Analyzer analyzer;
  constexpr int kRanks = 1000;
  for (int rank = 0; rank < kRanks; ++rank) analyzer.Ingest(Report(rank, kRanks, 0, 0, -1), 1);
  int pauses = 0;
  analyzer.SetBetweenSeriesCopiesForTest([&] {
    analyzer.Ingest(Report(pauses, kRanks, 0, 0, -1), 2);
    ++pauses;
  });
  std::set<std::string> ranks;
  for (const SeriesPoint& s : analyzer.Series()) {
    if (s.name.rfind("nccl_", 0) == 0) ranks.insert(*Label(s, "rank"));
  }
  EXPECT_GE(pauses, 3);  // 1,000 ranks, a few hundred a part
  EXPECT_EQ(ranks.size(), static_cast<size_t>(kRanks));
}

TEST(AnalyzerTest, PluginDropsAreExportedPerRankAndKind) {
  Analyzer analyzer;
  ncclwatch::v1::RankReport r = Report(3, 8, 0, 0, -1);
  r.mutable_drops()->set_events_dropped(17);
  r.mutable_drops()->set_reports_dropped(2);
  r.mutable_drops()->set_bogus_timings(3);  // telemetry that lied: counted, shown
  analyzer.Ingest(r, 1'000'000'000);
  std::map<std::string, double> by_kind;
  for (const SeriesPoint& s : analyzer.Series()) {
    if (s.name != "ncclwatch_plugin_drops_total") continue;
    EXPECT_EQ(*Label(s, "rank"), "3");
    EXPECT_EQ(*Label(s, "job_id"), "job-7");
    by_kind[*Label(s, "kind")] = s.value;
  }
  EXPECT_EQ(by_kind, (std::map<std::string, double>{{"bogus_timings", 3},
                                                    {"channel_events_orphaned", 0},
                                                    {"events", 17},
                                                    {"records", 0},
                                                    {"reports", 2},
                                                    {"samples_capped", 0}}));
  // ... and summed per communicator for `ncclwatch comms`.
  const auto comms = analyzer.answers().Comms("job-7");
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0].bogus_timings(), 3u);
}

// Prometheus keeps the first value it sees under a timestamp: a detection series whose value
// changes must carry a new timestamp, even when the change comes from a Tick with no new report.
TEST(AnalyzerTest, DetectionSeriesChangeValueOnlyWithANewTimestamp) {
  // A lateness is exported while it is at least the straggler threshold: 1 ns keeps rank 5's in
  // view as it falls.
  AnalyzerOptions options;
  options.straggler.threshold_ns = 1;
  Analyzer analyzer(options);
  auto lateness = [&]() -> std::pair<double, int64_t> {
    for (const SeriesPoint& s : analyzer.Series(/*detection_only=*/true)) {
      if (s.name == "ncclwatch_rank_lateness_seconds" && *Label(s, "rank") == "5") {
        return {s.value, s.time_ms};
      }
    }
    return {-1, -1};
  };
  // Round 1 at 1 s: rank 5 is late in every collective.
  for (int rank = 0; rank < 8; ++rank) analyzer.Ingest(Report(rank, 8, 0, 32, 5), 1'000'000'000);
  const auto first = lateness();
  ASSERT_GT(first.first, 0);
  // Round 2: rank 5 reports first (1.5 s), on time this time; the others complete its
  // collectives at 2 s. Rank 5's lateness changes at 2 s, with no report of its own then.
  analyzer.Ingest(Report(5, 8, 32, 32, -1), 1'500'000'000);
  EXPECT_EQ(lateness(), (std::pair<double, int64_t>{first.first, 1500}));
  for (int rank = 0; rank < 8; ++rank) {
    if (rank != 5) analyzer.Ingest(Report(rank, 8, 32, 32, -1), 2'000'000'000);
  }
  const auto second = lateness();
  EXPECT_NE(second.first, first.first);
  EXPECT_EQ(second.second, 2000);  // a new value under a new timestamp
}

TEST(AnalyzerTest, JobsCommunicatorsAndSeriesBeyondTheirCapsAreCountedNotKept) {
  AnalyzerOptions opts;
  opts.max_jobs = 2;
  opts.max_comms_per_job = 2;
  Analyzer analyzer(opts);
  auto report = [](const std::string& job, uint64_t comm) {
    ncclwatch::v1::RankReport r = Report(0, 2, 0, 0, -1);
    r.mutable_identity()->set_job_id(job);
    r.mutable_identity()->set_comm_hash(comm);
    return r;
  };
  analyzer.Ingest(report("a", 1), 1'000'000'000);
  analyzer.Ingest(report("a", 2), 1'000'000'000);
  analyzer.Ingest(report("a", 3), 1'000'000'000);  // a third communicator of job a
  analyzer.Ingest(report("b", 1), 1'000'000'000);
  analyzer.Ingest(report("c", 1), 1'000'000'000);  // a third job
  analyzer.Ingest(report("a", 1), 2'000'000'000);  // known ones keep being analysed
  EXPECT_EQ(analyzer.answers().Comms("a").size(), 2u);
  EXPECT_EQ(analyzer.answers().Comms("b").size(), 1u);
  EXPECT_TRUE(analyzer.answers().Comms("c").empty());
  EXPECT_EQ(analyzer.counters().capped_comms, 1u);
  EXPECT_EQ(analyzer.counters().capped_jobs, 1u);
  // Once job b is forgotten (silent past the TTL), job c has room.
  analyzer.Tick(2'000'000'000 + opts.series_ttl_ns);
  analyzer.Ingest(report("c", 1), 2'000'000'000 + opts.series_ttl_ns);
  EXPECT_EQ(analyzer.answers().Comms("c").size(), 1u);

  AnalyzerOptions few;
  few.max_series = 3;
  Analyzer capped(few);
  capped.Ingest(Report(0, 2, 0, 0, -1), 1'000'000'000);  // carries more than 3 stats series
  size_t stats_series = 0;
  for (const SeriesPoint& s : capped.Series()) stats_series += s.name.rfind("nccl_", 0) == 0;
  EXPECT_EQ(stats_series, 3u);
  EXPECT_GT(capped.counters().capped_series, 0u);
}

// A report of rank 0 of a 2-rank communicator `comm` of `job`, without statistics.
ncclwatch::v1::RankReport CommReport(const std::string& job, uint64_t comm) {
  ncclwatch::v1::RankReport r;
  auto* id = r.mutable_identity();
  id->set_job_id(job);
  id->set_comm_hash(comm);
  id->set_comm_name("world");
  id->set_rank(0);
  id->set_nranks(2);
  id->set_n_nodes(1);
  return r;
}

TEST(AnalyzerTest, OneSourceFillsItsOwnShareOfJobsNotTheWholeAggregator) {
  AnalyzerOptions opts;
  opts.max_jobs_per_agent = 2;
  opts.max_comms_per_agent = 3;
  Analyzer analyzer(opts);
  const int64_t t = 1'000'000'000;
  analyzer.Ingest(CommReport("a1", 1), t, "ip:10.0.0.1");
  analyzer.Ingest(CommReport("a2", 1), t, "ip:10.0.0.1");
  analyzer.Ingest(CommReport("a3", 1), t, "ip:10.0.0.1");  // a third job of this source
  EXPECT_TRUE(analyzer.answers().Comms("a3").empty());
  EXPECT_EQ(analyzer.counters().capped_agent_jobs, 1u);
  // Another node's jobs, and its ranks in the first source's jobs, are analysed.
  analyzer.Ingest(CommReport("b1", 1), t, "ip:10.0.0.2");
  analyzer.Ingest(CommReport("a1", 2), t, "ip:10.0.0.2");
  EXPECT_EQ(analyzer.answers().Comms("b1").size(), 1u);
  EXPECT_EQ(analyzer.answers().Comms("a1").size(), 2u);
  // Communicators: the first source has 2 of its 3, one more fits, the next does not.
  analyzer.Ingest(CommReport("a2", 2), t, "ip:10.0.0.1");
  analyzer.Ingest(CommReport("a2", 3), t, "ip:10.0.0.1");
  EXPECT_EQ(analyzer.answers().Comms("a2").size(), 2u);
  EXPECT_EQ(analyzer.counters().capped_agent_comms, 1u);
  // Known communicators keep being analysed, whoever sends their reports, capped or not.
  analyzer.Ingest(CommReport("a2", 1), t + 1, "ip:10.0.0.1");
  analyzer.Ingest(CommReport("a2", 1), t + 1, "ip:10.0.0.3");
  EXPECT_EQ(analyzer.counters().capped_agent_jobs, 1u);
  EXPECT_EQ(analyzer.counters().capped_agent_comms, 1u);
  // Once its jobs are forgotten (silent past the TTL), the source has room again.
  const int64_t later = t + opts.series_ttl_ns + 1;
  analyzer.Tick(later);
  analyzer.Ingest(CommReport("a3", 1), later, "ip:10.0.0.1");
  EXPECT_EQ(analyzer.answers().Comms("a3").size(), 1u);
}

TEST(AnalyzerTest, SilentSeriesExpire) {
  AnalyzerOptions opts;
  opts.series_ttl_ns = 1000;
  Analyzer analyzer(opts);
  analyzer.Ingest(Report(0, 2, 0, 0, -1), 0);
  EXPECT_FALSE(analyzer.Series().empty());
  analyzer.Ingest(Report(1, 2, 0, 0, -1), 0);
  analyzer.Tick(500);
  EXPECT_FALSE(analyzer.Series().empty());
  analyzer.Tick(5000);
  EXPECT_TRUE(analyzer.Series().empty());
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

TEST(AnalyzerTest, ANodeWhoseRanksAreAllSlowIsFlaggedAsANode) {
  Analyzer analyzer;
  std::vector<ncclwatch::v1::Event> events;
  const std::set<int> node_b = {4, 5, 6, 7};
  for (int interval = 0; interval < 3; ++interval) {
    for (int r = 0; r < 8; ++r) {
      for (auto& e : analyzer.Ingest(Report(r, 8, interval * 8, 8, node_b), 0).events) {
        events.push_back(e);
      }
    }
  }
  int rank_starts = 0, node_starts = 0;
  for (const auto& e : events) {
    if (e.kind() == ncclwatch::v1::Event::STRAGGLER) ++rank_starts;
    if (e.kind() == ncclwatch::v1::Event::NODE_STRAGGLER) {
      ++node_starts;
      EXPECT_EQ(e.node_straggler().node(), "node-b");
      EXPECT_EQ(e.node_straggler().ranks_size(), 4);
    }
  }
  EXPECT_EQ(rank_starts, 4);
  EXPECT_EQ(node_starts, 1);
  // Only the flagged node has a series (detection_series.h).
  int node_series = 0;
  for (const auto& s : analyzer.Series()) {
    if (s.name != "ncclwatch_node_straggler") continue;
    ++node_series;
    EXPECT_EQ(*Label(s, "node"), "node-b");
    EXPECT_EQ(s.value, 1.0);
  }
  EXPECT_EQ(node_series, 1);
}

TEST(AnalyzerTest, OneSlowRankDoesNotMakeItsNodeSlow) {
  Analyzer analyzer;
  for (int interval = 0; interval < 3; ++interval) {
    for (int r = 0; r < 8; ++r) {
      for (auto& e : analyzer.Ingest(Report(r, 8, interval * 8, 8, 5), 0).events) {
        EXPECT_NE(e.kind(), ncclwatch::v1::Event::NODE_STRAGGLER) << e.summary();
      }
    }
  }
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

TEST(AnalyzerTest, OwnTimesFromTheSamplesFindTheGpuThatIsSlowItself) {
  // Eight ranks on two nodes; every rank starts each AllReduce at the same moment, but rank 5
  // spent 3 ms more on its own work before it (the ranks it delayed would show normal own times).
  Analyzer analyzer;
  for (int interval = 0; interval < 3; ++interval) {
    for (int rank = 0; rank < 8; ++rank) {
      ncclwatch::v1::RankReport r = testing::ReportFrom({.job_id = "job-7",
                                                         .host = rank < 4 ? "host-a" : "host-b",
                                                         .pid = static_cast<uint32_t>(100 + rank),
                                                         .cuda_device = rank % 4,
                                                         .comm_hash = 0xfeed,
                                                         .rank = rank,
                                                         .nranks = 8,
                                                         .n_nodes = 2,
                                                         .node = rank < 4 ? "node-a" : "node-b"});
      SampleColumnWriter writer(&r);
      for (int i = 0; i < 10; ++i) {
        const int64_t own = 5'000'000 + (rank == 5 ? 3'000'000 : rank * 10'000);
        // Ranks 4 and 5 arrive 3 ms late; only rank 5 because of its own work (rank 4 waited for
        // it in a collective of another communicator).
        const uint64_t start = 1'000'000 + (rank == 4 || rank == 5 ? 3'000'000 : 0);
        writer.Add("AllReduce", "RING_SIMPLE", 1 << 25, 4,
                   Sample{static_cast<uint64_t>(interval * 10 + i), start, 9'000'000 - start, own});
      }
      analyzer.Ingest(r, 1'000'000'000);
    }
  }
  const std::vector<SlowProcess> slow = analyzer.answers().SlowProcesses("job-7");
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0].process, (ProcessKey{"job-7", "host-b", 105, 1}));
  EXPECT_EQ(slow[0].node, "node-b");
  EXPECT_EQ(slow[0].rank, 5);
  EXPECT_EQ(slow[0].comm, (CommKey{"job-7", 0xfeed}));
  EXPECT_NEAR(slow[0].excess_ns, 3'000'000 - 30'000, 1);  // over the fastest on the other node
  EXPECT_TRUE(analyzer.answers().SlowProcesses("other-job").empty());

  // Found at 1 s, but a finding (event, answer, series) only once it held for the confirmation
  // time (0.5 s).
  EXPECT_TRUE(analyzer.answers().RootCauses("").empty());
  const std::vector<ncclwatch::v1::Event> events = analyzer.Tick(2'000'000'000);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind(), ncclwatch::v1::Event::STRAGGLER);
  EXPECT_EQ(events[0].phase(), ncclwatch::v1::Event::START);
  EXPECT_EQ(events[0].root_cause().pid(), 105u);
  EXPECT_EQ(events[0].straggler().rank(), 5);
  EXPECT_EQ(events[0].straggler().comm_hash(), 0xfeedu);
  ASSERT_EQ(events[0].root_cause().consequences_size(), 1);
  EXPECT_EQ(events[0].root_cause().consequences(0).rank(), 4);
  EXPECT_NE(events[0].summary().find("GPU1 on node node-b (host host-b, pid 105) of job job-7 is "
                                     "slow itself"),
            std::string::npos)
      << events[0].summary();

  // As the Query API answers it: rank 5's GPU, with rank 4's lateness attached to it.
  const std::vector<ncclwatch::v1::RootCauseInfo> roots = analyzer.answers().RootCauses("");
  ASSERT_EQ(roots.size(), 1u);
  EXPECT_EQ(roots[0].host(), "host-b");
  EXPECT_EQ(roots[0].pid(), 105u);
  EXPECT_EQ(roots[0].rank(), 5);
  EXPECT_EQ(roots[0].collective(), "AllReduce");
  EXPECT_EQ(roots[0].bytes(), 1u << 25);
  EXPECT_NEAR(roots[0].own_excess_seconds(), 0.00297, 1e-9);
  EXPECT_EQ(roots[0].since_unix_ns(), 1'000'000'000u);
  ASSERT_EQ(roots[0].consequences_size(), 1);
  EXPECT_EQ(roots[0].consequences(0).rank(), 4);
  EXPECT_NEAR(roots[0].consequences(0).lateness_seconds(), 0.003, 1e-6);
  // With own times, late ranks are consequences, not stragglers of their own.
  EXPECT_TRUE(analyzer.answers().Stragglers("job-7").empty());
  // The paging series: rank 5 alone; its lateness and rank 4's stay visible.
  std::set<int> flagged;
  std::set<int> late;
  for (const auto& s : analyzer.Series(true)) {
    if (s.name == "ncclwatch_straggler" && s.value == 1)
      flagged.insert(std::stoi(*Label(s, "rank")));
    if (s.name == "ncclwatch_rank_lateness_seconds" && s.value > 0.002) {
      late.insert(std::stoi(*Label(s, "rank")));
    }
  }
  EXPECT_EQ(flagged, (std::set<int>{5}));
  EXPECT_EQ(late, (std::set<int>{4, 5}));
}

}  // namespace
}  // namespace ncclwatch::aggregator

namespace ncclwatch::aggregator {
namespace {

TEST(AnalyzerTest, AProcessThatStopsIsSilentOnceWhateverItsCommunicators) {
  AnalyzerOptions options;
  options.hang.silent_after_ns = 2'000'000'000;
  Analyzer analyzer(options);
  // Two processes, each a rank of communicators "tp" and "dp"; process 1 stops reporting at 1 s
  // and comes back at 8 s.
  auto report = [](uint64_t hash, const char* name, int rank) {
    return testing::ReportFrom({.job_id = "job-s",
                                .host = "host-" + std::to_string(rank),
                                .pid = static_cast<uint32_t>(100 + rank),
                                .comm_hash = hash,
                                .comm_name = name,
                                .rank = rank,
                                .nranks = 2,
                                .n_nodes = 2,
                                .node = "node-" + std::to_string(rank)});
  };
  std::map<ncclwatch::v1::Event::Phase, int> silent;
  for (int64_t t = 0; t <= 12'000'000'000; t += 500'000'000) {
    for (int rank = 0; rank < 2; ++rank) {
      if (rank == 1 && t > 1'000'000'000 && t < 8'000'000'000) continue;
      analyzer.Ingest(report(0x71, "tp", rank), t);
      analyzer.Ingest(report(0xd1, "dp", rank), t);
    }
    for (const auto& e : analyzer.Tick(t)) {
      ASSERT_EQ(e.kind(), ncclwatch::v1::Event::RANK_SILENT) << e.summary();
      EXPECT_EQ(e.silent().rank().rank(), 1);
      ++silent[e.phase()];
    }
  }
  EXPECT_EQ(silent[ncclwatch::v1::Event::START], 1);
  EXPECT_EQ(silent[ncclwatch::v1::Event::END], 1);
}

TEST(AnalyzerTest, ANodeWhoseProcessesAllStopIsOneNodeFindingBesideItsSilentRanks) {
  using ncclwatch::v1::Event;
  AnalyzerOptions options;
  options.hang.silent_after_ns = 2'000'000'000;
  Analyzer analyzer(options);
  // Two nodes of two GPUs: "dp" over all four processes, "tp-a" and "tp-b" within each node.
  // Node b's processes stop reporting at 1 s (its node went down) and come back at 8 s.
  auto report = [](uint64_t hash, const char* name, int rank, int nranks, int process) {
    return testing::ReportFrom({.job_id = "job-n",
                                .host = process < 2 ? "host-a" : "host-b",
                                .pid = static_cast<uint32_t>(100 + process),
                                .cuda_device = process % 2,
                                .comm_hash = hash,
                                .comm_name = name,
                                .rank = rank,
                                .nranks = nranks,
                                .n_nodes = nranks == 4 ? 2 : 1,
                                .node = process < 2 ? "node-a" : "node-b"});
  };
  std::map<Event::Phase, int> node_events;
  std::map<Event::Phase, int> rank_events;
  bool listed = false;
  bool exported = false;
  for (int64_t t = 0; t <= 12'000'000'000; t += 500'000'000) {
    for (int p = 0; p < 4; ++p) {
      if (p >= 2 && t > 1'000'000'000 && t < 8'000'000'000) continue;
      analyzer.Ingest(report(0xd1, "dp", p, 4, p), t);
      analyzer.Ingest(report(p < 2 ? 0x7a : 0x7b, p < 2 ? "tp-a" : "tp-b", p % 2, 2, p), t);
    }
    for (const auto& e : analyzer.Tick(t)) {
      if (e.kind() == Event::RANK_SILENT) {
        EXPECT_EQ(e.silent().rank().node(), "node-b") << e.summary();
        ++rank_events[e.phase()];
        continue;
      }
      ASSERT_EQ(e.kind(), Event::NODE_SILENT) << e.summary();
      EXPECT_EQ(e.job_id(), "job-n");
      EXPECT_EQ(e.node_silent().node(), "node-b");
      EXPECT_EQ(e.node_silent().processes(), 2u);
      if (e.phase() == Event::START) {
        EXPECT_NE(e.summary().find("NODE SILENT: node node-b of job job-n: all 2 of its GPUs "
                                   "stopped reporting"),
                  std::string::npos)
            << e.summary();
      }
      ++node_events[e.phase()];
    }
    // While it is silent: the Query API lists it and its series is exported.
    const auto hangs = analyzer.answers().Hangs("job-n", t);
    const bool silent_now = node_events[Event::START] > node_events[Event::END];
    ASSERT_EQ(hangs.silent_nodes_size(), silent_now ? 1 : 0) << "at " << t;
    if (silent_now) {
      EXPECT_EQ(hangs.silent_nodes(0).node(), "node-b");
      listed = true;
    }
    int series = 0;
    for (const SeriesPoint& sp : analyzer.Series(/*detection_only=*/true)) {
      if (sp.name != "ncclwatch_node_silent") continue;
      ++series;
      EXPECT_EQ(*Label(sp, "node"), "node-b");
      EXPECT_EQ(*Label(sp, "job_id"), "job-n");
    }
    EXPECT_EQ(series, silent_now ? 1 : 0) << "at " << t;
    exported |= series > 0;
  }
  EXPECT_TRUE(listed);
  EXPECT_TRUE(exported);
  EXPECT_EQ(node_events[Event::START], 1);
  EXPECT_EQ(node_events[Event::END], 1);
  // Each of the node's processes is still its own silent-rank finding.
  EXPECT_EQ(rank_events[Event::START], 2);
  EXPECT_EQ(rank_events[Event::END], 2);
}

// Ranks that never report (the coverage finding) are exported as one series per job, their count,
// while the gap lasts: what NcclwatchRanksNeverReport alerts on.
TEST(AnalyzerTest, RanksThatNeverReportAreCountedInOneSeriesPerJob) {
  using ncclwatch::v1::Event;
  Analyzer analyzer;
  auto unreported = [&]() -> std::optional<double> {
    std::optional<double> value;
    for (const SeriesPoint& sp : analyzer.Series(/*detection_only=*/true)) {
      if (sp.name != "ncclwatch_job_ranks_unreported") continue;
      EXPECT_FALSE(value.has_value()) << "one series per job";
      EXPECT_EQ(*Label(sp, "job_id"), "job-7");
      value = sp.value;
    }
    return value;
  };
  std::map<Event::Phase, int> coverage;
  // Ranks 0..4 of 8 report from 0 s; ranks 5..7 only from 10 s.
  for (int64_t t = 0; t <= 14'000'000'000; t += 500'000'000) {
    for (int r = 0; r < 8; ++r) {
      if (r >= 5 && t < 10'000'000'000) continue;
      analyzer.Ingest(Report(r, 8, 0, 0, std::set<int>{}), t);
    }
    for (const auto& e : analyzer.Tick(t)) {
      if (e.kind() == Event::RANKS_UNREPORTED) ++coverage[e.phase()];
    }
    const std::optional<double> value = unreported();
    if (coverage[Event::START] > coverage[Event::END]) {
      ASSERT_TRUE(value.has_value()) << "at " << t;
      EXPECT_EQ(*value, 3) << "at " << t;
    } else {
      EXPECT_FALSE(value.has_value()) << "at " << t;
    }
  }
  EXPECT_EQ(coverage[Event::START], 1);
  EXPECT_EQ(coverage[Event::END], 1);
}

}  // namespace
}  // namespace ncclwatch::aggregator
