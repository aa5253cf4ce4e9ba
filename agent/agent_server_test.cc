// The agent run in-process: plugins' sockets, HTTP, forwarding to a stand-in aggregator, the
// spool at shutdown, and Start failures that leave nothing running.
#include "agent/agent_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "agent/agent_test_util.h"
#include "agent/spool.h"
#include "common/metrics.h"
#include "common/status_matchers.h"
#include "common/sync.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/report.grpc.pb.h"

namespace ncclwatch::agent {
namespace {

using ::ncclwatch::testutil::IsOk;

// The `i`th valid report of job `job` (ranks 0..3 of one communicator), as a plugin sends it.
ncclwatch::v1::RankReport PluginReport(const std::string& job, int i) {
  ncclwatch::v1::RankReport r;
  r.set_report_id(static_cast<uint64_t>(i + 1));
  auto* id = r.mutable_identity();
  id->set_job_id(job);
  id->set_comm_hash(0xabc);
  id->set_rank(i % 4);
  id->set_nranks(4);
  id->set_n_nodes(1);
  r.set_interval_start_unix_ns(1'700'000'000'000'000'000 + i);
  r.set_interval_end_unix_ns(1'700'000'001'000'000'000 + i);
  return r;
}

// Streams `n` valid reports of job `job` to the agent at `address`, as a plugin does, and returns
// once the agent has handled them all (it answers the stream only then).
void WriteReports(const std::string& address, const std::string& job, int n) {
  auto stub = ncclwatch::v1::Agent::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  auto writer = stub->StreamReports(&context, &summary);
  for (int i = 0; i < n; ++i) ASSERT_TRUE(writer->Write(PluginReport(job, i)));
  writer->WritesDone();
  ASSERT_THAT(writer->Finish(), IsOk());
  EXPECT_EQ(summary.accepted(), static_cast<uint64_t>(n));
}

// Whether something accepts connections on the unix socket `path` now.
bool Accepts(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return connected;
}

class AgentServerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  // No aggregator listens on 127.0.0.1:1, no spool, no kubelet, any free HTTP port.
  AgentServerOptions Options() const {
    AgentServerOptions o;
    o.listen = "unix://" + socket();
    o.aggregators = {"127.0.0.1:1"};
    o.node_name = "node-t";
    o.agent_id = "node-t-test";
    o.forwarding.push_timeout_ms = 1000;
    o.pod_resources_socket = "";
    o.http_port = 0;
    return o;
  }
  std::string socket() const { return dir_ + "/agent.sock"; }

  TempDir tmp_;
  const std::string dir_ = tmp_.path();
};

TEST_F(AgentServerTest, AnswersHealthAndStopsPromptlyWithoutAnAggregator) {
  AgentServerOptions options = Options();
  options.listen = "unix://" + dir_ + "/sockets/agent.sock";  // a directory the agent creates
  options.plugins.mode = 0660;
  options.socket_dir_mode = 0750;
  options.shutdown_timeout = absl::Seconds(30);  // only spent if something were queued
  AgentServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  ASSERT_GT(server.http_port(), 0);
  EXPECT_EQ(server.tcp_port(), 0);
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/sockets/agent.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  ASSERT_EQ(stat((dir_ + "/sockets").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);

  httplib::Client http("127.0.0.1", server.http_port());
  auto healthz = http.Get("/healthz");
  ASSERT_TRUE(healthz);
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(healthz->body, "ok\n");
  auto readyz = http.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 200);
  EXPECT_EQ(readyz->body, "ready\n");
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ncclwatch_agent_reports_received_total"), std::string::npos);

  const absl::Time before = absl::Now();
  server.Stop();
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));  // not the 30 s of shutdown_timeout
  EXPECT_FALSE(Accepts(dir_ + "/sockets/agent.sock"));
  EXPECT_FALSE(httplib::Client("127.0.0.1", server.http_port()).Get("/healthz"));
  server.Stop();  // idempotent
}

// /readyz fails, saying why, once every push to an aggregator has failed for --unready-after (a
// full disk there or a wrong token here look alike to the node: nothing leaves it). Here the
// aggregator is unreachable and the threshold zero; a minute by default.
TEST_F(AgentServerTest, ReadinessFailsOnceEveryPushHasFailedForLong) {
  AgentServerOptions options = Options();
  options.unready_after = absl::ZeroDuration();
  options.shutdown_timeout = absl::Seconds(1);
  // The refusal decides, not the push's deadline: under ThreadSanitizer on a loaded machine the
  // channel's first connection attempt once took longer than the fixture's 1 s.
  options.forwarding.push_timeout_ms = 30000;
  AgentServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  httplib::Client http("127.0.0.1", server.http_port());
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << "no push has failed yet";
  WriteReports(options.listen, "job-ready", 1);
  // The forwarder cuts the batch within its interval and its push is refused at once.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    ready = http.Get("/readyz");
    ASSERT_TRUE(ready);
  } while (ready->status == 200 && absl::Now() < deadline);
  EXPECT_EQ(ready->status, 503);
  EXPECT_NE(ready->body.find("every push to 127.0.0.1:1 has failed"), std::string::npos)
      << ready->body;
  EXPECT_NE(ready->body.find("UNAVAILABLE"), std::string::npos) << ready->body;
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  server.Stop();
}

TEST_F(AgentServerTest, WhatPluginsSentIsForwardedBeforeStopReturns) {
  StandInAggregator aggregator;
  const std::string aggregator_address = aggregator.Serve();
  ASSERT_FALSE(aggregator_address.empty());

  AgentServerOptions options = Options();
  options.aggregators = {aggregator_address};
  options.listen_tcp = "127.0.0.1:0";
  options.shutdown_timeout = absl::Seconds(30);
  AgentServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  ASSERT_GT(server.tcp_port(), 0);
  WriteReports(options.listen, "job-unix", 3);
  WriteReports("127.0.0.1:" + std::to_string(server.tcp_port()), "job-tcp", 2);
  server.Stop();

  ncclwatch::MutexLock lock(&aggregator.mu);
  int reports = 0;
  for (const ncclwatch::v1::NodeBatch& batch : aggregator.batches) {
    EXPECT_EQ(batch.agent_id(), "node-t-test");
    EXPECT_EQ(batch.node(), "node-t");
    for (const auto& r : batch.reports()) {
      EXPECT_EQ(r.identity().node(), "node-t");
      ++reports;
    }
  }
  EXPECT_EQ(reports, 5);
}

TEST_F(AgentServerTest, WhatCannotBeForwardedWithinTheShutdownTimeoutIsSpooled) {
  AgentServerOptions options = Options();
  options.spool_dir = dir_ + "/spool";
  options.shutdown_timeout = absl::Milliseconds(100);
  AgentServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  WriteReports(options.listen, "job-a", 4);
  const absl::Time before = absl::Now();
  server.Stop();
  // The shutdown timeout, and at most one push in flight (1 s to a refused port).
  EXPECT_LT(absl::Now() - before, absl::Seconds(5));

  MetricRegistry metrics;
  auto spool = Spool::Open(options.spool_dir, 1 << 30, metrics);
  ASSERT_THAT(spool, IsOk());
  int reports = 0;
  for (const Spool::Entry& e : (*spool)->TakeRecovered()) reports += e.reports;
  EXPECT_EQ(reports, 4);
}

TEST_F(AgentServerTest, AFileAtTheSocketPathFailsStart) {
  std::ofstream(socket()) << "keep me";
  AgentServer server(Options());
  absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), socket() + " exists and is not a socket; refusing to replace it");
  EXPECT_EQ(server.http_port(), 0);
  EXPECT_EQ(std::filesystem::file_size(socket()), 7u);
  server.Stop();  // a no-op
}

TEST_F(AgentServerTest, AnAggregatorListNamingAShardTwiceFailsStart) {
  for (const std::vector<std::string>& list :
       {std::vector<std::string>{"a=127.0.0.1:1", "a=127.0.0.1:2"},
        std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:1"},
        std::vector<std::string>{"=127.0.0.1:1"}}) {
    AgentServerOptions options = Options();
    options.aggregators = list;
    AgentServer server(options);
    absl::Status s = server.Start();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << list[0];
    EXPECT_NE(s.message().find("--aggregator entry"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("each name once"), std::string::npos) << s.message();
    EXPECT_FALSE(Accepts(socket()));
  }
}

TEST_F(AgentServerTest, AnUnknownSocketGroupFailsStartWithNothingListening) {
  AgentServerOptions options = Options();
  options.plugins.group = "ncclwatch-no-such-group";
  AgentServer server(options);
  absl::Status s = server.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--socket-group=ncclwatch-no-such-group: no such group");
  EXPECT_FALSE(Accepts(socket()));
  EXPECT_EQ(server.Start().code(), absl::StatusCode::kFailedPrecondition);  // once only
}

TEST_F(AgentServerTest, AnHttpPortInUseFailsStartWithNothingListening) {
  // Held without SO_REUSEPORT, so that the agent's HTTP server cannot share it.
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  AgentServerOptions options = Options();
  options.http_port = port;
  AgentServer server(options);
  absl::Status s = server.Start();
  close(holder);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()),
              ::testing::StartsWith("cannot listen on 0.0.0.0:" + std::to_string(port) +
                                    " for HTTP: the port is in use"));
  EXPECT_EQ(server.http_port(), 0);
  EXPECT_FALSE(Accepts(socket()));
}

TEST_F(AgentServerTest, ASecondAgentOnALiveSocketIsRefusedAndTheFirstKeepsIt) {
  AgentServer first(Options());
  ASSERT_THAT(first.Start(), IsOk());
  AgentServer second(Options());
  absl::Status s = second.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("is in use by a running agent"));
  second.Stop();
  EXPECT_TRUE(Accepts(socket())) << "the first agent's socket is still there and served";
}

// The value of an unlabelled sample on the agent's /metrics, -1 if absent.
double MetricValue(int http_port, const std::string& name) {
  auto res = httplib::Client("127.0.0.1", http_port).Get("/metrics");
  if (!res) return -1;
  const size_t at = res->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(res->body.substr(at + name.size() + 2));
}

TEST_F(AgentServerTest, PluginStreamsAreCappedBySilenceAndSilentOnesClosed) {
  AgentServerOptions options = Options();
  options.streams.max_streams = 2;
  options.streams.idle_timeout = absl::Milliseconds(200);
  AgentServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  auto stub = ncclwatch::v1::Agent::NewStub(
      grpc::CreateChannel("unix://" + socket(), grpc::InsecureChannelCredentials()));
  struct Stream {
    grpc::ClientContext context;
    ncclwatch::v1::StreamSummary summary;
    std::unique_ptr<grpc::ClientWriter<ncclwatch::v1::RankReport>> writer;
  };
  std::vector<std::unique_ptr<Stream>> open;
  for (int i = 0; i < 2; ++i) {
    open.push_back(std::make_unique<Stream>());
    open.back()->writer = stub->StreamReports(&open.back()->context, &open.back()->summary);
  }
  // Both admitted (the gauge says so) before a third one asks.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (MetricValue(server.http_port(), "ncclwatch_agent_plugin_streams") < 2 &&
         absl::Now() < give_up) {
  }
  Stream third;
  third.writer = stub->StreamReports(&third.context, &third.summary);
  // The third makes room by closing the stream silent the longest: the first.
  EXPECT_EQ(open[0]->writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(MetricValue(server.http_port(), "ncclwatch_agent_plugin_streams_evicted_total"), 1);
  // The other two, never sending anything, are closed once silent for 200 ms.
  EXPECT_EQ(open[1]->writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(third.writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(MetricValue(server.http_port(), "ncclwatch_agent_plugin_streams_idle_closed_total"), 2);
}

// A raw connection to the unix socket `path` that never speaks; -1 if it cannot connect.
int ConnectSilently(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the agent closes the silent connection `fd` within `within`: the read sees its end
// (after whatever gRPC said first, its HTTP/2 settings).
bool ClosedByAgent(int fd, absl::Duration within) {
  const absl::Time give_up = absl::Now() + within;
  for (;;) {
    const int64_t left_ms = absl::ToInt64Milliseconds(give_up - absl::Now());
    pollfd p{fd, POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) != 1) return false;
    char buf[256];
    if (read(fd, buf, sizeof(buf)) <= 0) return true;
  }
}

// Polls the agent's /metrics until `name` reads `want` or 10 s have passed; returns the last.
double AwaitMetric(int http_port, const std::string& name, double want) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  double v = MetricValue(http_port, name);
  while (v != want && absl::Now() < give_up) v = MetricValue(http_port, name);
  return v;
}

TEST_F(AgentServerTest, OnePeerHoldsAtMostItsShareOfConnectionsAndSilentOnesAreClosed) {
  AgentServerOptions options = Options();
  options.plugins.max_per_peer = 2;  // this process is one peer (its uid)
  options.plugins.stream_deadline = absl::Milliseconds(500);
  options.shutdown_timeout = absl::Milliseconds(100);  // no aggregator to flush to
  AgentServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  // A plugin: one connection, with a stream open (the gauge says the agent has it).
  auto stub = ncclwatch::v1::Agent::NewStub(
      grpc::CreateChannel("unix://" + socket(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  auto writer = stub->StreamReports(&context, &summary);
  ASSERT_EQ(AwaitMetric(server.http_port(), "ncclwatch_agent_plugin_streams", 1), 1);

  const int silent = ConnectSilently(socket());
  const int over = ConnectSilently(socket());
  ASSERT_GE(silent, 0);
  ASSERT_GE(over, 0);
  // The third connection of one peer is closed as soon as accepted, before gRPC has it.
  EXPECT_TRUE(ClosedByAgent(over, absl::Seconds(10)));
  EXPECT_EQ(
      MetricValue(server.http_port(),
                  "ncclwatch_agent_plugin_connections_refused_total{reason=\"max_per_peer\"}"),
      1);
  // The second opens no stream: closed once its 500 ms are up.
  EXPECT_TRUE(ClosedByAgent(silent, absl::Seconds(10)));
  EXPECT_EQ(MetricValue(server.http_port(),
                        "ncclwatch_agent_plugin_connections_closed_total{reason=\"no_stream\"}"),
            1);
  EXPECT_EQ(AwaitMetric(server.http_port(), "ncclwatch_agent_plugin_connections", 1), 1);
  // The plugin, past the deadline too, is served as before.
  ASSERT_TRUE(writer->Write(PluginReport("job-c", 0)));
  writer->WritesDone();
  ASSERT_THAT(writer->Finish(), IsOk());
  EXPECT_EQ(summary.accepted(), 1u);
  close(silent);
  close(over);
}

TEST_F(AgentServerTest, ConnectionsBeyondTheOverallCapAreRefusedUntilOneEnds) {
  AgentServerOptions options = Options();
  options.plugins.max_connections = 1;
  AgentServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  const int first = ConnectSilently(socket());
  ASSERT_GE(first, 0);
  ASSERT_EQ(AwaitMetric(server.http_port(), "ncclwatch_agent_plugin_connections", 1), 1);
  const int second = ConnectSilently(socket());
  ASSERT_GE(second, 0);
  EXPECT_TRUE(ClosedByAgent(second, absl::Seconds(10)));
  EXPECT_EQ(
      MetricValue(server.http_port(),
                  "ncclwatch_agent_plugin_connections_refused_total{reason=\"max_connections\"}"),
      1);
  // The first ends: its place is free again.
  close(first);
  ASSERT_EQ(AwaitMetric(server.http_port(), "ncclwatch_agent_plugin_connections", 0), 0);
  const int third = ConnectSilently(socket());
  ASSERT_GE(third, 0);
  EXPECT_EQ(AwaitMetric(server.http_port(), "ncclwatch_agent_plugin_connections", 1), 1);
  EXPECT_FALSE(ClosedByAgent(third, absl::Milliseconds(200)))
      << "a connection within the cap is kept (its 10 s to open a stream are not up)";
  close(second);
  close(third);
}

TEST_F(AgentServerTest, AStreamSendingFasterThanItsRateLosesTheExcessNotTheOthers) {
  AgentServerOptions options = Options();
  // Refills 1 byte a second: the ~600 bytes a fourth report lacks after the burst take ten minutes,
  // far longer than ten writes take even on a loaded sanitizer build.
  options.streams.bytes_per_s = 1;
  options.streams.burst_bytes = 3000;
  options.shutdown_timeout = absl::Milliseconds(100);  // no aggregator to flush to
  AgentServer server(options);
  ASSERT_THAT(server.Start(), IsOk());
  auto stub = ncclwatch::v1::Agent::NewStub(
      grpc::CreateChannel("unix://" + socket(), grpc::InsecureChannelCredentials()));
  ncclwatch::v1::RankReport r;
  auto* id = r.mutable_identity();
  id->set_job_id("j");
  id->set_rank(0);
  id->set_nranks(1);
  id->set_n_nodes(1);
  id->set_comm_name(std::string(250, 'c'));
  for (int i = 0; i < 8; ++i) {
    auto* st = r.add_stats();
    st->set_op("AllReduce");
    st->set_message_size(std::string(60, 'm'));
    st->set_count(1);
  }
  ASSERT_GT(r.ByteSizeLong(), 800u);
  ASSERT_LT(r.ByteSizeLong(), 1000u);
  auto send = [&](int n) {
    grpc::ClientContext context;
    ncclwatch::v1::StreamSummary summary;
    auto writer = stub->StreamReports(&context, &summary);
    for (int i = 0; i < n; ++i) EXPECT_TRUE(writer->Write(r));
    writer->WritesDone();
    EXPECT_THAT(writer->Finish(), IsOk());
    return summary;
  };
  // The burst holds three; the other seven arrive far sooner than the bucket refills.
  ncclwatch::v1::StreamSummary fast = send(10);
  EXPECT_EQ(fast.accepted(), 3u);
  EXPECT_EQ(fast.rejected(), 7u);
  // Another stream has its own allowance.
  EXPECT_EQ(send(2).accepted(), 2u);
  auto res = httplib::Client("127.0.0.1", server.http_port()).Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("ncclwatch_agent_reports_rejected_total{reason=\"rate_limited\"} 7\n"),
            std::string::npos)
      << res->body;
}

}  // namespace
}  // namespace ncclwatch::agent
