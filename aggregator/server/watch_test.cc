// A Watch client that stops reading must not stall the aggregator: its stream queues a bounded
// number of events, then drops the oldest (counted), while batches keep being acknowledged.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/server/services.h"
#include "aggregator/store/store.h"
#include "common/metrics.h"
#include "common/status_matchers.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/query.grpc.pb.h"

namespace ncclwatch::aggregator {
namespace {

using ::ncclwatch::testutil::IsOk;

double CounterValue(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + name.size() + 2, nullptr);
}

TEST(WatchTest, AClientThatNeverReadsCannotStallIngestAndLosesOnlyTheOldestEvents) {
  char tmpl[] = "/tmp/ncclwatch-watch-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto store = Store::Open(dir);
  ASSERT_THAT(store, IsOk());
  Analyzer analyzer;
  MetricRegistry metrics;
  Ingest core(**store, analyzer, metrics);
  QueryEngine engine(**store, analyzer);
  IngestService ingest(core);
  QueryService query(engine, core);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&ingest);
  builder.RegisterService(&query);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto query_stub = ncclwatch::v1::Query::NewStub(channel);
  auto ingest_stub = ncclwatch::v1::Ingest::NewStub(channel);

  grpc::ClientContext watch_context;
  auto reader = query_stub->Watch(&watch_context, ncclwatch::v1::WatchRequest());
  reader->WaitForInitialMetadata();  // the subscription is live

  // 50,000 events of 1 KiB: far more than HTTP/2 flow control and the stream's queue hold while
  // the client reads nothing. Publish is what the ingest path calls for each detection event; if
  // it waited for the client, this loop would never end.
  constexpr int kEvents = 50'000;
  const std::string padding(1024, 'x');
  for (int i = 0; i < kEvents; ++i) {
    ncclwatch::v1::Event e;
    e.set_kind(ncclwatch::v1::Event::HANG);
    e.set_summary(padding + "#" + std::to_string(i));
    core.events().Publish(e);
  }

  // Ingest still answers while the Watch client stalls.
  ncclwatch::v1::NodeBatch batch;
  batch.set_agent_id("agent-1");
  batch.set_batch_seq(1);
  auto* report = batch.add_reports();
  report->set_report_id(1);
  auto* id = report->mutable_identity();
  id->set_job_id("job");
  id->set_comm_hash(7);
  id->set_rank(0);
  id->set_nranks(2);
  id->set_n_nodes(1);
  grpc::ClientContext push_context;
  ncclwatch::v1::BatchAck ack;
  grpc::Status pushed = ingest_stub->Push(&push_context, batch, &ack);
  ASSERT_TRUE(pushed.ok()) << pushed.error_message();
  EXPECT_FALSE(ack.duplicate());

  const double dropped =
      CounterValue(metrics.Render(), "ncclwatch_aggregator_watch_events_dropped_total");
  EXPECT_GT(dropped, 0) << "the stalled stream should have shed events";
  EXPECT_LT(dropped, kEvents);

  // When the client reads again it gets what was kept, in order, ending with the newest event:
  // only the oldest were dropped.
  ncclwatch::v1::Event e;
  int received = 0;
  int last = -1;
  const std::string newest = "#" + std::to_string(kEvents - 1);
  while (reader->Read(&e)) {
    const int n = std::atoi(e.summary().c_str() + e.summary().rfind('#') + 1);
    ASSERT_GT(n, last) << "events arrive in order, each once";
    last = n;
    ++received;
    if (n == kEvents - 1) break;
  }
  EXPECT_EQ(last, kEvents - 1);
  EXPECT_EQ(received + static_cast<int>(dropped), kEvents) << "every event is delivered or counted";
  watch_context.TryCancel();
  server->Shutdown();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ncclwatch::aggregator
