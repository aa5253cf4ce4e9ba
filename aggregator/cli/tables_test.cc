// Golden text of every answer the CLI prints: scripts and the end-to-end tests read these columns
// and sentences, so any change here is a change of the CLI's output. Each golden string was
// checked against the output of the single-file CLI this one replaced. Times are UTC (TZ=UTC).
#include "aggregator/cli/tables.h"

#include <string>

#include "aggregator/cli/answers_test_util.h"
#include "aggregator/detect/hang.h"
#include "gtest/gtest.h"

namespace ncclwatch::cli {
namespace {

class TablesTest : public ::testing::Test {
 protected:
  void SetUp() override { UseUtc(); }
};

TEST_F(TablesTest, ClockTextIsDatedAndZoned) {
  EXPECT_EQ(ClockText(0), "1970-01-01 00:00:00 UTC");
  EXPECT_EQ(ClockText(3723'999'999'999), "1970-01-01 01:02:03 UTC");
  EXPECT_EQ(ClockText(3723'004'999'999, /*millis=*/true), "1970-01-01 01:02:03.004 UTC");
  EXPECT_EQ(ClockText(1795044979'000'000'000), "2026-11-18 23:36:19 UTC");
}

// A long job id widens its column instead of pushing the others out of line.
TEST_F(TablesTest, ColumnsFitLongIds) {
  ncclwatch::v1::ListJobsResponse jobs = OneJob();
  *jobs.add_jobs() = jobs.jobs(0);
  jobs.mutable_jobs(1)->set_job_id("pretrain-llama-405b-run-20261124-a1b2c3d4");
  const std::string text = JobsText(jobs);
  std::vector<std::string> lines;
  for (size_t at = 0, next; (next = text.find('\n', at)) != std::string::npos; at = next + 1) {
    lines.push_back(text.substr(at, next - at));
  }
  ASSERT_EQ(lines.size(), 3u) << text;
  // STATE starts at the same column on every line, one space after the longest id.
  const size_t state = lines[0].find("STATE");
  EXPECT_EQ(state, std::string("pretrain-llama-405b-run-20261124-a1b2c3d4 ").size()) << text;
  EXPECT_EQ(lines[1].find("running"), state) << text;
  EXPECT_EQ(lines[2].find("running"), state) << text;
  EXPECT_EQ(lines[1].size(), lines[2].size()) << text;
}

TEST_F(TablesTest, RankTextNamesNodeGpuAndPodWhenKnown) {
  ncclwatch::v1::RankRef r;
  r.set_rank(3);
  r.set_node("node-a");
  r.set_cuda_device(1);
  EXPECT_EQ(RankText(r), "rank 3 (node node-a, GPU1)");
  r.set_pod("trainer-0");
  EXPECT_EQ(RankText(r), "rank 3 (node node-a, GPU1, pod -/trainer-0)");
  r.set_pod_namespace("ml");
  r.set_container("worker");
  EXPECT_EQ(RankText(r), "rank 3 (node node-a, GPU1, pod ml/trainer-0, container worker)");
  r.clear_node();
  r.set_cuda_device(-1);
  r.clear_pod();
  EXPECT_EQ(RankText(r), "rank 3 (node unknown, unknown)");
}

TEST_F(TablesTest, EmptyAnswersSaySoInOneLine) {
  EXPECT_EQ(StragglersText({}), "No GPU is slow itself and no rank is flagged as a straggler.\n");
  EXPECT_EQ(HangsText({}), "No hung collective and no silent rank.\n");
  EXPECT_EQ(DegradedText({}), "No degraded communicator.\n");
  EXPECT_EQ(JobsText({}), "No job has reported yet.\n");
  EXPECT_EQ(CommsText({}), "No communicator has reported yet.\n");
  EXPECT_EQ(QueryText({}, "up{job=\"x\"}", 600),
            "No stored point matches up{job=\"x\"} in the last 600 s.\n");
}

TEST_F(TablesTest, Stragglers) {
  EXPECT_EQ(StragglersText(TwoStragglers()),
            "JOB   GLOBAL-RANK COMMUNICATOR             RANK NODE    GPU     LATENESS   EXCESS "
            "PEER-Z VS-OWN ARRIVED-LAST SINCE\n"
            "job-a          13 world 0x00000000000000ab    5 node-1  GPU1    12.34 ms 10.00 ms "
            "   4.5   3.0x          75% 1970-01-01 01:02:03 UTC\n"
            "job-a           - - 0x00000000000000cd        2 unknown unknown  2.00 ms  1.50 ms "
            "   3.2   1.2x          50% 1970-01-01 00:00:00 UTC\n"
            "\n"
            "Finding: rank 5 (global rank 13, node node-1, GPU1) of communicator world "
            "0x00000000000000ab in job "
            "job-a is slow: median lateness 12.34 ms (10.00 ms beyond its punctual peers, z 4.5, "
            "3.0x its own usual; kernel durations) over 50 collectives, arrived last in 75%.\n"
            "Finding: rank 2 (node unknown, unknown) of communicator 0x00000000000000cd in job "
            "job-a is slow: median lateness 2.00 ms (1.50 ms beyond its punctual peers, z 3.2, "
            "1.2x its own usual; kernel durations) over 20 collectives, arrived last in 50%.\n");
}

TEST_F(TablesTest, RootCausesComeFirstWithTheirConsequencesUnderThem) {
  ncclwatch::v1::ListStragglersResponse r = TwoStragglers();
  auto* root = r.add_root_causes();
  root->set_job_id("job-a");
  root->set_host("host-1");
  root->set_pid(4242);
  root->set_cuda_device(1);
  root->set_node("node-1");
  root->set_pod("trainer-1");
  root->set_pod_namespace("ml");
  root->set_comm_name("tp0");
  root->set_comm_hash(0xef);
  root->set_rank(1);
  root->set_global_rank(13);
  root->set_collective("AllReduce");
  root->set_bytes(16 << 20);
  root->set_own_excess_seconds(0.0031);
  root->set_own_time_seconds(0.002);
  root->set_since_unix_ns(3723 * kSecond);
  *root->add_consequences() = r.stragglers(1);
  const std::string text = StragglersText(r);
  const std::string first =
      "Root cause: rank 13, GPU1 on node node-1 (host host-1, pid 4242, pod ml/trainer-1) of job "
      "job-a is slow itself: before AllReduce 16-17MB in communicator tp0 (its rank 1) it spends "
      "3.10 ms more on its own work than peers doing the same work (2.00 ms), since 1970-01-01 "
      "01:02:03 UTC.\n"
      "  consequence: rank 2 of 0x00000000000000cd on node unknown (unknown) arrives 2.00 ms "
      "late\n\n";
  EXPECT_EQ(text.substr(0, first.size()), first);
  EXPECT_EQ(text.substr(first.size()), StragglersText(TwoStragglers()));
  r.clear_stragglers();
  EXPECT_EQ(StragglersText(r), first.substr(0, first.size() - 1));
}

TEST_F(TablesTest, SlowNodesAreFindingsOfTheirOwn) {
  ncclwatch::v1::ListStragglersResponse r;
  auto* by_gpus = r.add_slow_nodes();
  by_gpus->set_job_id("job-a");
  by_gpus->set_node("node-3");
  by_gpus->add_gpus(0);
  by_gpus->add_gpus(2);
  auto* by_ranks = r.add_slow_nodes();
  by_ranks->set_job_id("job-a");
  by_ranks->set_node("node-4");
  by_ranks->set_comm_name("dp0");
  by_ranks->set_comm_hash(0x12);
  by_ranks->add_ranks(8);
  by_ranks->add_ranks(9);
  EXPECT_EQ(
      StragglersText(r),
      "Finding: node node-3 of job job-a: 2 of its GPUs (GPU0, GPU2) are each slow themselves; "
      "suspect the node (cooling, power, a noisy neighbour, the host) rather than one GPU.\n"
      "Finding: node node-4 of job job-a: all 2 ranks communicator dp0 0x0000000000000012 has on "
      "it (8,9) are late to the collectives; suspect the node rather than one GPU.\n");
  // Paged with no origin found (own times reported, no GPU slow itself): the finding says so.
  by_ranks->set_origin_not_found(true);
  EXPECT_NE(StragglersText(r).find(
                "suspect the node rather than one GPU; origin not found: no GPU of the job is "
                "slow by its own compute time"),
            std::string::npos)
      << StragglersText(r);
}

TEST_F(TablesTest, HangsWithP2pPodsUnknownNodeAndSilentRank) {
  EXPECT_EQ(HangsText(ThreeHangsAndASilentRank()),
            "JOB   COMMUNICATOR             COLLECTIVE SEQ KIND             AGE SINCE          "
            "         MISSING RANKS\n"
            "job-h world 0x0000000000000001 AllReduce   12 missing-ranks 42.2 s 1970-01-01 "
            "01:00:00 UTC 2,3\n"
            "job-h pairs 0x0000000000000002 Send/Recv    - missing-ranks  5.5 s 1970-01-01 "
            "01:00:01 UTC 1\n"
            "job-h - 0x0000000000000003     Broadcast    7 no-progress    7.0 s 1970-01-01 "
            "01:00:02 UTC -\n"
            "\n"
            "JOB   COMMUNICATOR             RANK NODE   GPU  LAST REPORT\n"
            "job-h world 0x0000000000000001    6 node-2 GPU6 1970-01-01 00:59:50 UTC\n"
            "\n"
            "Finding: AllReduce #12 of communicator world 0x0000000000000001 in job job-h has made "
            "no progress for 42.2 s; 2 of 4 ranks never reached it: rank 2 (node node-0, GPU2, "
            "pod ml/trainer-0, container worker), rank 3 (node unknown, unknown).\n"
            "Finding: Send/Recv of communicator pairs 0x0000000000000002 in job job-h has made no "
            "progress for 5.5 s; 1 rank never reached it: rank 1 (node node-1, GPU0, pod -/p).\n"
            "Finding: Broadcast #7 of communicator 0x0000000000000003 in job job-h has made no "
            "progress for 7.0 s; all 8 ranks reached it and none finished: suspect the network "
            "or NVLink fabric.\n"
            "Finding: rank 6 (node node-2, GPU6) of communicator world 0x0000000000000001 in job "
            "job-h stopped reporting while the other ranks carry on (process dead or stuck outside "
            "NCCL?); last report at 1970-01-01 00:59:50 UTC.\n");
}

TEST_F(TablesTest, AHangsConsequencesFollowItsFinding) {
  ncclwatch::v1::ListHangsResponse r;
  auto* origin = r.add_hangs();
  origin->set_job_id("job-h");
  origin->set_comm_name("dp1");
  origin->set_comm_hash(0x11);
  origin->set_nranks(2);
  origin->set_op("AllGather");
  origin->set_seq(80);
  origin->set_kind(ncclwatch::v1::HangInfo::NO_PROGRESS);
  origin->set_arrived(2);
  origin->set_age_seconds(3.0);
  origin->set_since_unix_ns(3600 * kSecond);
  auto* queued = origin->add_consequences();
  queued->set_comm_name("tp0");
  queued->set_op("AllReduce");
  queued->set_seq(1296);
  queued->set_kind(ncclwatch::v1::HangInfo::NO_PROGRESS);
  auto* waiting = origin->add_consequences();
  waiting->set_comm_name("pp1");
  waiting->set_op(ncclwatch::aggregator::kP2pHangOp);
  waiting->set_kind(ncclwatch::v1::HangInfo::MISSING_RANKS);
  waiting->set_nranks(2);
  waiting->add_missing()->set_rank(0);
  const std::string text = HangsText(r);
  const std::string findings =
      "Finding: AllGather #80 of communicator dp1 0x0000000000000011 in job job-h has made no "
      "progress for 3.0 s; all 2 ranks reached it and none finished: suspect the network or "
      "NVLink fabric.\n"
      "  consequence: AllReduce #1296 of communicator tp0 is stuck behind it (queued on the same "
      "GPUs)\n"
      "  consequence: Send/Recv of communicator pp1 is stuck behind it (waiting for ranks stuck in "
      "it: 1 of 2)\n";
  ASSERT_GE(text.size(), findings.size());
  EXPECT_EQ(text.substr(text.size() - findings.size()), findings) << text;
  // The table lists the origin only: tp0 appears once, in its consequence line.
  EXPECT_EQ(text.find("tp0"), text.rfind("tp0")) << text;
  EXPECT_NE(text.find("dp1 0x0000000000000011"), std::string::npos) << text;
}

TEST_F(TablesTest, HangsWithOnlyASilentRankHaveNoHangTable) {
  ncclwatch::v1::ListHangsResponse silent_only = ThreeHangsAndASilentRank();
  silent_only.clear_hangs();
  EXPECT_EQ(HangsText(silent_only),
            "JOB   COMMUNICATOR             RANK NODE   GPU  LAST REPORT\n"
            "job-h world 0x0000000000000001    6 node-2 GPU6 1970-01-01 00:59:50 UTC\n"
            "\n"
            "Finding: rank 6 (node node-2, GPU6) of communicator world 0x0000000000000001 in job "
            "job-h stopped reporting while the other ranks carry on (process dead or stuck outside "
            "NCCL?); last report at 1970-01-01 00:59:50 UTC.\n");
}

TEST_F(TablesTest, ASilentNodeIsOneFindingBeforeItsSilentRanks) {
  ncclwatch::v1::ListHangsResponse r = ThreeHangsAndASilentRank();
  r.clear_hangs();
  auto* n = r.add_silent_nodes();
  n->set_job_id("job-h");
  n->set_node("node-2");
  n->set_processes(8);
  n->set_since_unix_ns(3591 * kSecond);
  const std::string text = HangsText(r);
  const std::string node_finding =
      "Finding: node node-2 of job job-h: all 8 of its GPUs stopped reporting while the job's "
      "other nodes carry on: suspect the node itself (down, rebooting, cut off from the "
      "aggregator) or its ncclwatch agent rather than the GPUs, since 1970-01-01 00:59:51 UTC.\n";
  const size_t at = text.find(node_finding);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_LT(at, text.find("Finding: rank 6 (node node-2, GPU6)")) << text;
}

TEST_F(TablesTest, DegradedWithAndWithoutASuspectNode) {
  const std::string table =
      "JOB   COMMUNICATOR             CLASS  COLLECTIVE SIZE  BUS GB/s BASELINE NODES\n"
      "job-d world 0x0000000000000010 hybrid AllReduce  1-4MB     12.3     45.6 n1,n2\n"
      "\n";
  ncclwatch::v1::ListDegradedResponse degraded = DegradedWithSuspect();
  EXPECT_EQ(DegradedText(degraded),
            table +
                "Finding: the network of node n2 is the common factor of the 3 degraded "
                "multi-node communicators of job job-d, while its NVLink-only ones are healthy: "
                "check its NICs, cables and switch ports.\n");
  degraded.clear_suspects();
  EXPECT_EQ(
      DegradedText(degraded),
      table +
          "Finding: 1 communicator(s) degraded; the evidence does not single out a node yet.\n");
}

TEST_F(TablesTest, AnIncompleteJobIsSaidUnderTheTable) {
  ncclwatch::v1::ListJobsResponse jobs = OneJob();
  jobs.mutable_jobs(0)->set_unreported_ranks(2);
  EXPECT_EQ(JobsText(jobs), JobsText(OneJob()) +
                                "\nJob job-a is incomplete: 2 ranks of a communicator never "
                                "reported, so its incomplete communicators are not judged "
                                "(`ncclwatch comms`, RANKS_UNREPORTED in `ncclwatch events`).\n");
}

TEST_F(TablesTest, WorkloadImbalanceIsSaidUnderTheJobsTable) {
  ncclwatch::v1::ListJobsResponse jobs = OneJob();
  jobs.mutable_jobs(0)->set_imbalanced_communicators(4);
  auto* w = jobs.mutable_jobs(0)->mutable_costliest_imbalance();
  w->set_comm_name("dp0");
  w->set_op("SendRecv");
  w->set_wait_seconds(0.0012);
  w->set_own_time_seconds(0.0018);
  EXPECT_EQ(JobsText(jobs), JobsText(OneJob()) +
                                "\nJob job-a: workload imbalance (not a fault) in 4 communicators: "
                                "the busiest rank changes from one collective to the next; "
                                "costliest: dp0's SendRecv waits 1.20 ms for its busiest rank, 40% "
                                "of the work before it (`ncclwatch comms`).\n");
}

TEST_F(TablesTest, JobsAndComms) {
  EXPECT_EQ(
      JobsText(OneJob()),
      "JOB   STATE   COMMS RANKS NODES STRAGGLERS HUNG DEGRADED SILENT LAST REPORT\n"
      "job-a running     3    16     2          1    0        2      0 1970-01-01 01:02:03 UTC\n");
  ncclwatch::v1::ListJobsResponse ended = OneJob();
  ended.mutable_jobs(0)->set_state("ended");
  ended.mutable_jobs(0)->set_ended_unix_ns(ended.jobs(0).last_report_unix_ns());
  ended.mutable_jobs(0)->set_end_reason("every rank sent its final report");
  EXPECT_NE(JobsText(ended).find("job-a ended     3"), std::string::npos) << JobsText(ended);
  EXPECT_NE(JobsText(ended).find("\nJob job-a ended at 1970-01-01 01:02:03 UTC (every rank sent "
                                 "its final "
                                 "report); its findings ended with it"),
            std::string::npos)
      << JobsText(ended);
  EXPECT_EQ(CommsText(TwoComms()),
            "JOB   COMMUNICATOR             CLASS  RANKS NODES HEALTH             LAST REPORT\n"
            "job-a world 0x00000000000000ab hybrid    16     2 straggler+degraded 1970-01-01 "
            "01:02:03 UTC\n"
            "job-a - 0x00000000000000cd     nvlink     8     1 ok                 1970-01-01 "
            "01:02:04 UTC\n");
  // Telemetry that lied: said under the table, for the communicators concerned only.
  ncclwatch::v1::ListCommsResponse lied = TwoComms();
  lied.mutable_comms(1)->set_bogus_timings(3);
  EXPECT_EQ(CommsText(lied), CommsText(TwoComms()) +
                                 "Bad telemetry: communicator 0x00000000000000cd in job job-a: 3 "
                                 "operations had GPU timestamps that cannot be true (left out of "
                                 "every figure; "
                                 "ncclwatch_plugin_drops_total{kind=\"bogus_timings\"} per "
                                 "rank).\n");
  ncclwatch::v1::ListCommsResponse lost = TwoComms();
  lost.mutable_comms(0)->set_completions_lost(2);
  EXPECT_EQ(CommsText(lost), CommsText(TwoComms()) +
                                 "Lost telemetry: communicator world in job job-a: 2 operations "
                                 "never reported their completion though later ones did (not "
                                 "taken for a hang; "
                                 "ncclwatch_plugin_drops_total{kind=\"completions_lost\"} per "
                                 "rank).\n");
  // Data-dependent imbalance: information under the table, never in the health column.
  ncclwatch::v1::ListCommsResponse moe = TwoComms();
  auto* w = moe.mutable_comms(0)->add_workload_imbalance();
  w->set_op("ReduceScatter");
  w->set_wait_seconds(0.0008);
  w->set_own_time_seconds(0.0024);
  EXPECT_EQ(CommsText(moe), CommsText(TwoComms()) +
                                "Workload imbalance (not a fault): communicator world in job "
                                "job-a: its ReduceScatter waits 0.80 ms for its busiest rank, 25% "
                                "of the work before it, and the busiest rank changes from one "
                                "ReduceScatter to the next: a property of the workload "
                                "(mixture-of-experts routing, variable sequence lengths, a "
                                "pipeline's schedule).\n");
}

TEST_F(TablesTest, QueryPoints) {
  EXPECT_EQ(QueryText(OneSeries(), "nccl_bus_bandwidth_gbs", 3600),
            "nccl_bus_bandwidth_gbs{job_id=\"j\",rank=\"5\"}  2 points\n"
            "  1970-01-01 01:02:03.004 UTC  12.5\n"
            "  1970-01-01 01:02:04.000 UTC  1e-07\n"
            "(more series matched than were returned: narrow the selector)\n");
}

TEST_F(TablesTest, EventLines) {
  ncclwatch::v1::Event e;
  e.set_time_unix_ns(3723'000'000'000);
  e.set_summary("straggler: rank 5 of world (job-a) is late");
  EXPECT_EQ(EventLine(e), "1970-01-01 01:02:03 UTC  straggler: rank 5 of world (job-a) is late\n");
  EXPECT_EQ(NoEventsText(3600, false), "No detection event in the last 3600 s.\n");
  EXPECT_EQ(NoEventsText(59.6, true),
            "No detection event in the last 60 s. Waiting for new ones (Ctrl-C to stop).\n");
}

TEST_F(TablesTest, TraceWritten) {
  EXPECT_EQ(TraceWrittenText(TwoRankTrace(), "job-t", "/tmp/t.json"),
            "wrote 3 sampled collectives of 2 ranks (communicator world of job job-t) to "
            "/tmp/t.json\n"
            "open it in https://ui.perfetto.dev or chrome://tracing\n");
  ncclwatch::v1::GetTraceResponse truncated = TwoRankTrace();
  truncated.set_truncated(true);
  EXPECT_EQ(TraceWrittenText(truncated, "job-t", "t.json"),
            "wrote 3 sampled collectives of 2 ranks (communicator world of job job-t) to t.json "
            "(truncated: narrow --since-s)\n"
            "open it in https://ui.perfetto.dev or chrome://tracing\n");
}

}  // namespace
}  // namespace ncclwatch::cli
