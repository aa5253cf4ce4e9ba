// Who may write to the aggregator: over mutual TLS, only an agent whose certificate the cluster's
// CA signed, and, with an ingest token, only one that also sends it. Real daemons, real TLS
// handshakes over real sockets; certificates made by openssl for the test.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/daemon.h"
#include "common/status_matchers.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/report.grpc.pb.h"
#include "tests/e2e/pipeline.h"
#include "tests/e2e/process.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

// The value of the sample `name` (exact name and labels as rendered), -1 if absent.
double Sample(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

double AgentSample(const Process& agent, const std::string& name) {
  httplib::Client client("127.0.0.1", agent.ReadyValue("http_port"));
  auto res = client.Get("/metrics");
  return res ? Sample(res->body, name) : -1;
}

// Writes `n` valid reports of job `job` into the agent listening on `socket`, as a plugin does.
void WriteReports(const std::string& socket, const std::string& job, int n) {
  auto stub = ncclwatch::v1::Agent::NewStub(
      grpc::CreateChannel(socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  auto writer = stub->StreamReports(&context, &summary);
  for (int i = 0; i < n; ++i) {
    ncclwatch::v1::RankReport r;
    r.set_report_id((std::hash<std::string>()(job) << 16) + static_cast<uint64_t>(i));
    auto* id = r.mutable_identity();
    id->set_job_id(job);
    id->set_comm_hash(0x5ec);
    id->set_rank(i % 4);
    id->set_nranks(4);
    id->set_n_nodes(1);
    r.set_interval_start_unix_ns(1'700'000'000'000'000'000 + i);
    r.set_interval_end_unix_ns(1'700'000'001'000'000'000 + i);
    ASSERT_TRUE(writer->Write(r));
  }
  writer->WritesDone();
  ASSERT_THAT(writer->Finish(), IsOk());
  EXPECT_EQ(summary.accepted(), static_cast<uint64_t>(n));
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [code, out] = RunToCompletion(
        {"bash", NCCLWATCH_SOURCE_DIR "/tests/e2e/make-test-certs.sh", certs_.path()},
        certs_.path() + "/openssl.log");
    ASSERT_EQ(code, 0) << out;
    std::ofstream(certs_.path() + "/token") << "s3cret-ingest-token\n";
    std::ofstream(certs_.path() + "/wrong-token") << "guess\n";
  }

  std::string Cert(const std::string& name) const { return certs_.path() + "/" + name; }

  // An agent on its own socket, forwarding to `aggregator` with `flags`.
  std::unique_ptr<Process> Agent(const std::string& name, const std::string& aggregator,
                                 std::vector<std::string> flags) {
    std::vector<std::string> argv = {Binaries::Agent(),
                                     "--listen=unix://" + certs_.path() + "/" + name + ".sock",
                                     "--aggregator=" + aggregator,
                                     "--http-port=0",
                                     "--node-name=" + name,
                                     "--batch-interval-ms=50",
                                     "--pod-resources-socket="};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto agent = std::make_unique<Process>(argv, std::map<std::string, std::string>{},
                                           certs_.path() + "/" + name + ".log", "--ready-fd");
    EXPECT_GT(agent->ReadyValue("http_port"), 0) << agent->Log();
    return agent;
  }
  std::string Socket(const std::string& name) const {
    return "unix://" + certs_.path() + "/" + name + ".sock";
  }

  ScopedTempDir certs_{"ncclwatch-certs"};
};

TEST_F(SecurityTest, OnlyAnAgentWithACertificateFromTheClusterCaAndTheTokenCanWrite) {
  Pipeline p(0, {"--tls-cert-file=" + Cert("server.pem"), "--tls-key-file=" + Cert("server.key"),
                 "--tls-client-ca-file=" + Cert("ca.pem"), "--ingest-token-file=" + Cert("token")});
  ASSERT_TRUE(p.ok()) << p.error();
  const std::string agg = p.AggregatorAddr();
  const std::vector<std::string> trust = {"--aggregator-ca-file=" + Cert("ca.pem")};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), trust.begin(), trust.end());
    return more;
  };
  const std::string failures = "ncclwatch_agent_push_failures_total{aggregator=\"" + agg + "\"}";
  const std::string forwarded =
      "ncclwatch_agent_reports_forwarded_total{aggregator=\"" + agg + "\"}";

  // Three intruders, each refused at a different layer.
  auto plaintext = Agent("plaintext", agg, {});
  auto no_cert = Agent("no-cert", agg, with({"--aggregator-token-file=" + Cert("token")}));
  auto rogue = Agent("rogue", agg,
                     with({"--aggregator-cert-file=" + Cert("rogue.pem"),
                           "--aggregator-key-file=" + Cert("rogue.key"),
                           "--aggregator-token-file=" + Cert("token")}));
  auto bad_token = Agent("bad-token", agg,
                         with({"--aggregator-cert-file=" + Cert("client.pem"),
                               "--aggregator-key-file=" + Cert("client.key"),
                               "--aggregator-token-file=" + Cert("wrong-token")}));
  for (const char* name : {"plaintext", "no-cert", "rogue", "bad-token"}) {
    WriteReports(Socket(name), std::string("job-") + name, 20);
  }
  for (const Process* intruder : {plaintext.get(), no_cert.get(), rogue.get(), bad_token.get()}) {
    EXPECT_TRUE(PollUntil([&] { return AgentSample(*intruder, failures) >= 2; }, 20))
        << intruder->Log();
    EXPECT_EQ(AgentSample(*intruder, forwarded), 0) << intruder->Log();
  }
  auto metrics = p.Get("/metrics").second;
  EXPECT_EQ(Sample(metrics, "ncclwatch_aggregator_reports_ingested_total"), 0) << metrics;
  EXPECT_GE(Sample(metrics, "ncclwatch_aggregator_pushes_unauthenticated_total"), 2) << metrics;

  // The genuine agent: the cluster CA's certificate and the token.
  auto genuine = Agent("genuine", agg,
                       with({"--aggregator-cert-file=" + Cert("client.pem"),
                             "--aggregator-key-file=" + Cert("client.key"),
                             "--aggregator-token-file=" + Cert("token")}));
  WriteReports(Socket("genuine"), "job-genuine", 20);
  EXPECT_TRUE(PollUntil([&] { return AgentSample(*genuine, forwarded) == 20; }, 20))
      << genuine->Log();
  EXPECT_EQ(AgentSample(*genuine, failures), 0);
  metrics = p.Get("/metrics").second;
  EXPECT_EQ(Sample(metrics, "ncclwatch_aggregator_reports_ingested_total"), 20) << metrics;
  // The CLI, too, needs the cluster CA's certificate to query.
  auto [cli_code, cli_out] = RunToCompletion(
      {Binaries::Cli(), "--aggregator=" + agg, "--ca-file=" + Cert("ca.pem"),
       "--cert-file=" + Cert("client.pem"), "--key-file=" + Cert("client.key"), "jobs"},
      certs_.path() + "/cli.log");
  EXPECT_EQ(cli_code, 0) << cli_out;
  EXPECT_NE(cli_out.find("job-genuine"), std::string::npos) << cli_out;
  std::tie(cli_code, cli_out) = RunToCompletion(
      {Binaries::Cli(), "--aggregator=" + agg, "--ca-file=" + Cert("ca.pem"), "jobs"},
      certs_.path() + "/cli-no-cert.log");
  EXPECT_EQ(cli_code, 1) << cli_out;
  EXPECT_EQ(cli_out.find("job-genuine"), std::string::npos) << cli_out;
  // Nothing secret in any log.
  for (const Process* agent : {no_cert.get(), rogue.get(), bad_token.get(), genuine.get()}) {
    EXPECT_EQ(agent->Log().find("s3cret"), std::string::npos);
  }
  EXPECT_EQ(p.Logs().find("s3cret"), std::string::npos);
}

// An agent whose token the aggregator refuses forwards nothing: it must turn unready, saying why,
// within 70 s (the default --unready-after-s is 60), so that the DaemonSet's rollout stops there.
TEST_F(SecurityTest, AnAgentWithAWrongTokenTurnsUnreadyWithinSeventySeconds) {
  Pipeline p(0, {"--ingest-token-file=" + Cert("token")});
  ASSERT_TRUE(p.ok()) << p.error();
  auto agent =
      Agent("wrong-token", p.AggregatorAddr(), {"--aggregator-token-file=" + Cert("wrong-token")});
  httplib::Client http("127.0.0.1", agent->ReadyValue("http_port"));
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << "nothing pushed yet";
  const auto start = std::chrono::steady_clock::now();
  WriteReports(Socket("wrong-token"), "job-wrong-token", 5);
  EXPECT_TRUE(PollUntil(
      [&] {
        ready = http.Get("/readyz");
        return ready && ready->status == 503;
      },
      70, 500))
      << agent->Log();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LE(took, 70) << agent->Log();
  ASSERT_TRUE(ready);
  EXPECT_NE(ready->body.find("every push to " + p.AggregatorAddr() + " has failed"),
            std::string::npos)
      << ready->body;
  EXPECT_NE(ready->body.find("UNAUTHENTICATED"), std::string::npos) << ready->body;
  EXPECT_EQ(ready->body.find("guess"), std::string::npos) << "the token stays secret";
}

TEST_F(SecurityTest, ThePluginSocketHasTheConfiguredModeAndTcpIsOptional) {
  const std::string dir = certs_.path() + "/sockets";  // created by the agent
  Process agent({Binaries::Agent(), "--listen=unix://" + dir + "/agent.sock", "--socket-mode=0660",
                 "--socket-dir-mode=0750", "--listen-tcp=127.0.0.1:0", "--aggregator=127.0.0.1:1",
                 "--http-port=0", "--pod-resources-socket="},
                {}, certs_.path() + "/agent.log", "--ready-fd");
  ASSERT_GT(agent.ReadyValue("http_port"), 0) << agent.Log();
  struct stat st;
  ASSERT_EQ(stat((dir + "/agent.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  // Both listeners take plugin streams.
  const int tcp_port = agent.ReadyValue("tcp_port");
  ASSERT_GT(tcp_port, 0) << agent.Log();
  WriteReports("unix://" + dir + "/agent.sock", "over-unix", 3);
  WriteReports("127.0.0.1:" + std::to_string(tcp_port), "over-tcp", 3);
  EXPECT_EQ(AgentSample(agent, "ncclwatch_agent_reports_accepted_total"), 6);

  auto [code, out] =
      RunToCompletion({Binaries::Agent(), "--listen=" + Socket("y"), "--socket-mode=rw-rw----"},
                      certs_.path() + "/bad-mode.log");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("--socket-mode=rw-rw---- is not an octal file mode"), std::string::npos)
      << out;
}

TEST_F(SecurityTest, AQueryTokenGuardsTheQueryApiAndFederateButNotHealth) {
  Pipeline p(0, {"--query-token-file=" + Cert("token")});
  ASSERT_TRUE(p.ok()) << p.error();
  // gRPC: refused without the token, the Watch stream included.
  {
    grpc::ClientContext context;
    ncclwatch::v1::ListJobsResponse jobs;
    EXPECT_EQ(p.query().ListJobs(&context, {}, &jobs).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    auto watch = p.query().Watch(&context, {});
    ncclwatch::v1::Event event;
    EXPECT_FALSE(watch->Read(&event));
    EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  auto [code, out] =
      RunToCompletion({Binaries::Cli(), "--aggregator=" + p.AggregatorAddr(), "jobs"},
                      certs_.path() + "/cli-no-token.log");
  EXPECT_EQ(code, 1) << out;
  std::tie(code, out) = RunToCompletion({Binaries::Cli(), "--aggregator=" + p.AggregatorAddr(),
                                         "--token-file=" + Cert("token"), "jobs"},
                                        certs_.path() + "/cli-token.log");
  EXPECT_EQ(code, 0) << out;
  // HTTP: /federate needs it, /metrics and /healthz do not.
  httplib::Client http("127.0.0.1", p.http_port());
  const std::string federate = "/federate?match[]=%7B__name__%3D~%22.%2B%22%7D";
  auto refused = http.Get(federate);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  auto wrong = http.Get(federate, {{"Authorization", "Bearer guess"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto allowed = http.Get(federate, {{"Authorization", "Bearer s3cret-ingest-token"}});
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->status, 200) << allowed->body;
  EXPECT_EQ(p.Get("/healthz").first, 200);
  const std::string metrics = p.Get("/metrics").second;
  EXPECT_EQ(Sample(metrics, "ncclwatch_aggregator_federate_unauthenticated_total"), 2) << metrics;
  EXPECT_EQ(Sample(metrics, "ncclwatch_aggregator_queries_unauthenticated_total"), 3) << metrics;
}

TEST_F(SecurityTest, MisconfiguredTlsFailsAtStartWithAClearError) {
  auto [code, out] =
      RunToCompletion({Binaries::Agent(), "--aggregator-cert-file=" + Cert("client.pem"),
                       "--listen=" + Socket("x")},
                      certs_.path() + "/bad-agent.log");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("needs its key"), std::string::npos) << out;
  std::tie(code, out) = RunToCompletion(
      {Binaries::Aggregator(), "--tls-cert-file=" + Cert("server.pem"),
       "--tls-key-file=" + Cert("missing.key"), "--data-dir=" + certs_.path() + "/db"},
      certs_.path() + "/bad-aggregator.log");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("cannot read the server key file"), std::string::npos) << out;
}

TEST_F(SecurityTest, BeyondLoopbackTheAggregatorFailsClosed) {
  const std::string db = "--data-dir=" + certs_.path() + "/db";
  const std::vector<std::string> anywhere = {Binaries::Aggregator(), db, "--grpc-port=0",
                                             "--http-port=0", "--listen-host=0.0.0.0"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), anywhere.begin(), anywhere.end());
    return more;
  };
  // The defaults listen everywhere: without authentication, nothing starts.
  auto [code, out] = RunToCompletion(with({}), certs_.path() + "/open.log");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("refusing to accept unauthenticated batches on 0.0.0.0"), std::string::npos)
      << out;
  EXPECT_NE(out.find("--insecure-ingest"), std::string::npos) << out;
  std::tie(code, out) = RunToCompletion(with({"--ingest-token-file=" + Cert("token")}),
                                        certs_.path() + "/open-reads.log");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("refusing to serve the Query API and /federate unauthenticated"),
            std::string::npos)
      << out;
  // Agents' plugin listener: TCP beyond loopback only when asked for.
  std::tie(code, out) =
      RunToCompletion({Binaries::Agent(), "--listen=" + Socket("tcp"), "--listen-tcp=0.0.0.0:0"},
                      certs_.path() + "/agent-tcp.log");
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("refusing --listen-tcp=0.0.0.0:0"), std::string::npos) << out;

  // With both tokens it serves, and a push that reaches it from another address without the
  // token is refused.
  Process aggregator(
      with({"--ingest-token-file=" + Cert("token"), "--query-token-file=" + Cert("token")}), {},
      certs_.path() + "/closed.log", "--ready-fd");
  const int port = aggregator.ReadyValue("grpc_port");
  ASSERT_GT(port, 0) << aggregator.Log();
  auto ingest = ncclwatch::v1::Ingest::NewStub(grpc::CreateChannel(
      ReachableIpv4Address() + ":" + std::to_string(port), grpc::InsecureChannelCredentials()));
  ncclwatch::v1::NodeBatch batch;
  batch.set_agent_id("outsider");
  batch.set_batch_seq(1);
  ncclwatch::v1::BatchAck ack;
  grpc::ClientContext anonymous;
  EXPECT_EQ(ingest->Push(&anonymous, batch, &ack).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext with_token;
  with_token.AddMetadata("authorization", "Bearer s3cret-ingest-token");
  EXPECT_THAT(ingest->Push(&with_token, batch, &ack), IsOk());

  // An operator who really wants it open says so, and the log says it too.
  Process open(with({"--insecure-ingest", "--insecure-query", db + "-open"}), {},
               certs_.path() + "/insecure.log", "--ready-fd");
  ASSERT_GT(open.ReadyValue("grpc_port"), 0) << open.Log();
  EXPECT_NE(open.Log().find("--insecure-ingest: anyone who reaches 0.0.0.0 can push batches"),
            std::string::npos)
      << open.Log();
}

}  // namespace
}  // namespace ncclwatch::testing
