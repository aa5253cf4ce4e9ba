// End to end: simjob (real plugin through the NCCL ABI) -> two agents on unix sockets -> the
// aggregator (real gRPC, real RocksDB) -> /federate, the Query API and the CLI.
#include <signal.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "common/sync.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

constexpr int kNodes = 2;
constexpr int kRanksPerNode = 4;

struct StragglerSeries {
  std::map<int, double> value_by_rank;
  std::map<int, std::string> node_by_rank;
};

StragglerSeries ParseStragglerSeries(const std::string& text) {
  StragglerSeries out;
  std::regex line(R"(^ncclwatch_straggler\{([^}]*)\} (\S+)$)");  // live: no timestamp
  std::regex rank_re(R"re(rank="(\d+)")re"), node_re(R"re(node="([^"]*)")re");
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    std::smatch m, r, n;
    if (!std::regex_match(l, m, line)) continue;
    std::string labels = m[1];
    if (!std::regex_search(labels, r, rank_re) || !std::regex_search(labels, n, node_re)) continue;
    int rank = std::stoi(r[1]);
    out.value_by_rank[rank] = std::stod(m[2]);
    out.node_by_rank[rank] = n[1];
  }
  return out;
}

// "/federate?match[]=<selector>" with the selector percent-encoded, as a browser or Prometheus
// would send it.
std::string Federate(const std::string& selector) {
  std::string out = "/federate?match%5B%5D=";
  for (unsigned char c : selector) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::vector<std::string> SimjobArgs(const Pipeline& p, const std::string& job, double seconds) {
  return {Binaries::Simjob(),
          "--plugin=" + Binaries::Plugin(),
          "--nodes=" + std::to_string(kNodes),
          "--ranks-per-node=" + std::to_string(kRanksPerNode),
          "--agent-addr=" + p.AgentAddrTemplate(),
          "--job-id=" + job,
          "--duration-s=" + std::to_string(seconds),
          "--clock-skew-ms=20",
          "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"};
}

TEST(EndToEndTest, SlowRankIsFlaggedWithinFiveSecondsAndNobodyElseEver) {
  Pipeline p(kNodes);
  ASSERT_TRUE(p.ok()) << p.error();
  EventRecorder events(p.query());

  auto args = SimjobArgs(p, "e2e-slow", 10);
  args.push_back("--slow-rank=5");
  args.push_back("--slow-us=2000");
  int64_t job_start = absl::GetCurrentTimeNanos();
  Process job(args, {}, p.dir() + "/simjob.log");
  // What follows is the job's state while it runs: its end ends its findings.
  ASSERT_TRUE(events.WaitFor(
      [](const ncclwatch::v1::Event& e) { return e.phase() == ncclwatch::v1::Event::START; }, 30))
      << p.Logs();
  // Until the flag is on /federate too.
  ASSERT_TRUE(PollUntil(
      [&] {
        return ParseStragglerSeries(p.Get(Federate("ncclwatch_straggler")).second)
                   .value_by_rank.count(5) == 1;
      },
      10));

  // The Query API: exactly rank 5's GPU, on the second node, slow itself by the 2 ms it adds.
  grpc::ClientContext ctx;
  ncclwatch::v1::ListStragglersResponse list;
  ASSERT_THAT(p.query().ListStragglers(&ctx, {}, &list), IsOk());
  ASSERT_EQ(list.root_causes_size(), 1) << list.DebugString() << p.Logs();
  EXPECT_EQ(list.root_causes(0).rank(), 5);
  EXPECT_EQ(list.root_causes(0).cuda_device(), 1);
  EXPECT_EQ(list.root_causes(0).node(), "sim-node-1");
  EXPECT_EQ(list.root_causes(0).job_id(), "e2e-slow");
  EXPECT_NEAR(list.root_causes(0).own_excess_seconds(), 0.002, 0.0006);
  // Its lateness is a consequence of its own time, not a straggler of its own.
  EXPECT_EQ(list.stragglers_size(), 0) << list.DebugString();

  // /federate: straggler=1 for rank 5, and no series for the others (per-rank flags are exported
  // only while set: docs/scale.md).
  auto [status, body] = p.Get(Federate("ncclwatch_straggler"));
  ASSERT_EQ(status, 200) << body;
  StragglerSeries series = ParseStragglerSeries(body);
  ASSERT_EQ(series.value_by_rank.size(), 1u) << body;
  EXPECT_EQ(series.value_by_rank[5], 1.0) << body;
  EXPECT_EQ(series.node_by_rank[5], "sim-node-1");

  // The Inspector-compatible series arrived too, with Inspector's label names.
  auto [s2, inspector] = p.Get(Federate("{__name__=~\"nccl_.*\",job_id=\"e2e-slow\"}"));
  ASSERT_EQ(s2, 200);
  for (const char* needle :
       {"nccl_bus_bandwidth_gbs{", "nccl_collective_exec_time_microseconds{",
        "nccl_p2p_bus_bandwidth_gbs{", "nccl_p2p_exec_time_microseconds{",
        "collective=\"AllReduce\"", "p2p_operation=\"Send\"", "algo_proto=\"RING_SIMPLE\"",
        "message_size=\"32-33MB\"", "n_nodes=\"2\"", "nranks=\"8\"", "gpu=\"GPU1\""}) {
    EXPECT_NE(inspector.find(needle), std::string::npos) << needle << "\n" << inspector;
  }

  // The CLI names the GPU, its node and its rank.
  auto [cli_code, cli_out] = RunToCompletion(
      {Binaries::Cli(), "stragglers", "--aggregator=" + p.AggregatorAddr()}, p.dir() + "/cli.log");
  EXPECT_EQ(cli_code, 3) << cli_out;  // findings
  EXPECT_NE(cli_out.find("Root cause: rank 5, GPU1 on node sim-node-1 (host "), std::string::npos)
      << cli_out;
  EXPECT_NE(cli_out.find("in communicator world (its rank 5)"), std::string::npos) << cli_out;

  ASSERT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();  // agents forward everything they hold, then exit
  // The event stream: one START, for rank 5, within 5 s of the job's start; no other rank ever.
  std::vector<EventRecorder::Received> received = events.Stop();
  int starts = 0;
  for (const auto& r : received) {
    ASSERT_EQ(r.event.straggler().rank(), 5) << r.event.summary();
    if (r.event.phase() == ncclwatch::v1::Event::END) {
      EXPECT_EQ(r.event.end_reason(), "job ended") << r.event.summary();
    }
    if (r.event.phase() == ncclwatch::v1::Event::START) {
      ++starts;
      double latency_s = (r.received_unix_ns - job_start) / 1e9;
      std::printf("straggler rank 5 flagged %.2f s after the job started: %s\n", latency_s,
                  r.event.summary().c_str());
      EXPECT_LE(latency_s, 5.0);
    }
  }
  EXPECT_EQ(starts, 1) << p.Logs();
}

TEST(EndToEndTest, CleanRunFlagsNobody) {
  Pipeline p(kNodes);
  ASSERT_TRUE(p.ok()) << p.error();
  EventRecorder events(p.query());
  Process job(SimjobArgs(p, "e2e-clean", 8), {}, p.dir() + "/simjob.log");
  // While it runs (its end forgets its state), once every rank has reported many collectives.
  ASSERT_TRUE(PollUntil(
      [&] {
        grpc::ClientContext stats_ctx;
        ncclwatch::v1::Stats stats;
        return p.query().GetStats(&stats_ctx, {}, &stats).ok() && stats.groups_completed() > 100;
      },
      30))
      << p.Logs();
  grpc::ClientContext ctx;
  ncclwatch::v1::ListStragglersResponse list;
  ASSERT_THAT(p.query().ListStragglers(&ctx, {}, &list), IsOk());
  EXPECT_EQ(list.stragglers_size(), 0) << list.DebugString();

  // Not vacuous: the detector saw every rank of many collectives.
  grpc::ClientContext stats_ctx;
  ncclwatch::v1::Stats stats;
  ASSERT_THAT(p.query().GetStats(&stats_ctx, {}, &stats), IsOk());
  EXPECT_GT(stats.groups_completed(), 100u) << stats.DebugString();
  // No rank flagged: no straggler series at all (exported only while set), while the
  // communicator's own series say it is healthy.
  auto [status, body] = p.Get(Federate("ncclwatch_straggler"));
  ASSERT_EQ(status, 200) << body;
  EXPECT_TRUE(ParseStragglerSeries(body).value_by_rank.empty()) << body;
  auto [hang_status, hang] = p.Get(Federate("ncclwatch_hang"));
  ASSERT_EQ(hang_status, 200) << hang;
  EXPECT_NE(hang.find("ncclwatch_hang{job_id=\"e2e-clean\""), std::string::npos) << hang;
  EXPECT_EQ(hang.find("} 1"), std::string::npos) << hang;
  ASSERT_EQ(job.Wait(), 0) << job.Log();
  ASSERT_TRUE(p.StopAgents()) << p.Logs();
  EXPECT_TRUE(events.Stop().empty()) << "nothing flagged, so nothing ended with the job";
}

// What promtool (from the prometheus package) finds in an exposition, one finding per line; the
// only lint allowed is the unit of the two NCCL Inspector names, which compatibility fixes.
void ExpectLintClean(const Pipeline& p, const std::string& what, const std::string& body) {
  const std::string file = p.dir() + "/exposition.txt";
  std::ofstream(file) << body;
  auto [lint, findings] = RunToCompletion({"/bin/sh", "-c", "promtool check metrics < " + file},
                                          p.dir() + "/promtool.log");
  ASSERT_TRUE(lint == 0 || lint == 3) << what << ": promtool could not parse it:\n" << findings;
  std::istringstream lines(findings);
  std::string finding;
  while (std::getline(lines, finding)) {
    const bool inspector_unit =
        finding ==
            "nccl_collective_exec_time_microseconds use base unit \"seconds\" instead "
            "of \"microseconds\"" ||
        finding ==
            "nccl_p2p_exec_time_microseconds use base unit \"seconds\" instead of "
            "\"microseconds\"";
    EXPECT_TRUE(inspector_unit) << what << ": promtool: " << finding;
  }
}

TEST(EndToEndTest, HttpEndpointsAreWellFormed) {
  Pipeline p(1);
  ASSERT_TRUE(p.ok()) << p.error();
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=1",
               "--ranks-per-node=2", "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=e2e-http",
               "--duration-s=15", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=200"},
              {}, p.dir() + "/simjob.log");
  // While the job runs, all three expositions hold its NCCL Inspector series.
  const std::string job_federate = Federate("{job_id=\"e2e-http\"}");
  ASSERT_TRUE(PollUntil(
      [&] {
        return p.Get(job_federate).second.find("nccl_p2p_exec_time_microseconds{") !=
                   std::string::npos &&
               p.AgentGet(0, "/metrics").second.find("nccl_bus_bandwidth_gbs{") !=
                   std::string::npos;
      },
      30))
      << p.Logs();

  EXPECT_EQ(p.Get("/healthz").first, 200);
  for (std::string bad :
       {std::string("/federate"), Federate("up{"), Federate("{}"), Federate("{x=~\"(\"}")}) {
    auto [status, body] = p.Get(bad);
    EXPECT_EQ(status, 400) << bad;
    EXPECT_FALSE(body.empty()) << bad;
  }
  const std::pair<std::string, std::pair<int, std::string>> expositions[] = {
      {"aggregator /federate", p.Get(job_federate)},
      {"aggregator /metrics", p.Get("/metrics")},
      {"agent /metrics", p.AgentGet(0, "/metrics")}};
  for (const auto& [what, answer] : expositions) {
    ASSERT_EQ(answer.first, 200) << what;
    ExpectLintClean(p, what, answer.second);
  }
  // Each daemon exports what every exporter has: process_* and its build.
  for (const auto& [index, prefix] :
       {std::pair<int, std::string>{1, "ncclwatch_aggregator"}, {2, "ncclwatch_agent"}}) {
    const std::string& what = expositions[index].first;
    const std::string& text = expositions[index].second.second;
    for (const std::string name :
         {"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
          "process_max_fds ", "process_start_time_seconds ", "process_virtual_memory_bytes "}) {
      EXPECT_NE(text.find("\n" + name), std::string::npos) << what << ": " << name;
    }
    EXPECT_NE(text.find(prefix + "_build_info{version=\""), std::string::npos) << what;
  }
  // The healthy job's detection series: per communicator (per-rank ones only while set).
  EXPECT_NE(expositions[0].second.second.find("# TYPE ncclwatch_hang gauge\n"), std::string::npos);
  EXPECT_EQ(expositions[0].second.second.find("ncclwatch_straggler{"), std::string::npos);

  // A selector as `curl -g` sends it, unencoded, is the same selector.
  const std::string url =
      "http://127.0.0.1:" + std::to_string(p.http_port()) +
      "/federate?match[]=nccl_bus_bandwidth_gbs{job_id=\"e2e-http\",rank=\"1\"}";
  auto [curl, fetched] = RunToCompletion({"curl", "-g", "-s", "-w", "\nHTTP %{http_code}\n", url},
                                         p.dir() + "/curl.log");
  ASSERT_EQ(curl, 0) << fetched;
  EXPECT_NE(fetched.find("\nHTTP 200\n"), std::string::npos) << fetched;
  EXPECT_NE(fetched.find("rank=\"1\""), std::string::npos) << fetched;
  EXPECT_EQ(fetched.find("rank=\"0\""), std::string::npos) << fetched;

  // Every binary names its version.
  for (const auto& [binary, name] :
       {std::pair<std::string, std::string>{Binaries::Aggregator(), "ncclwatch-aggregator"},
        {Binaries::Agent(), "ncclwatch-agent"},
        {Binaries::Cli(), "ncclwatch"}}) {
    auto [code, out] = RunToCompletion({binary, "--version"}, p.dir() + "/version.log");
    EXPECT_EQ(code, 0) << out;
    EXPECT_EQ(out.rfind(name + " 0.", 0), 0u) << out;
    EXPECT_NE(out.find(" (git "), std::string::npos) << out;
  }
  EXPECT_EQ(job.Wait(), 0) << job.Log();
}

}  // namespace
}  // namespace ncclwatch::testing

namespace ncclwatch::testing {
namespace {

// grpc.health.v1.Health/Check with an empty service name, through a generic stub (no generated
// code for the health protocol here): the request is the empty message, the answer is
// HealthCheckResponse{status: SERVING} = field 1, varint 1 = bytes 08 01.
TEST(EndToEndTest, AggregatorAnswersTheStandardGrpcHealthCheck) {
  Pipeline p(0);
  ASSERT_TRUE(p.ok()) << p.error();
  auto channel = grpc::CreateChannel(p.AggregatorAddr(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice no_bytes(std::string{});
  grpc::ByteBuffer request(&no_bytes, 1);  // the empty HealthCheckRequest
  grpc::ByteBuffer response;
  grpc::Status status;
  ncclwatch::Mutex mu;
  bool done = false;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   ncclwatch::MutexLock lock(&mu);
                   status = std::move(s);
                   done = true;
                 });
  ncclwatch::MutexLock lock(&mu);
  mu.Await(absl::Condition(&done));
  ASSERT_THAT(status, IsOk()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_THAT(response.Dump(&slices), IsOk());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

}  // namespace
}  // namespace ncclwatch::testing
