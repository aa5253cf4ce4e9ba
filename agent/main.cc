// ncclwatch-agent: the node agent (one per GPU node, a Kubernetes DaemonSet).
// Receives RankReports from the plugins of this node's training processes on a unix socket,
// stamps them with the node name and forwards them to the aggregator in acknowledged batches.
// Its flags and their checks: agent_flags.h; AgentServer (agent_server.h) runs it.
#include <unistd.h>

#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "agent/agent_flags.h"
#include "agent/agent_server.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/rpc/grpc_log.h"

namespace ncclwatch::agent {
namespace {

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string RandomHex(int digits) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < digits; ++i) out += "0123456789abcdef"[rd() % 16];
  return out;
}

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  DisableLockOrderChecks();
  SetLogComponent("agent");
  AgentFlags config;
  ConfigTable table("ncclwatch-agent",
                    "Node agent: receives NCCL profiler reports from the training processes on "
                    "this node and forwards them to the ncclwatch aggregator.");
  RegisterAgentFlags(table, config);
  if (auto exit_code = table.ParseDaemonCommandLine(argc, argv)) return *exit_code;
  RouteGrpcLogs();  // its lines in this daemon's format
  if (config.node_name.empty()) config.node_name = Hostname();
  LogInfo("starting: %s", table.Describe());

  // Every setting is checked before anything starts: a bad one exits 2.
  absl::StatusOr<AgentSetup> setup =
      AgentSetupFromFlags(config, config.node_name + "-" + RandomHex(8));
  if (!setup.ok()) {
    LogError("%s", setup.status().message());
    return 2;
  }
  for (const std::string& warning : setup->warnings) LogWarning("%s", warning);
  LogInfo("agent id %s", setup->options.agent_id);

  AgentServer server(std::move(setup->options));
  if (absl::Status s = server.Start(); !s.ok()) {
    LogError("%s", s.message());
    return 1;
  }
  LogInfo("serving plugins on %s%s, metrics on :%d, forwarding to %s%s", config.listen,
          config.listen_tcp.empty() ? "" : " and " + config.listen_tcp, server.http_port(),
          config.aggregator, setup->tls ? " over TLS" : "");
  NotifyReady(static_cast<int>(config.ready_fd),
              absl::StrFormat("ready grpc=%s http_port=%d tcp_port=%d", config.listen,
                              server.http_port(), server.tcp_port()));

  const int sig = WaitForTerminationSignal();
  LogInfo("signal %d: closing plugin streams, forwarding what is queued", sig);
  server.Stop();
  return 0;
}

}  // namespace
}  // namespace ncclwatch::agent

int main(int argc, char** argv) { return ncclwatch::agent::Main(argc, argv); }
