// Hostile input against the real aggregator: reports whose claims would cost memory and disk in
// proportion to what they claim rather than to what really reports (docs/security.md). Real
// daemon, real gRPC, real RocksDB; memory read from /proc, disk from the data directory.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/query.grpc.pb.h"
#include "ncclwatch/v1/report.grpc.pb.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

constexpr int kHugeNranks = 1 << 20;  // the most validation accepts

// Resident set of `pid` in MiB (VmRSS), -1 if unreadable.
double RssMib(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

double DirMib(const std::string& dir) {
  uintmax_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  return bytes / 1048576.0;
}

double Counter(const Pipeline& p, const std::string& name) {
  auto [code, body] = p.Get("/metrics");
  const size_t at = body.find("\n" + name + " ");
  return code == 200 && at != std::string::npos ? std::stod(body.substr(at + name.size() + 2)) : -1;
}

// Waits until the aggregator has taken `n` more detection snapshots (one a second with
// --history-step-s=1, which the tests below pass): what a tick
// stores, for every series the analysis has, has then been stored at least `n` times.
bool WaitForSnapshots(const Pipeline& p, int n) {
  const std::string name = "ncclwatch_aggregator_detection_snapshots_total";
  const double start = Counter(p, name);
  return PollUntil([&] { return Counter(p, name) >= start + n; }, 30);
}

// Pushes `batch` as an agent does; it must be acknowledged with every report taken.
void PushTaken(ncclwatch::v1::Ingest::Stub& ingest, const ncclwatch::v1::NodeBatch& batch) {
  grpc::ClientContext context;
  ncclwatch::v1::BatchAck ack;
  grpc::Status s = ingest.Push(&context, batch, &ack);
  ASSERT_THAT(s, IsOk()) << s.error_message();
  EXPECT_EQ(ack.rejected_reports(), 0u);
}

// One report of rank nranks-1 of a communicator claiming kHugeNranks ranks: 4,096 collectives
// (every one an open group waiting for a million ranks), one collective stuck for 20 s (a hang
// that the other million ranks never reached) and a few statistics.
ncclwatch::v1::RankReport HugeReport(const std::string& job, int64_t now_ns) {
  ncclwatch::v1::RankReport r;
  r.set_report_id(std::hash<std::string>()(job));
  auto* id = r.mutable_identity();
  id->set_job_id(job);
  id->set_comm_hash(0xbad);
  id->set_comm_name("claimed-world");
  id->set_rank(kHugeNranks - 1);
  id->set_nranks(kHugeNranks);
  id->set_n_nodes(kHugeNranks / 8);
  id->set_node("intruder");
  id->set_pid(4242);
  r.set_interval_start_unix_ns(now_ns - 1'000'000'000);
  r.set_interval_end_unix_ns(now_ns);
  auto* col = r.add_sample_columns();
  col->set_op("AllReduce");
  col->set_bytes(1 << 20);
  col->set_channels(1);
  for (int i = 0; i < 4096; ++i) {
    col->add_seq_delta(1);
    col->add_gpu_start_delta_ns(1000);
    col->add_duration_ns(50'000);
  }
  auto* stuck = r.add_in_flight();
  stuck->set_op("AllReduce");
  stuck->set_seq(5000);
  stuck->set_age_ns(20'000'000'000);
  r.set_in_flight_count(1);
  auto* stats = r.add_stats();
  stats->set_op("AllReduce");
  stats->set_message_size("1-2MB");
  stats->set_algo_proto("RING_SIMPLE");
  stats->set_peer(-1);
  stats->set_count(4096);
  stats->set_bytes(uint64_t{4096} << 20);
  stats->set_exec_time_us_sum(4096 * 50.0);
  stats->set_exec_time_us_min(50);
  stats->set_exec_time_us_max(50);
  return r;
}

TEST(HostileInputTest, AReportClaimingAMillionRanksCostsWhatReportsBeforeAndAfterARestart) {
  Pipeline p(0, {"--hang-threshold-s=1", "--silent-after-s=1", "--history-step-s=1"});
  ASSERT_TRUE(p.ok()) << p.error();
  ASSERT_TRUE(WaitForSnapshots(p, 2)) << p.Logs();
  const double rss_before = RssMib(p.aggregator_pid());
  ASSERT_GT(rss_before, 0);

  // Four such reports, as four jobs, each acknowledged (stored) by the aggregator.
  auto ingest = ncclwatch::v1::Ingest::NewStub(
      grpc::CreateChannel(p.AggregatorAddr(), grpc::InsecureChannelCredentials()));
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (int i = 0; i < 4; ++i) {
    ncclwatch::v1::NodeBatch batch;
    batch.set_agent_id("intruder");
    batch.set_batch_seq(i + 1);
    batch.set_node("intruder");
    batch.set_sent_unix_ns(now_ns);
    *batch.add_reports() = HugeReport("poison-" + std::to_string(i), now_ns);
    PushTaken(*ingest, batch);
  }
  ASSERT_TRUE(WaitForSnapshots(p, 3)) << p.Logs();

  // It is still analysed: a hang naming the ranks that never arrived, a bounded number of them.
  grpc::ClientContext context;
  ncclwatch::v1::ListHangsRequest request;
  request.set_job_id("poison-0");
  ncclwatch::v1::ListHangsResponse hangs;
  ASSERT_THAT(p.query().ListHangs(&context, request, &hangs), IsOk());
  ASSERT_EQ(hangs.hangs_size(), 1);
  EXPECT_EQ(hangs.hangs(0).missing_count(), static_cast<uint32_t>(kHugeNranks - 1));
  EXPECT_EQ(hangs.hangs(0).missing_size(), 256);

  const double rss_after = RssMib(p.aggregator_pid());
  const double disk_after = DirMib(p.dir() + "/db");
  std::printf("aggregator RSS %.1f -> %.1f MiB (+%.1f), data directory %.1f MiB\n", rss_before,
              rss_after, rss_after - rss_before, disk_after);
  EXPECT_LE(rss_after - rss_before, 100) << p.Logs();
  EXPECT_LE(disk_after, 50);

  // A restart replays the stored batches into the detectors: the poison costs no more then.
  ASSERT_TRUE(p.RestartAggregator()) << p.error();
  ASSERT_TRUE(WaitForSnapshots(p, 3)) << p.Logs();
  const double rss_restarted = RssMib(p.aggregator_pid());
  const double disk_restarted = DirMib(p.dir() + "/db");
  std::printf("after a restart: aggregator RSS %.1f MiB (+%.1f), data directory %.1f MiB\n",
              rss_restarted, rss_restarted - rss_before, disk_restarted);
  EXPECT_LE(rss_restarted - rss_before, 100) << p.Logs();
  EXPECT_LE(disk_restarted, 50);
}

// One agent's batches of many ranks, each with long-labelled statistics: the series they make held
// the aggregator's memory in proportion to the bytes sent, and the store's index kept them for
// good.
TEST(HostileInputTest, AFloodOfLongLabelledSeriesFromOneAgentCostsItsBudgetNotTheAggregator) {
  Pipeline p(0, {"--max-series-mib-per-agent=8", "--history-step-s=1"});
  ASSERT_TRUE(p.ok()) << p.error();
  ASSERT_TRUE(WaitForSnapshots(p, 2)) << p.Logs();
  const double rss_before = RssMib(p.aggregator_pid());
  auto ingest = ncclwatch::v1::Ingest::NewStub(
      grpc::CreateChannel(p.AggregatorAddr(), grpc::InsecureChannelCredentials()));
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const std::string comm_name(250, 'c');  // labels may be 256 bytes long
  size_t sent = 0;
  for (int b = 0; b < 8; ++b) {
    ncclwatch::v1::NodeBatch batch;
    batch.set_agent_id("inventor");
    batch.set_batch_seq(b + 1);
    batch.set_node("inventor");
    batch.set_sent_unix_ns(now_ns);
    for (int i = 0; i < 250; ++i) {
      const int rank = b * 250 + i;
      auto* r = batch.add_reports();
      r->set_report_id(static_cast<uint64_t>(rank + 1));
      auto* id = r->mutable_identity();
      id->set_job_id("invented");
      id->set_comm_hash(0x1);
      id->set_comm_name(comm_name);
      id->set_rank(rank);
      id->set_nranks(2000);
      id->set_n_nodes(250);
      id->set_node(std::string(240, 'n') + std::to_string(rank));
      r->set_interval_end_unix_ns(now_ns);
      for (int k = 0; k < 40; ++k) {
        auto* st = r->add_stats();
        st->set_op("AllReduce");
        st->set_algo_proto("RING_SIMPLE");
        st->set_message_size(std::string(250, 'm') + std::to_string(k));
        st->set_peer(-1);
        st->set_count(1);
        st->set_exec_time_us_sum(10);
      }
    }
    sent += batch.ByteSizeLong();
    PushTaken(*ingest, batch);
  }
  ASSERT_TRUE(WaitForSnapshots(p, 3)) << p.Logs();
  const double rss_after = RssMib(p.aggregator_pid());
  const double capped = Counter(p, "ncclwatch_aggregator_series_capped_by_agent_total");
  std::printf("%.1f MiB sent by one agent: aggregator RSS %.1f -> %.1f MiB, %.0f series refused\n",
              sent / 1048576.0, rss_before, rss_after, capped);
  EXPECT_GT(capped, 0) << "2,000 ranks x 40 statistics of long labels exceed 8 MiB";
  EXPECT_LT(rss_after - rss_before, 100) << p.Logs();
}

// A connection to 127.0.0.1:port (reads give up after 2 s); -1 if refused.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

TEST(HostileInputTest, IdleConnectionsAndHugeBodiesLeaveBothDaemonsHttpAnswering) {
  Pipeline p(1);
  ASSERT_TRUE(p.ok()) << p.error();
  for (const auto& [who, port] : {std::pair<std::string, int>{"aggregator", p.http_port()},
                                  {"agent", p.agent_http_port(0)}}) {
    SCOPED_TRACE(who);
    std::vector<int> idle;
    for (int i = 0; i < 64; ++i) idle.push_back(Connect(port));
    // The probe, and a real scrape, within 1 s (the client's timeout) with 64 idle connections.
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(1, 0);
    client.set_read_timeout(1, 0);
    auto health = client.Get("/healthz");
    ASSERT_TRUE(health) << httplib::to_string(health.error());
    EXPECT_EQ(health->status, 200);
    auto scrape = client.Get("/metrics");
    ASSERT_TRUE(scrape);
    EXPECT_EQ(scrape->status, 200);
    // A 64 MiB POST: refused from its head, before a byte of the body is sent.
    const int big = Connect(port);
    const std::string head = "POST /federate HTTP/1.1\r\nContent-Length: 67108864\r\n\r\n";
    send(big, head.data(), head.size(), MSG_NOSIGNAL);
    char buf[256] = {};
    const ssize_t n = recv(big, buf, sizeof(buf) - 1, 0);
    EXPECT_GT(n, 0);
    EXPECT_EQ(std::string(buf).substr(0, 12), "HTTP/1.1 413") << buf;
    close(big);
    for (int fd : idle) close(fd);
  }
}

// Waits until job `job` has one communicator in which `ranks` ranks have reported; `comms` holds
// the last answer.
bool WaitForRanks(Pipeline& p, const std::string& job, int ranks,
                  ncclwatch::v1::ListCommsResponse* comms) {
  return PollUntil(
      [&] {
        grpc::ClientContext ctx;
        ncclwatch::v1::ListCommsRequest request;
        request.set_job_id(job);
        comms->Clear();
        return p.query().ListComms(&ctx, request, comms).ok() && comms->comms_size() == 1 &&
               comms->comms(0).ranks_size() == ranks;
      },
      30);
}

TEST(HostileInputTest, APodAndNodeClaimedByAPluginAreNotTrusted) {
  Pipeline p(1, {}, {"--pod-resources-socket="});
  ASSERT_TRUE(p.ok()) << p.error();
  auto stub = ncclwatch::v1::Agent::NewStub(grpc::CreateChannel(
      "unix://" + p.dir() + "/agent-0.sock", grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  auto writer = stub->StreamReports(&context, &summary);
  ncclwatch::v1::RankReport r;
  r.set_report_id(77);
  auto* id = r.mutable_identity();
  id->set_job_id("impostor");
  id->set_comm_hash(0x1);
  id->set_rank(0);
  id->set_nranks(2);
  id->set_n_nodes(1);
  id->set_node("gpu-node-17");
  id->set_pod("victim-pod-0");
  id->set_pod_namespace("prod-ns");
  id->set_container("trainer");
  r.set_interval_end_unix_ns(1'700'000'000'000'000'000);
  ASSERT_TRUE(writer->Write(r));
  writer->WritesDone();
  ASSERT_THAT(writer->Finish(), IsOk());
  ASSERT_EQ(summary.accepted(), 1u);

  ncclwatch::v1::ListCommsResponse comms;
  ASSERT_TRUE(WaitForRanks(p, "impostor", 1, &comms)) << p.Logs();
  ASSERT_EQ(comms.comms(0).ranks_size(), 1);
  const auto& rank = comms.comms(0).ranks(0);
  EXPECT_EQ(rank.node(), "sim-node-0") << "the agent's node, not the claimed one";
  EXPECT_EQ(rank.pod(), "");
  EXPECT_EQ(rank.pod_namespace(), "");
  EXPECT_EQ(rank.container(), "");
}

// One report for each of ranks 0..n-1 of job "neighbour", on one stream.
void WriteGenuineReports(const std::string& socket, int n) {
  auto stub = ncclwatch::v1::Agent::NewStub(
      grpc::CreateChannel(socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  auto writer = stub->StreamReports(&context, &summary);
  for (int rank = 0; rank < n; ++rank) {
    ncclwatch::v1::RankReport r;
    r.set_report_id(9000 + rank);
    auto* id = r.mutable_identity();
    id->set_job_id("neighbour");
    id->set_comm_hash(0xbeef);
    id->set_rank(rank);
    id->set_nranks(n);
    id->set_n_nodes(1);
    r.set_interval_end_unix_ns(1'700'000'000'000'000'000);
    if (!writer->Write(r)) break;
  }
  writer->WritesDone();
  EXPECT_THAT(writer->Finish(), IsOk());
  EXPECT_EQ(summary.accepted(), static_cast<uint64_t>(n));
}

// A valid report of about 3.4 MiB (400,000 samples and 10,000 statistics), as a plugin could send.
ncclwatch::v1::RankReport HeavyReport(uint64_t id) {
  ncclwatch::v1::RankReport r;
  r.set_report_id(id);
  auto* identity = r.mutable_identity();
  identity->set_job_id("flood");
  identity->set_comm_hash(0xf100d);
  identity->set_rank(0);
  identity->set_nranks(2);
  identity->set_n_nodes(1);
  r.set_interval_end_unix_ns(1'700'000'000'000'000'000);
  auto* col = r.add_sample_columns();
  col->set_op("AllReduce");
  col->set_channels(1);
  for (int i = 0; i < 400'000; ++i) {
    col->add_seq_delta(1);
    col->add_gpu_start_delta_ns(1'000'000);
    col->add_duration_ns(100'000);
  }
  for (int i = 0; i < 10'000; ++i) {
    auto* st = r.add_stats();
    st->set_op("AllReduce");
    st->set_algo_proto("RING_SIMPLE");
    st->set_message_size(std::to_string(i) + "-" + std::to_string(i + 1) + "KB");
    st->set_peer(-1);
    st->set_count(1);
    st->set_exec_time_us_sum(100);
  }
  return r;
}

// Reports that are small as sent but large as rendered: 512 statistics each, under a long job id
// that every sample repeats. The node-local Inspector budget had counted the reports' bytes (16 MiB
// of them rendered as a 70 MB page and took the agent from 61 to 415 MB): it is the page now.
TEST(HostileInputTest, ReportsThatRenderLargeKeepTheAgentsScrapeWithinItsBudget) {
  Pipeline p(1, {}, {"--pod-resources-socket="});
  ASSERT_TRUE(p.ok()) << p.error();
  const std::string socket = "unix://" + p.dir() + "/agent-0.sock";
  const double rss_before = RssMib(p.agent_pid(0));
  const std::string job = "render-" + std::string(200, 'x');
  size_t sent = 0;
  std::vector<std::thread> streams;
  std::atomic<size_t> sent_bytes{0};
  for (int s = 0; s < 10; ++s) {
    streams.emplace_back([&, s] {
      auto stub = ncclwatch::v1::Agent::NewStub(
          grpc::CreateChannel(socket, grpc::InsecureChannelCredentials()));
      grpc::ClientContext context;
      ncclwatch::v1::StreamSummary summary;
      auto writer = stub->StreamReports(&context, &summary);
      for (int i = 0; i < 100; ++i) {
        const int rank = s * 100 + i;
        ncclwatch::v1::RankReport r;
        r.set_report_id(static_cast<uint64_t>(rank + 1));
        auto* id = r.mutable_identity();
        id->set_job_id(job);
        id->set_comm_hash(0x5ca1e);
        id->set_rank(rank);
        id->set_nranks(1000);
        id->set_n_nodes(125);
        r.set_interval_end_unix_ns(1'700'000'000'000'000'000);
        for (int k = 0; k < 512; ++k) {
          auto* st = r.add_stats();
          st->set_op("AllReduce");
          st->set_algo_proto("RING_SIMPLE");
          st->set_message_size(std::to_string(k) + "-" + std::to_string(k + 1) + "KB");
          st->set_peer(-1);
          st->set_count(1);
          st->set_exec_time_us_sum(100);
          st->set_bw_samples(1);
          st->set_bus_bw_gbs_log_sum(1);
        }
        sent_bytes += r.ByteSizeLong();
        if (!writer->Write(r)) break;
      }
      writer->WritesDone();
      EXPECT_THAT(writer->Finish(), IsOk());  // answered once the agent has handled every report
    });
  }
  for (auto& t : streams) t.join();
  sent = sent_bytes.load();

  auto [code, metrics] = p.AgentGet(0, "/metrics");
  ASSERT_EQ(code, 200);
  const double rss = RssMib(p.agent_pid(0));
  std::printf("%.1f MiB of reports: agent /metrics %.1f MiB, RSS %.1f -> %.1f MiB\n",
              sent / 1048576.0, metrics.size() / 1048576.0, rss_before, rss);
  EXPECT_GT(sent, 16u << 20) << "the reports alone exceed the budget";
  EXPECT_LT(metrics.size(), 18u << 20) << "16 MiB of Inspector series and the agent's own";
  EXPECT_NE(metrics.find("nccl_bus_bandwidth_gbs{job_id=\"" + job), std::string::npos);
  EXPECT_EQ(metrics.find("ncclwatch_agent_inspector_series_capped_total 0\n"), std::string::npos);
  EXPECT_LT(rss, 256) << "the chart's memory limit for the agent";
}

TEST(HostileInputTest, NineThousandIdleStreamsAndAReportFloodLeaveTheAgentBoundedAndFair) {
  // The stream caps are the subject: the idle streams and the genuine neighbour are all one peer
  // (this process's uid), which --max-plugin-connections-per-peer would otherwise stop at 64
  // connections (AgentServerTest.OnePeerHoldsAtMostItsShareOfConnectionsAndSilentOnesAreClosed).
  Pipeline p(1, {}, {"--pod-resources-socket=", "--max-plugin-connections-per-peer=1024"});
  ASSERT_TRUE(p.ok()) << p.error();
  const std::string socket = "unix://" + p.dir() + "/agent-0.sock";
  const double rss_before = RssMib(p.agent_pid(0));

  // 9,000 streams that never send, on 600 connections (15 each).
  struct Idle {
    grpc::ClientContext context;
    ncclwatch::v1::StreamSummary summary;
    std::unique_ptr<grpc::ClientWriter<ncclwatch::v1::RankReport>> writer;
  };
  std::vector<std::unique_ptr<ncclwatch::v1::Agent::Stub>> stubs;
  std::vector<std::unique_ptr<Idle>> idle;
  for (int c = 0; c < 600; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
    stubs.push_back(ncclwatch::v1::Agent::NewStub(
        grpc::CreateCustomChannel(socket, grpc::InsecureChannelCredentials(), args)));
    for (int s = 0; s < 15; ++s) {
      idle.push_back(std::make_unique<Idle>());
      idle.back()->writer =
          stubs.back()->StreamReports(&idle.back()->context, &idle.back()->summary);
    }
  }
  // One stream floods 3.4 MiB reports as fast as it can.
  const ncclwatch::v1::RankReport heavy = HeavyReport(1);
  ASSERT_GT(heavy.ByteSizeLong(), 3u << 20);
  ASSERT_LT(heavy.ByteSizeLong(), 4u << 20);
  std::thread flood([&] {
    auto stub = ncclwatch::v1::Agent::NewStub(
        grpc::CreateChannel(socket, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    ncclwatch::v1::StreamSummary summary;
    auto writer = stub->StreamReports(&context, &summary);
    for (int i = 0; i < 60 && writer->Write(heavy); ++i) {
    }
    writer->WritesDone();
    writer->Finish();
  });
  // A genuine neighbour: 20 ranks of its own job, one report each, on its own stream.
  WriteGenuineReports(socket, 20);
  flood.join();

  // Every one of the neighbour's ranks reached the aggregator.
  ncclwatch::v1::ListCommsResponse comms;
  EXPECT_TRUE(WaitForRanks(p, "neighbour", 20, &comms)) << comms.DebugString() << p.Logs();
  const double rss = RssMib(p.agent_pid(0));
  auto [code, metrics] = p.AgentGet(0, "/metrics");
  ASSERT_EQ(code, 200);
  std::printf(
      "agent RSS %.1f -> %.1f MiB with 9,000 streams attempted and a 3.4 MiB flood; "
      "/metrics %.1f MiB\n",
      rss_before, rss, metrics.size() / 1048576.0);
  EXPECT_LT(rss, 256) << "the chart's memory limit for the agent";
  EXPECT_LT(metrics.size(), 16u << 20);
  EXPECT_NE(metrics.find("ncclwatch_agent_plugin_streams_evicted_total "), std::string::npos);
  EXPECT_EQ(metrics.find("ncclwatch_agent_plugin_streams_evicted_total 0\n"), std::string::npos)
      << "streams beyond the cap made room by closing silent ones";
  EXPECT_EQ(metrics.find("reason=\"rate_limited\"} 0\n"), std::string::npos)
      << "the flood was rate-limited";
  for (auto& i : idle) {
    i->context.TryCancel();
    i->writer->Finish();
  }
}

}  // namespace
}  // namespace ncclwatch::testing
