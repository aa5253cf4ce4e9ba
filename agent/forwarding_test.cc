// The agent's byte-level path: reports arrive as the plugin's bytes, are stamped by appending,
// and must decode at a typed Ingest server (as the aggregator's) as the same reports.
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "agent/agent_service.h"
#include "agent/forwarder.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"

namespace ncclwatch::agent {
namespace {

// Keeps every batch it acknowledges, decoded as the aggregator decodes them.
class TypedIngest final : public ncclwatch::v1::Ingest::CallbackService {
 public:
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const ncclwatch::v1::NodeBatch* batch,
                                 ncclwatch::v1::BatchAck* ack) override {
    {
      absl::MutexLock lock(&mu);
      batches.push_back(*batch);
    }
    ack->set_batch_seq(batch->batch_seq());
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  absl::Mutex mu;
  std::vector<ncclwatch::v1::NodeBatch> batches ABSL_GUARDED_BY(mu);
};

ncclwatch::v1::RankReport Report(uint64_t id, int rank) {
  ncclwatch::v1::RankReport r;
  r.set_report_id(id);
  auto* identity = r.mutable_identity();
  identity->set_job_id("job-1");
  identity->set_host("pod-host");
  identity->set_comm_hash(0xabc);
  identity->set_rank(rank);
  identity->set_nranks(8);
  identity->set_n_nodes(2);
  identity->set_node("what-the-plugin-guessed");
  auto* st = r.add_stats();
  st->set_op("AllReduce");
  st->set_count(3);
  st->set_exec_time_us_sum(12.5);
  r.set_interval_end_unix_ns(1'700'000'000'000'000'000);
  return r;
}

TEST(ForwardingTest, ReportsArriveAsSentWithTheNodeStampedAndBadBytesAreCounted) {
  TypedIngest ingest;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&ingest);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);

  MetricRegistry metrics;
  ForwarderOptions options;
  options.aggregator = "127.0.0.1:" + std::to_string(port);
  options.agent_id = "node-7-test";
  options.node = "node-7";
  Forwarder forwarder(options, metrics);
  ReportHandler handler("node-7", forwarder, metrics);
  forwarder.Start();

  std::vector<ncclwatch::v1::RankReport> sent;
  for (int i = 0; i < 5; ++i) {
    sent.push_back(Report(100 + i, i));
    EXPECT_TRUE(handler.Handle(sent.back().SerializeAsString()));
  }
  EXPECT_FALSE(handler.Handle("\xff\xff\xff not a report"));
  ncclwatch::v1::RankReport bad_rank = Report(200, 9);  // rank >= nranks
  EXPECT_FALSE(handler.Handle(bad_rank.SerializeAsString()));
  ASSERT_TRUE(forwarder.Flush(absl::Seconds(10)));

  std::vector<ncclwatch::v1::RankReport> received;
  {
    absl::MutexLock lock(&ingest.mu);
    for (const auto& batch : ingest.batches) {
      EXPECT_EQ(batch.agent_id(), "node-7-test");
      EXPECT_EQ(batch.node(), "node-7");
      EXPECT_GT(batch.sent_unix_ns(), 0u);
      for (const auto& r : batch.reports()) received.push_back(r);
    }
  }
  ASSERT_EQ(received.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    ncclwatch::v1::RankReport expected = sent[i];
    expected.mutable_identity()->set_node("node-7");  // the agent's name wins
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(received[i], expected))
        << received[i].DebugString() << "\nvs\n"
        << expected.DebugString();
  }
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("ncclwatch_agent_reports_rejected_total{reason=\"malformed\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ncclwatch_agent_reports_rejected_total{reason=\"bad_rank\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ncclwatch_agent_reports_forwarded_total 5"), std::string::npos) << text;
  forwarder.Stop();
  server->Shutdown();
}

}  // namespace
}  // namespace ncclwatch::agent
