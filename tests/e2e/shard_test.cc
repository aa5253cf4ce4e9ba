// One agent, two aggregators: every job lands whole in the aggregator ShardOf names for it, and
// nowhere else, so the ranks of a job are correlated in one place.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "agent/agent_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ncclwatch/v1/report.grpc.pb.h"
#include "tests/e2e/pipeline.h"
#include "tests/e2e/process.h"

namespace ncclwatch::testing {
namespace {

std::set<std::string> Jobs(Pipeline& p) {
  grpc::ClientContext context;
  ncclwatch::v1::ListJobsResponse response;
  std::set<std::string> jobs;
  if (p.query().ListJobs(&context, {}, &response).ok()) {
    for (const auto& j : response.jobs()) jobs.insert(j.job_id());
  }
  return jobs;
}

TEST(ShardEndToEndTest, EachJobGoesWholeToTheAggregatorItsIdHashesTo) {
  Pipeline a(0), b(0);
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  ScopedTempDir dir("ncclwatch-shard");
  const std::string socket = "unix://" + dir.path() + "/agent.sock";
  Process agent({Binaries::Agent(), "--listen=" + socket,
                 "--aggregator=" + a.AggregatorAddr() + "," + b.AggregatorAddr(), "--http-port=0",
                 "--node-name=shard-node", "--batch-interval-ms=50",
                 "--spool-dir=" + dir.path() + "/spool", "--pod-resources-socket="},
                {}, dir.path() + "/agent.log", "--ready-fd");
  ASSERT_GT(agent.ReadyValue("http_port"), 0) << agent.Log();

  std::vector<std::string> jobs;
  for (int j = 0; j < 8; ++j) jobs.push_back("train-" + std::to_string(j));
  auto stub = ncclwatch::v1::Agent::NewStub(
      grpc::CreateChannel(socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  auto writer = stub->StreamReports(&context, &summary);
  uint64_t id = 1;
  for (const std::string& job : jobs) {
    for (int rank = 0; rank < 4; ++rank) {
      ncclwatch::v1::RankReport r;
      r.set_report_id(id++);
      auto* identity = r.mutable_identity();
      identity->set_job_id(job);
      identity->set_comm_hash(0xc0);
      identity->set_rank(rank);
      identity->set_nranks(4);
      identity->set_n_nodes(1);
      r.set_interval_end_unix_ns(1);
      ASSERT_TRUE(writer->Write(r));
    }
  }
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  ASSERT_EQ(summary.accepted(), jobs.size() * 4);

  std::set<std::string> want_a, want_b;
  for (const std::string& job : jobs) {
    (ncclwatch::agent::ShardOf(job, 2) == 0 ? want_a : want_b).insert(job);
  }
  ASSERT_FALSE(want_a.empty());  // these job ids do spread over both
  ASSERT_FALSE(want_b.empty());
  EXPECT_TRUE(PollUntil([&] { return Jobs(a) == want_a && Jobs(b) == want_b; }, 20)) << agent.Log();
  EXPECT_EQ(Jobs(a), want_a);
  EXPECT_EQ(Jobs(b), want_b);
  // Each endpoint keeps a spool of its own.
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/spool/127.0.0.1_" +
                                            a.AggregatorAddr().substr(10)));
}

}  // namespace
}  // namespace ncclwatch::testing
