// End to end with a real Prometheus server (Debian package `prometheus`, on loopback):
//   - it federates from the aggregator's /federate while simjob runs, and its HTTP API must return
//     the straggler, bandwidth and hang series with the right labels;
//   - the aggregator remote-writes into Prometheus's remote-write receiver, and the same API must
//     return the series it sent.
#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"
#include "tests/e2e/prometheus_server.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

std::vector<std::string> PrometheusJobArgs(const Pipeline& p, const std::string& job) {
  return {Binaries::Simjob(),
          "--plugin=" + Binaries::Plugin(),
          "--nodes=2",
          "--ranks-per-node=4",
          "--agent-addr=" + p.AgentAddrTemplate(),
          "--job-id=" + job,
          "--duration-s=12",
          "--slow-rank=5",
          "--hang-rank=6",
          "--hang-after-s=5",
          "--clock-skew-ms=20",
          "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"};
}

TEST(PrometheusEndToEndTest, ARealPrometheusFederatesTheFindingsWithTheirLabels) {
  Pipeline p(2, {"--hang-threshold-s=2"});
  ASSERT_TRUE(p.ok()) << p.error();
  const std::string http = "127.0.0.1:" + std::to_string(p.http_port());
  Prometheus prom(p.dir(),
                  "scrape_configs:\n"
                  "  - job_name: ncclwatch\n"
                  "    honor_labels: true\n"
                  "    metrics_path: /federate\n"
                  "    params:\n"
                  "      'match[]': ['{__name__=~\"ncclwatch_.*|nccl_.*\"}']\n"
                  "    static_configs:\n"
                  "      - targets: ['" +
                      http + "']\n");
  ASSERT_TRUE(prom.WaitReady()) << prom.Log();
  Process job(PrometheusJobArgs(p, "prom"), {}, p.dir() + "/simjob.log");

  auto stragglers = prom.WaitFor(R"(ncclwatch_straggler{job_id="prom"} == 1)", 1);
  ASSERT_EQ(stragglers.size(), 1u) << prom.Log() << p.Logs();
  EXPECT_EQ(stragglers[0].labels["rank"], "5");
  EXPECT_EQ(stragglers[0].labels["node"], "sim-node-1");
  EXPECT_EQ(stragglers[0].labels["gpu"], "GPU1");
  EXPECT_EQ(stragglers[0].labels["comm_name"], "world");
  EXPECT_EQ(stragglers[0].labels["job"], "ncclwatch");  // Prometheus's own scrape job label

  auto bandwidth = prom.WaitFor(
      R"(nccl_bus_bandwidth_gbs{job_id="prom",collective="AllReduce",message_size="32-33MB"})", 8);
  ASSERT_EQ(bandwidth.size(), 8u) << prom.Log();
  for (const Series& s : bandwidth) {
    EXPECT_EQ(s.labels.at("n_nodes"), "2");
    EXPECT_EQ(s.labels.at("nranks"), "8");
    EXPECT_EQ(s.labels.at("algo_proto"), "RING_SIMPLE");
    EXPECT_GT(s.value, 0);
  }

  auto hang = prom.WaitFor(R"(ncclwatch_hang{job_id="prom"} == 1)", 1);
  ASSERT_EQ(hang.size(), 1u) << prom.Log() << p.Logs();
  EXPECT_EQ(hang[0].labels["comm_name"], "world");
  auto missing = prom.WaitFor(R"(ncclwatch_rank_missing{job_id="prom"} == 1)", 1);
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].labels["rank"], "6");
  EXPECT_EQ(missing[0].labels["node"], "sim-node-1");
  EXPECT_EQ(job.Wait(), 0) << job.Log();
}

// The shipped alert rules with every `for:` shortened to `for_s` seconds: the same expressions and
// labels, firing without a test's minute of waiting (their durations are checked by promtool's
// rule tests, scripts/check-deploy). Written into `dir`; returns the file's path, or "" when the
// file could not be read or had no `for:` to shorten.
std::string RulesWithShortFor(const std::string& dir, int for_s) {
  std::ifstream in(NCCLWATCH_SOURCE_DIR "/deploy/prometheus/ncclwatch-rules.yaml");
  std::stringstream text;
  text << in.rdbuf();
  const std::string original = text.str();
  const std::regex for_line(R"((\n\s+for: )[0-9]+[smh])");
  std::string rules;
  size_t from = 0;
  for (auto m = std::sregex_iterator(original.begin(), original.end(), for_line);
       m != std::sregex_iterator(); ++m) {
    rules += original.substr(from, m->position() - from) + m->str(1) + std::to_string(for_s) + "s";
    from = m->position() + m->length();
  }
  rules += original.substr(from);
  if (rules == original || rules.find("for: 1m") != std::string::npos) return "";
  const std::string path = dir + "/ncclwatch-rules.yaml";
  std::ofstream(path) << rules;
  return path;
}

// Prometheus's configuration for the alert tests: the shipped rules with a 10 s `for:`, and the
// pipeline's /federate scraped. "" when the rules could not be shortened.
std::string AlertingConfig(const Pipeline& p) {
  const std::string rules = RulesWithShortFor(p.dir(), 10);
  if (rules.empty()) return "";
  const std::string http = "127.0.0.1:" + std::to_string(p.http_port());
  return "rule_files:\n"
         "  - " +
         rules +
         "\n"
         "scrape_configs:\n"
         "  - job_name: ncclwatch\n"
         "    honor_labels: true\n"
         "    metrics_path: /federate\n"
         "    params:\n"
         "      'match[]': ['{__name__=~\"ncclwatch_.*\"}']\n"
         "    static_configs:\n"
         "      - targets: ['" +
         http + "']\n";
}

// A job with a slow GPU runs long enough for the shipped NcclwatchStraggler alert to fire, then
// ends normally. Its ranks' final reports end the job: the finding's END ("job ended") comes
// within 5 s, /federate drops the series at once, and Prometheus resolves the alert.
TEST(PrometheusEndToEndTest, AJobThatEndsResolvesItsAlertsAtOnce) {
  Pipeline p(2, {"--hang-threshold-s=2"});
  ASSERT_TRUE(p.ok()) << p.error();
  const std::string config = AlertingConfig(p);
  ASSERT_FALSE(config.empty()) << "the shipped rules' for: durations were not found";
  Prometheus prom(p.dir(), config);
  ASSERT_TRUE(prom.WaitReady()) << prom.Log();
  EventRecorder events(p.query());
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--nodes=2",
               "--ranks-per-node=4", "--agent-addr=" + p.AgentAddrTemplate(), "--job-id=ends",
               "--duration-s=30", "--slow-rank=5", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"},
              {}, p.dir() + "/simjob.log");
  const std::string firing =
      R"(ALERTS{alertname="NcclwatchStraggler",alertstate="firing",job_id="ends"})";
  ASSERT_EQ(prom.WaitFor(firing, 1, 45).size(), 1u) << prom.Log() << p.Logs();
  ASSERT_EQ(job.Wait(), 0) << job.Log();
  const auto exited = std::chrono::steady_clock::now();

  // The END, with its reason, within 5 s of the job's exit (its final reports).
  ASSERT_TRUE(events.WaitFor(
      [](const ncclwatch::v1::Event& e) {
        return e.kind() == ncclwatch::v1::Event::STRAGGLER &&
               e.phase() == ncclwatch::v1::Event::END && e.end_reason() == "job ended";
      },
      5))
      << p.Logs();
  EXPECT_LE(std::chrono::steady_clock::now() - exited, std::chrono::seconds(5));
  const auto [status, federate] = p.Get("/federate?match[]=ncclwatch_straggler");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(federate.find("job_id=\"ends\""), std::string::npos) << federate;
  // Prometheus sees the series go stale and the alert resolve (no pending or firing ALERTS).
  prom.WaitFor(R"(ALERTS{alertname="NcclwatchStraggler",job_id="ends"})", 0, 30);
  EXPECT_TRUE(prom.Query(R"(ALERTS{alertname="NcclwatchStraggler",job_id="ends"})").empty())
      << "the alert is still active";
  // The job is listed as ended, with why.
  grpc::ClientContext context;
  ncclwatch::v1::ListJobsResponse jobs;
  ASSERT_THAT(p.query().ListJobs(&context, {}, &jobs), IsOk());
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).state(), "ended");
  EXPECT_EQ(jobs.jobs(0).end_reason(), "every rank sent its final report");
}

// A Megatron-layout job (TP 2 x PP 2 x DP 2 on 4 nodes) whose global rank 5 (RANK=5, GPU1 of
// sim-node-2) is slow: the event, the CLI, /federate and the fired alert all name rank 5 with its
// node and GPU, and two queries seconds apart cite the same evidence.
TEST(PrometheusEndToEndTest, ASlowGlobalRankIsNamedByItsOwnRankEverywhere) {
  Pipeline p(4, {"--hang-threshold-s=2"});
  ASSERT_TRUE(p.ok()) << p.error();
  const std::string config = AlertingConfig(p);
  ASSERT_FALSE(config.empty()) << "the shipped rules' for: durations were not found";
  Prometheus prom(p.dir(), config);
  ASSERT_TRUE(prom.WaitReady()) << prom.Log();
  EventRecorder events(p.query());
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--layout=megatron",
               "--nodes=4", "--ranks-per-node=2", "--agent-addr=" + p.AgentAddrTemplate(),
               "--job-id=mega", "--duration-s=60", "--seed=1", "--slow-rank=5", "--slow-factor=1.5",
               "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"},
              {}, p.dir() + "/simjob.log");

  ncclwatch::v1::Event found;
  ASSERT_TRUE(events.WaitFor(
      [&](const ncclwatch::v1::Event& e) {
        if (e.kind() != ncclwatch::v1::Event::STRAGGLER ||
            e.phase() != ncclwatch::v1::Event::START || !e.has_root_cause()) {
          return false;
        }
        found = e;
        return true;
      },
      30))
      << p.Logs();
  EXPECT_EQ(found.root_cause().global_rank(), 5) << found.ShortDebugString();
  EXPECT_EQ(found.root_cause().local_rank(), 1);
  EXPECT_EQ(found.root_cause().node(), "sim-node-2");
  EXPECT_EQ(found.root_cause().cuda_device(), 1);
  EXPECT_EQ(found.straggler().global_rank(), 5);
  EXPECT_NE(found.summary().find("rank 5, GPU1 on node sim-node-2"), std::string::npos)
      << found.summary();

  // "before AllReduce 1-2MB in communicator dp0 (its rank 1)": what the finding cites.
  const auto evidence = [](const std::string& text) {
    const size_t from = text.find("before ");
    const size_t to = text.find(')', from);
    return from == std::string::npos || to == std::string::npos ? std::string()
                                                                : text.substr(from, to - from + 1);
  };
  const std::vector<std::string> cli = {Binaries::Cli(), "--aggregator=" + p.AggregatorAddr(),
                                        "stragglers", "--job=mega"};
  auto [code, first] = RunToCompletion(cli, p.dir() + "/cli-1.log");
  EXPECT_EQ(code, 3) << first;  // a finding is shown
  EXPECT_NE(first.find("Root cause: rank 5, GPU1 on node sim-node-2"), std::string::npos) << first;
  EXPECT_FALSE(evidence(first).empty()) << first;

  const std::string firing =
      R"(ALERTS{alertname="NcclwatchStraggler",alertstate="firing",job_id="mega"})";
  auto alerts = prom.WaitFor(firing, 1, 45);
  ASSERT_EQ(alerts.size(), 1u) << prom.Log() << p.Logs();
  EXPECT_EQ(alerts[0].labels["global_rank"], "5");
  EXPECT_EQ(alerts[0].labels["node"], "sim-node-2");
  EXPECT_EQ(alerts[0].labels["gpu"], "GPU1");
  auto annotated = prom.Alerts({{"alertname", "NcclwatchStraggler"}, {"job_id", "mega"}});
  ASSERT_EQ(annotated.size(), 1u);
  EXPECT_NE(annotated[0]["annotation:summary"].find("rank 5, GPU1 on sim-node-2"),
            std::string::npos)
      << annotated[0]["annotation:summary"];

  const auto [status, federate] = p.Get("/federate?match[]=ncclwatch_straggler");
  EXPECT_EQ(status, 200);
  EXPECT_NE(federate.find("global_rank=\"5\""), std::string::npos) << federate;
  EXPECT_NE(federate.find("node=\"sim-node-2\""), std::string::npos) << federate;

  // Seconds later (the alert's `for:` in between), the same evidence, its figures fresh.
  auto [code2, second] = RunToCompletion(cli, p.dir() + "/cli-2.log");
  EXPECT_EQ(code2, 3) << second;
  EXPECT_EQ(evidence(second), evidence(first)) << first << "\n---\n" << second;
}

TEST(PrometheusEndToEndTest, RemoteWriteLandsInPrometheussReceiver) {
  ScopedTempDir prom_dir("ncclwatch-prom");
  Prometheus prom(prom_dir.path(), "");
  ASSERT_TRUE(prom.WaitReady()) << prom.Log();
  Pipeline p(
      2, {"--hang-threshold-s=2",
          "--remote-write-url=http://127.0.0.1:" + std::to_string(prom.port()) + "/api/v1/write",
          "--remote-write-interval-s=1", "--remote-write-all-series"});
  ASSERT_TRUE(p.ok()) << p.error();
  Process job(PrometheusJobArgs(p, "rw"), {}, p.dir() + "/simjob.log");

  auto stragglers = prom.WaitFor(R"(ncclwatch_straggler{job_id="rw"} == 1)", 1);
  ASSERT_EQ(stragglers.size(), 1u) << prom.Log() << p.Logs();
  EXPECT_EQ(stragglers[0].labels["rank"], "5");
  EXPECT_EQ(stragglers[0].labels["node"], "sim-node-1");
  auto bandwidth = prom.WaitFor(
      R"(nccl_bus_bandwidth_gbs{job_id="rw",collective="AllReduce",message_size="32-33MB"})", 8);
  EXPECT_EQ(bandwidth.size(), 8u) << prom.Log();
  auto missing = prom.WaitFor(R"(ncclwatch_rank_missing{job_id="rw"} == 1)", 1);
  ASSERT_EQ(missing.size(), 1u) << prom.Log() << p.Logs();
  EXPECT_EQ(missing[0].labels["rank"], "6");
  EXPECT_EQ(job.Wait(), 0) << job.Log();
  auto [code, metrics] = p.Get("/metrics");
  EXPECT_NE(metrics.find("ncclwatch_aggregator_remote_write_samples_total"), std::string::npos);
  EXPECT_NE(metrics.find("ncclwatch_aggregator_remote_write_failures_total 0"), std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace ncclwatch::testing
