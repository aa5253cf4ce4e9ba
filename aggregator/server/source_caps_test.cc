// Caps per source: one agent (as the aggregator authenticates it) cannot take every job slot, the
// source is the aggregator's word and never the batch's, and a replay counts it the same way.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/server/aggregator_server.h"
#include "common/daemon.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/query.grpc.pb.h"

namespace ncclwatch::aggregator {
namespace {

ncclwatch::v1::RankReport Report(const std::string& job, uint64_t comm) {
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

TEST(SourceCapsTest, OneSourceFillsItsOwnShareNotTheWholeAggregator) {
  AnalyzerOptions opts;
  opts.max_jobs_per_agent = 2;
  opts.max_comms_per_agent = 3;
  Analyzer analyzer(opts);
  const int64_t t = 1'000'000'000;
  analyzer.Ingest(Report("a1", 1), t, "ip:10.0.0.1");
  analyzer.Ingest(Report("a2", 1), t, "ip:10.0.0.1");
  analyzer.Ingest(Report("a3", 1), t, "ip:10.0.0.1");  // a third job of this source
  EXPECT_TRUE(analyzer.Comms("a3").empty());
  EXPECT_EQ(analyzer.counters().capped_agent_jobs, 1u);
  // Another node's jobs, and its ranks in the first source's jobs, are analysed.
  analyzer.Ingest(Report("b1", 1), t, "ip:10.0.0.2");
  analyzer.Ingest(Report("a1", 2), t, "ip:10.0.0.2");
  EXPECT_EQ(analyzer.Comms("b1").size(), 1u);
  EXPECT_EQ(analyzer.Comms("a1").size(), 2u);
  // Communicators: the first source has 2 of its 3, one more fits, the next does not.
  analyzer.Ingest(Report("a2", 2), t, "ip:10.0.0.1");
  analyzer.Ingest(Report("a2", 3), t, "ip:10.0.0.1");
  EXPECT_EQ(analyzer.Comms("a2").size(), 2u);
  EXPECT_EQ(analyzer.counters().capped_agent_comms, 1u);
  // Known communicators keep being analysed, whoever sends their reports, capped or not.
  analyzer.Ingest(Report("a2", 1), t + 1, "ip:10.0.0.1");
  analyzer.Ingest(Report("a2", 1), t + 1, "ip:10.0.0.3");
  EXPECT_EQ(analyzer.counters().capped_agent_jobs, 1u);
  EXPECT_EQ(analyzer.counters().capped_agent_comms, 1u);
  // Once its jobs are forgotten (silent past the TTL), the source has room again.
  const int64_t later = t + opts.series_ttl_ns + 1;
  analyzer.Tick(later);
  analyzer.Ingest(Report("a3", 1), later, "ip:10.0.0.1");
  EXPECT_EQ(analyzer.Comms("a3").size(), 1u);
}

class SourceCapsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ncclwatch-source-caps-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  AggregatorServerOptions Options(const std::string& host) const {
    AggregatorServerOptions o;
    o.listen_host = host;
    o.grpc_port = 0;
    o.http_port = 0;
    o.data_dir = dir_;
    o.analyzer.max_jobs_per_agent = 1;
    return o;
  }
  // Pushes one report of `job` as agent `agent_id` (batch `seq`), the batch claiming `source`.
  static void Push(const std::string& address, const std::string& agent_id, uint64_t seq,
                   const std::string& job) {
    ncclwatch::v1::NodeBatch batch;
    batch.set_agent_id(agent_id);
    batch.set_batch_seq(seq);
    batch.set_source("ip:192.0.2.1");  // a claim the aggregator must ignore
    *batch.add_reports() = Report(job, 7);
    grpc::ClientContext context;
    ncclwatch::v1::BatchAck ack;
    auto stub = ncclwatch::v1::Ingest::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    ASSERT_TRUE(stub->Push(&context, batch, &ack).ok());
  }
  static int Comms(const std::string& address, const std::string& job) {
    grpc::ClientContext context;
    ncclwatch::v1::ListCommsRequest request;
    request.set_job_id(job);
    ncclwatch::v1::ListCommsResponse comms;
    auto stub = ncclwatch::v1::Query::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    EXPECT_TRUE(stub->ListComms(&context, request, &comms).ok());
    return comms.comms_size();
  }
  static std::string Capped(int http_port) {
    auto metrics = httplib::Client("127.0.0.1", http_port).Get("/metrics");
    if (!metrics) return "no /metrics";
    const std::string name =
        "ncclwatch_aggregator_reports_capped_total{reason=\"too_many_jobs_per_agent\"} ";
    const size_t at = metrics->body.find(name);
    if (at == std::string::npos) return "absent";
    return metrics->body.substr(at + name.size(), metrics->body.find('\n', at) - at - name.size());
  }

  std::string dir_;
};

TEST_F(SourceCapsServerTest, LoopbackAgentsAreToldApartByNameAndAReplayCapsTheSameReports) {
  {
    AggregatorServer server(Options("127.0.0.1"));
    ASSERT_TRUE(server.Start().ok());
    const std::string address = "127.0.0.1:" + std::to_string(server.grpc_port());
    Push(address, "agent-1", 1, "job-a");
    Push(address, "agent-1", 2, "job-b");  // agent-1's second job: beyond its cap of one
    Push(address, "agent-2", 1, "job-c");  // on loopback too, but another agent
    EXPECT_EQ(Comms(address, "job-a"), 1);
    EXPECT_EQ(Comms(address, "job-b"), 0);
    EXPECT_EQ(Comms(address, "job-c"), 1);
    EXPECT_EQ(Capped(server.http_port()), "1");
  }
  // The replay at start-up meets the stored sources, not the claimed one they all share.
  AggregatorServer again(Options("127.0.0.1"));
  ASSERT_TRUE(again.Start().ok());
  const std::string address = "127.0.0.1:" + std::to_string(again.grpc_port());
  EXPECT_EQ(Comms(address, "job-a"), 1);
  EXPECT_EQ(Comms(address, "job-b"), 0);
  EXPECT_EQ(Comms(address, "job-c"), 1);
  EXPECT_EQ(Capped(again.http_port()), "1");
}

TEST_F(SourceCapsServerTest, BeyondLoopbackTheAddressIsTheSourceWhateverTheAgentIdSays) {
  const std::string ip = ReachableIpv4Address();
  if (ip == "127.0.0.1") GTEST_SKIP() << "this machine has no address beyond loopback";
  AggregatorServer server(Options("0.0.0.0"));
  ASSERT_TRUE(server.Start().ok());
  const std::string address = ip + ":" + std::to_string(server.grpc_port());
  Push(address, "agent-1", 1, "job-a");
  // A new agent_id from the same address is the same source: still capped.
  Push(address, "agent-renamed", 1, "job-b");
  EXPECT_EQ(Comms(address, "job-a"), 1);
  EXPECT_EQ(Comms(address, "job-b"), 0);
  EXPECT_EQ(Capped(server.http_port()), "1");
}

}  // namespace
}  // namespace ncclwatch::aggregator
