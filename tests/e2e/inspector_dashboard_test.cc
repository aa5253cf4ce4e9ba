// NCCL Inspector's own Grafana dashboard on ncclwatch's series, unchanged.
//
// Its panels (one per operation, NVLink-only or across the network, bandwidth and execution
// time) each ask a real Prometheus for
//   avg by(message_size, nranks[, n_nodes]) (FAMILY{cluster="$cluster", slurm_job_id="$jobid",
//                                                   OP_LABEL="OP", n_nodes="1" | n_nodes!="1"})
// The queries below are written from that structure. A 3D (Megatron-style) job runs through the
// real plugin, agents and aggregator; Prometheus scrapes the aggregator's /federate and the
// agents' /metrics with the `cluster` label the Helm chart's ServiceMonitors add (value
// `cluster`). Every query of an (operation, NVLink/network) the job ran must answer, from each of
// the two sources on its own too, and every other one must stay empty.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/e2e/pipeline.h"
#include "tests/e2e/prometheus_server.h"

namespace ncclwatch::testing {
namespace {

using ::ncclwatch::testutil::IsOk;

constexpr char kCluster[] = "sim-cluster";
constexpr char kJob[] = "dash-3d";

struct Panel {
  std::string family;
  std::string op_label;  // collective | p2p_operation
  std::string op;
  bool nvlink_only;  // n_nodes="1", else n_nodes!="1"

  std::string Query() const {
    return absl::StrCat("avg by(message_size, nranks", nvlink_only ? "" : ", n_nodes", ") (",
                        family, "{cluster=\"$cluster\", slurm_job_id=\"$jobid\", ", op_label, "=\"",
                        op, "\", n_nodes", nvlink_only ? "=" : "!=", "\"1\"})");
  }
  std::string Name() const {
    return absl::StrCat(family, " ", op, nvlink_only ? " NVLink only" : " network");
  }
};

std::vector<Panel> DashboardPanels() {
  std::vector<Panel> panels;
  for (bool nvlink : {true, false}) {
    for (const char* op : {"Recv", "Send"}) {
      for (const char* family : {"nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds"}) {
        panels.push_back({family, "p2p_operation", op, nvlink});
      }
    }
    for (const char* op : {"ReduceScatter", "AllReduce", "AllGather"}) {
      for (const char* family :
           {"nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds"}) {
        panels.push_back({family, "collective", op, nvlink});
      }
    }
  }
  return panels;
}

// Grafana's variable substitution, and optionally one more matcher (the scrape job: one source).
std::string Substitute(const std::string& query, const std::string& source_job = "") {
  std::string extra = source_job.empty() ? "" : absl::StrCat(", job=\"", source_job, "\"");
  return absl::StrReplaceAll(
      query, {{"$cluster", kCluster}, {"\"$jobid\"", absl::StrCat("\"", kJob, "\"", extra)}});
}

TEST(InspectorDashboardTest, EveryPanelOfInspectorsDashboardAnswersForA3dJob) {
  constexpr int kNodes = 2;
  Pipeline p(kNodes, {});
  ASSERT_TRUE(p.ok()) << p.error();
  std::string agents;
  for (int n = 0; n < kNodes; ++n) {
    absl::StrAppend(&agents, n == 0 ? "" : ", ", "'127.0.0.1:", p.agent_http_port(n), "'");
  }
  // What the chart's ServiceMonitors do: honour the exporters' labels and add `cluster`.
  Prometheus prom(p.dir(), absl::StrCat("scrape_configs:\n"
                                        "  - job_name: federate\n"
                                        "    honor_labels: true\n"
                                        "    metrics_path: /federate\n"
                                        "    params:\n"
                                        "      'match[]': ['{__name__=~\"nccl_.+\"}']\n"
                                        "    static_configs:\n"
                                        "      - targets: ['127.0.0.1:",
                                        p.http_port(), "']\n        labels: {cluster: ", kCluster,
                                        "}\n"
                                        "  - job_name: agents\n"
                                        "    honor_labels: true\n"
                                        "    static_configs:\n"
                                        "      - targets: [",
                                        agents, "]\n        labels: {cluster: ", kCluster, "}\n"));
  ASSERT_TRUE(prom.WaitReady()) << prom.Log();
  // Tensor parallel in pairs inside a node (AllReduce), data parallel in pairs inside a node
  // (ReduceScatter, AllGather), the pipeline across the two nodes (Send, Recv), and the
  // embedding AllReduce of the first and last stages across them.
  Process job({Binaries::Simjob(), "--plugin=" + Binaries::Plugin(), "--layout=megatron",
               "--nodes=2", "--ranks-per-node=4", "--tp=2", "--pp=2",
               "--agent-addr=" + p.AgentAddrTemplate(), std::string("--job-id=") + kJob,
               "--duration-s=30", "--env=NCCLWATCH_FLUSH_INTERVAL_MS=1000"},
              {}, p.dir() + "/simjob.log");

  // What the job ran, by our own labels: (operation, NVLink only).
  const std::set<std::pair<std::string, bool>> expected = {
      {"AllReduce", true}, {"AllReduce", false}, {"ReduceScatter", true},
      {"AllGather", true}, {"Send", false},      {"Recv", false}};
  std::set<std::pair<std::string, bool>> ran;
  const auto everything_ran = [&] {
    ran.clear();
    for (const char* by : {"collective", "p2p_operation"}) {
      const char* family = by[0] == 'c' ? "nccl_collective_exec_time_microseconds"
                                        : "nccl_p2p_exec_time_microseconds";
      for (const Series& s :
           prom.Query(absl::StrCat("count by(", by, ", n_nodes) (", family, "{job_id=\"", kJob,
                                   "\", job=\"federate\"})"))) {
        ran.insert({s.labels.at(by), s.labels.at("n_nodes") == "1"});
      }
    }
    return ran == expected;
  };
  ASSERT_TRUE(PollUntil(everything_ran, 60, 500))
      << "ran: " << ran.size() << " (operation, locality) pairs\n"
      << prom.Log() << p.Logs();

  // Every panel of what ran answers (from both sources together and from each alone) once
  // both have been scraped; every other panel stays empty.
  const std::vector<Panel> panels = DashboardPanels();
  ASSERT_EQ(panels.size(), 20u);
  const auto answered = [&](const Panel& panel, const std::string& source) {
    const std::vector<Series> answer = prom.Query(Substitute(panel.Query(), source));
    if (answer.empty()) return false;
    for (const Series& s : answer) {
      if (!(s.value > 0) || s.labels.count("message_size") == 0 || s.labels.count("nranks") == 0) {
        return false;
      }
    }
    return true;
  };
  for (const Panel& panel : panels) {
    const bool applicable = ran.contains({panel.op, panel.nvlink_only});
    if (!applicable) {
      EXPECT_TRUE(prom.Query(Substitute(panel.Query())).empty()) << panel.Name();
      continue;
    }
    for (const std::string source : {"", "federate", "agents"}) {
      EXPECT_TRUE(PollUntil([&] { return answered(panel, source); }, 20, 500))
          << panel.Name() << " from " << (source.empty() ? "both sources" : source) << ": "
          << Substitute(panel.Query(), source);
    }
  }
  // The variables carry the values Grafana substitutes: the same panel for another cluster or
  // another job answers nothing (a panel of what ran, which did answer above).
  const Panel& ran_panel = *std::find_if(panels.begin(), panels.end(), [&](const Panel& panel) {
    return ran.contains({panel.op, panel.nvlink_only});
  });
  EXPECT_TRUE(
      prom.Query(absl::StrReplaceAll(ran_panel.Query(), {{"$cluster", "other"}, {"$jobid", kJob}}))
          .empty());
  EXPECT_TRUE(prom.Query(absl::StrReplaceAll(ran_panel.Query(),
                                             {{"$cluster", kCluster}, {"$jobid", "other"}}))
                  .empty());
  EXPECT_EQ(job.Wait(), 0) << job.Log();
}

}  // namespace
}  // namespace ncclwatch::testing
