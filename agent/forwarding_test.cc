// The agent's byte-level path: reports arrive as the plugin's bytes, are stamped by appending,
// and must decode at a typed Ingest server (as the aggregator's) as the same reports.
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_service.h"
#include "agent/agent_test_util.h"
#include "agent/forwarder.h"
#include "agent/inspector_series.h"
#include "agent/spool.h"
#include "common/rendezvous.h"
#include "common/status_matchers.h"
#include "common/sync.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "proto/testing/report_builder.h"

namespace ncclwatch::agent {
namespace {

using ::ncclwatch::testutil::IsOk;

// Keeps every batch it acknowledges, decoded as the aggregator decodes them.
class TypedIngest final : public ncclwatch::v1::Ingest::CallbackService {
 public:
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const ncclwatch::v1::NodeBatch* batch,
                                 ncclwatch::v1::BatchAck* ack) override {
    auto* reactor = context->DefaultReactor();
    {
      ncclwatch::MutexLock lock(&mu);
      if (refuse_next > 0) {
        --refuse_next;
        reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "refused by the test"));
        return reactor;
      }
      if (batch->batch_seq() == fail_seq) {
        ++failed;
        if (!failed_once.HasBeenNotified()) failed_once.Notify();
        reactor->Finish(grpc::Status(grpc::StatusCode::INTERNAL, "failed by the test"));
        return reactor;
      }
      batches.push_back(*batch);
    }
    ack->set_batch_seq(batch->batch_seq());
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  ncclwatch::Mutex mu;
  std::vector<ncclwatch::v1::NodeBatch> batches ABSL_GUARDED_BY(mu);
  int refuse_next ABSL_GUARDED_BY(mu) = 0;    // answer INVALID_ARGUMENT this many times
  uint64_t fail_seq ABSL_GUARDED_BY(mu) = 0;  // answer INTERNAL to this batch, every time
  int failed ABSL_GUARDED_BY(mu) = 0;
  ncclwatch::Notification failed_once;
};

ncclwatch::v1::RankReport Report(uint64_t id, int rank) {
  ncclwatch::v1::RankReport r = testing::ReportFrom({.job_id = "job-1",
                                                     .host = "pod-host",
                                                     .comm_hash = 0xabc,
                                                     .rank = rank,
                                                     .nranks = 8,
                                                     .n_nodes = 2,
                                                     .node = "what-the-plugin-guessed"});
  r.set_report_id(id);
  auto* st = r.add_stats();
  st->set_op("AllReduce");
  st->set_count(3);
  st->set_exec_time_us_sum(12.5);
  r.set_interval_end_unix_ns(1'700'000'000'000'000'000);
  return r;
}

// The agent's forwarding path of node "node-7" (report handler and forwarder, agent id
// "node-7-test") pushing to a stand-in aggregator on a free local port.
class ForwardingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&ingest_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    ForwarderOptions options;
    options.aggregator = "127.0.0.1:" + std::to_string(port);
    address_ = options.aggregator;
    options.agent_id = "node-7-test";
    options.node = "node-7";
    forwarder_ = std::make_unique<Forwarder>(options, metrics_);
    handler_ = std::make_unique<ReportHandler>("node-7", std::vector<Forwarder*>{forwarder_.get()},
                                               metrics_);
  }
  void TearDown() override {
    if (forwarder_ != nullptr) forwarder_->Stop();
    if (server_ != nullptr) server_->Shutdown();
  }

  TypedIngest ingest_;
  std::string address_;
  std::unique_ptr<grpc::Server> server_;
  MetricRegistry metrics_;
  std::unique_ptr<Forwarder> forwarder_;
  std::unique_ptr<ReportHandler> handler_;
};

TEST_F(ForwardingTest, ReportsArriveAsSentWithTheAgentsIdentityAndBadBytesAreCounted) {
  forwarder_->Start();
  std::vector<ncclwatch::v1::RankReport> sent;
  for (int i = 0; i < 5; ++i) {
    sent.push_back(Report(100 + i, i));
    if (i == 0) {  // a plugin claiming to be somewhere, and someone, else
      auto* claim = sent.back().mutable_identity();
      claim->set_node("other-node");
      claim->set_pod("victim-pod-0");
      claim->set_pod_namespace("prod-ns");
      claim->set_container("trainer");
    }
    EXPECT_TRUE(handler_->Handle(sent.back().SerializeAsString()));
  }
  EXPECT_FALSE(handler_->Handle("\xff\xff\xff not a report"));
  ncclwatch::v1::RankReport bad_rank = Report(200, 9);  // rank >= nranks
  EXPECT_FALSE(handler_->Handle(bad_rank.SerializeAsString()));
  ASSERT_TRUE(forwarder_->Flush(absl::Seconds(10)));

  std::vector<ncclwatch::v1::RankReport> received;
  {
    ncclwatch::MutexLock lock(&ingest_.mu);
    for (const auto& batch : ingest_.batches) {
      EXPECT_EQ(batch.agent_id(), "node-7-test");
      EXPECT_EQ(batch.node(), "node-7");
      EXPECT_GT(batch.sent_unix_ns(), 0u);
      for (const auto& r : batch.reports()) received.push_back(r);
    }
  }
  ASSERT_EQ(received.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    ncclwatch::v1::RankReport expected = sent[i];
    // The agent's node wins, and no pod is claimed where the agent found none.
    expected.mutable_identity()->set_node("node-7");
    expected.mutable_identity()->set_pod("");
    expected.mutable_identity()->set_pod_namespace("");
    expected.mutable_identity()->set_container("");
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(received[i], expected))
        << received[i].DebugString() << "\nvs\n"
        << expected.DebugString();
  }
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find("ncclwatch_agent_reports_rejected_total{reason=\"malformed\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ncclwatch_agent_reports_rejected_total{reason=\"bad_rank\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ncclwatch_agent_reports_forwarded_total 5"), std::string::npos) << text;
}

// A batch the aggregator refuses for good (INVALID_ARGUMENT, or RESOURCE_EXHAUSTED for one over
// its size limit) must not be retried forever ahead of every later batch.
TEST_F(ForwardingTest, ABatchTheAggregatorRefusesIsDroppedCountedAndDoesNotHoldBackTheNext) {
  {
    ncclwatch::MutexLock lock(&ingest_.mu);
    ingest_.refuse_next = 1;
  }
  forwarder_->Start();
  ASSERT_TRUE(handler_->Handle(Report(1, 0).SerializeAsString()));
  ASSERT_TRUE(forwarder_->Flush(absl::Seconds(10))) << "the refused batch must leave the outbox";
  ASSERT_TRUE(handler_->Handle(Report(2, 1).SerializeAsString()));
  ASSERT_TRUE(forwarder_->Flush(absl::Seconds(10)));
  {
    ncclwatch::MutexLock lock(&ingest_.mu);
    ASSERT_EQ(ingest_.batches.size(), 1u);
    EXPECT_EQ(ingest_.batches[0].batch_seq(), 2u);
    ASSERT_EQ(ingest_.batches[0].reports_size(), 1);
    EXPECT_EQ(ingest_.batches[0].reports(0).report_id(), 2u);
  }
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find("ncclwatch_agent_batches_refused_total 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ncclwatch_agent_push_failures_total 0"), std::string::npos) << text;
}

TEST(NodeInspectorSeriesTest, LatestStatsOfEachLiveRankWithTheAggregatorsLabels) {
  NodeInspectorSeries series("node-7");
  ncclwatch::v1::RankReport r = Report(1, 2);
  r.mutable_identity()->set_cuda_device(3);
  auto* st = r.mutable_stats(0);
  st->set_message_size("1-2MB");
  st->set_algo_proto("RING_SIMPLE");
  st->set_bw_samples(2);
  st->set_bus_bw_gbs_log_sum(2 * std::log(40.0));
  auto* p2p = r.add_stats();  // two peers of one p2p bucket merge into one series
  p2p->set_op("Send");
  p2p->set_p2p(true);
  p2p->set_message_size("1-2MB");
  p2p->set_peer(1);
  p2p->set_count(1);
  p2p->set_exec_time_us_sum(10);
  *r.add_stats() = *p2p;
  r.mutable_stats(2)->set_peer(5);
  r.mutable_stats(2)->set_exec_time_us_sum(30);
  series.Update(r);
  ncclwatch::v1::RankReport idle = Report(2, 2);  // no stats: the last activity stays shown
  idle.clear_stats();
  series.Update(idle);

  PromTextWriter w;
  series.Collect(w);
  const std::string whose =
      "job_id=\"job-1\",comm_hash=\"0x0000000000000abc\",comm_name=\"unknown\",rank=\"2\","
      "node=\"node-7\",gpu=\"GPU3\",version=\"v5.1\",slurm_job_id=\"job-1\",n_nodes=\"2\","
      "nranks=\"8\"";
  EXPECT_NE(w.text().find("nccl_bus_bandwidth_gbs{" + whose +
                          ",collective=\"AllReduce\",message_size=\"1-2MB\","
                          "algo_proto=\"RING_SIMPLE\"} 40\n"),
            std::string::npos)
      << w.text();
  EXPECT_NE(w.text().find("nccl_collective_exec_time_microseconds{" + whose +
                          ",collective=\"AllReduce\",message_size=\"1-2MB\","
                          "algo_proto=\"RING_SIMPLE\"} 4.166666666666667\n"),
            std::string::npos)
      << w.text();
  EXPECT_NE(w.text().find("nccl_p2p_exec_time_microseconds{" + whose +
                          ",p2p_operation=\"Send\",message_size=\"1-2MB\"} 20\n"),
            std::string::npos)
      << w.text();
  EXPECT_EQ(series.ranks(), 1u);

  ncclwatch::v1::RankReport last = Report(3, 2);
  last.set_final(true);
  series.Update(last);
  EXPECT_EQ(series.ranks(), 0u);
  PromTextWriter after;
  series.Collect(after);
  EXPECT_EQ(after.text(), "");
}

TEST(NodeInspectorSeriesTest, HugeReportsAreTrimmedAndTheTotalIsCapped) {
  // A report with 3,000 statistics keeps 512; once the budget is spent, further ranks are left
  // out (and counted) while the ranks already shown keep being updated.
  NodeInspectorSeries::Limits limits;
  limits.max_stats_per_rank = 512;
  limits.max_bytes = 200 << 10;
  NodeInspectorSeries series("node-7", limits);
  auto huge = [](int rank) {
    ncclwatch::v1::RankReport r = Report(rank, rank);
    r.mutable_identity()->set_nranks(64);
    for (int i = 0; i < 3000; ++i) {
      auto* st = r.add_stats();
      *st = r.stats(0);
      st->set_message_size(std::to_string(i) + "-" + std::to_string(i + 1) + "B");
    }
    r.add_sample_columns()->set_op("AllReduce");
    return r;
  };
  series.Update(huge(0));
  EXPECT_EQ(series.ranks(), 1u);
  EXPECT_EQ(series.capped(), 1u);  // trimmed to 512 statistics
  PromTextWriter w;
  series.Collect(w);
  const std::string text = w.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n') > 512, true);
  EXPECT_LT(text.size(), 2u << 20);
  for (int rank = 1; rank < 64; ++rank) series.Update(huge(rank));
  EXPECT_LT(series.ranks(), 64u);
  EXPECT_GT(series.capped(), 1u);
  const size_t shown = series.ranks();
  series.Update(huge(0));  // a rank already shown is still updated
  EXPECT_EQ(series.ranks(), shown);
}

TEST(NodeInspectorSeriesTest, TheBudgetIsWhatAScrapeReturnsAndLongLabelsAreLeftOut) {
  // Reports far smaller than what they render to: every sample repeats the rank's labels (a long
  // job id here). The budget is the page, not the reports.
  NodeInspectorSeries::Limits limits;
  limits.max_bytes = 256 << 10;
  NodeInspectorSeries series("node-7", limits);
  const std::string job(200, 'j');
  size_t report_bytes = 0;
  for (int rank = 0; rank < 64; ++rank) {
    ncclwatch::v1::RankReport r = Report(1, rank);
    r.mutable_identity()->set_job_id(job);
    r.mutable_identity()->set_nranks(64);
    for (int i = 0; i < 100; ++i) {
      auto* st = i == 0 ? r.mutable_stats(0) : r.add_stats();
      *st = r.stats(0);
      st->set_message_size(std::to_string(i) + "B");
      st->set_bw_samples(1);
      st->set_bus_bw_gbs_log_sum(1);
    }
    report_bytes += r.ByteSizeLong();
    series.Update(r);
  }
  PromTextWriter w;
  series.Collect(w);
  const size_t headers = 1024;  // the four families' # HELP and # TYPE lines
  EXPECT_GT(series.ranks(), 0u);
  EXPECT_LT(series.ranks(), 64u) << "the page would have been " << report_bytes << " bytes";
  EXPECT_LE(w.text().size(), limits.max_bytes + headers);
  EXPECT_GE(w.text().size(), series.bytes());
  EXPECT_GT(series.capped(), 0u);

  // A label value over max_label_bytes (256): the rank is left out, and counted.
  NodeInspectorSeries small("node-7");
  ncclwatch::v1::RankReport r = Report(1, 0);
  r.mutable_identity()->set_job_id(std::string(257, 'j'));
  small.Update(r);
  EXPECT_EQ(small.ranks(), 0u);
  EXPECT_EQ(small.capped(), 1u);
  r.mutable_identity()->set_job_id(std::string(256, 'j'));
  small.Update(r);
  EXPECT_EQ(small.ranks(), 1u);
}

TEST(ShardOfTest, IsTheRendezvousOwnerAmongEndpointNames) {
  const std::vector<std::string> endpoints = {"agg-0:9470", "agg-1:9470", "agg-2:9470"};
  const std::vector<std::string> shuffled = {"agg-2:9470", "agg-0:9470", "agg-1:9470"};
  std::vector<int> per_shard(3);
  for (int j = 0; j < 600; ++j) {
    const std::string job = "job-" + std::to_string(j);
    const size_t shard = ShardOf(job, endpoints);
    ++per_shard[shard];
    EXPECT_EQ(shard, RendezvousOwner(job, endpoints));
    // Every agent agrees whatever order its flag lists the endpoints in.
    EXPECT_EQ(endpoints[shard], shuffled[ShardOf(job, shuffled)]);
  }
  for (int n : per_shard) EXPECT_GT(n, 140);  // roughly even: none starved
  EXPECT_EQ(ShardOf("anything", {"only:9470"}), 0u);
}

}  // namespace
}  // namespace ncclwatch::agent

namespace ncclwatch::agent {
namespace {

// A report that is valid but carries 99 nested groups of an unknown field: the agent's parser
// takes it (100 levels), the aggregator's, one level deeper inside a NodeBatch, would not.
std::string ReportWithDeepUnknownGroups() {
  std::string bytes = Report(7, 2).SerializeAsString();
  constexpr int kField = 15;  // not a RankReport field
  constexpr int kDepth = 100;
  for (int i = 0; i < kDepth; ++i)
    bytes.push_back(static_cast<char>(kField << 3 | 3));  // start group
  for (int i = 0; i < kDepth; ++i)
    bytes.push_back(static_cast<char>(kField << 3 | 4));  // end group
  return bytes;
}

// The agent forwards what it validated, re-encoded without unknown fields: a report the
// aggregator could not parse must not leave the node (it had stopped the node's forwarding: the
// batch was retried forever, every later batch behind it).
TEST_F(ForwardingTest, UnknownFieldsAreDroppedSoAPoisonReportNeverLeavesTheNode) {
  forwarder_->Start();
  ASSERT_TRUE(handler_->Handle(ReportWithDeepUnknownGroups()));
  ASSERT_TRUE(handler_->Handle(Report(8, 3).SerializeAsString()));
  ASSERT_TRUE(forwarder_->Flush(absl::Seconds(20))) << metrics_.Render();
  ncclwatch::MutexLock lock(&ingest_.mu);
  std::vector<uint64_t> ids;
  for (const auto& batch : ingest_.batches) {
    for (const auto& r : batch.reports()) {
      ids.push_back(r.report_id());
      EXPECT_TRUE(r.GetReflection()->GetUnknownFields(r).empty()) << r.report_id();
    }
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{7, 8}));
}

// A batch the aggregator fails on again and again (here INTERNAL, as for bytes it cannot parse)
// is set aside once a later batch gets through: kept in the spool as *.rejected, counted, and the
// node's batches flow again.
TEST_F(ForwardingTest, ABatchThatKeepsFailingIsSetAsideOnceALaterOneGetsThrough) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto spool = Spool::Open(dir.path(), 1 << 20, metrics_);
  ASSERT_THAT(spool, IsOk());
  forwarder_->Stop();
  ForwarderOptions options;
  options.aggregator = address_;
  options.agent_id = "node-7-test";
  options.node = "node-7";
  options.set_aside_after = 3;
  options.spool = spool->get();
  handler_.reset();
  forwarder_ = std::make_unique<Forwarder>(options, metrics_);
  handler_ = std::make_unique<ReportHandler>("node-7", std::vector<Forwarder*>{forwarder_.get()},
                                             metrics_);
  {
    ncclwatch::MutexLock lock(&ingest_.mu);
    ingest_.fail_seq = 1;
  }
  forwarder_->Start();
  ASSERT_TRUE(handler_->Handle(Report(1, 0).SerializeAsString()));
  ingest_.failed_once.WaitForNotification();  // batch 1 is out and failing
  ASSERT_TRUE(handler_->Handle(Report(2, 1).SerializeAsString()));
  ASSERT_TRUE(forwarder_->Flush(absl::Seconds(30))) << metrics_.Render();
  {
    ncclwatch::MutexLock lock(&ingest_.mu);
    EXPECT_GE(ingest_.failed, 3);
    ASSERT_EQ(ingest_.batches.size(), 1u);
    EXPECT_EQ(ingest_.batches[0].batch_seq(), 2u);
  }
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find("ncclwatch_agent_batches_set_aside_total 1"), std::string::npos) << text;
  int rejected = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".rejected") ++rejected;
  }
  EXPECT_EQ(rejected, 1);
  EXPECT_EQ((*spool)->batches(), 0u);
}

}  // namespace
}  // namespace ncclwatch::agent
