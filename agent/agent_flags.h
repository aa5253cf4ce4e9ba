// The agent's command line: every flag with its default, range and meaning (RegisterAgentFlags),
// and the checks that span several flags with the server options they make
// (AgentSetupFromFlags), so that both are unit-tested; main.cc only runs the result.
#ifndef NCCLWATCH_AGENT_AGENT_FLAGS_H_
#define NCCLWATCH_AGENT_AGENT_FLAGS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent_server.h"
#include "common/config.h"
#include "common/rpc/token.h"

namespace ncclwatch::agent {

// What the command line says, in its own units; ranges are checked as it is parsed.
struct AgentFlags {
  std::string listen = "unix:///run/ncclwatch/agent.sock";
  std::string listen_tcp;
  bool insecure_tcp = false;
  int64_t max_plugin_streams = 1024;
  double plugin_stream_idle_s = 600;
  int64_t max_plugin_connections = 1024;
  double inspector_series_mib = 16;
  int64_t max_plugin_connections_per_peer = 64;
  double plugin_connect_deadline_s = 10;
  double plugin_stream_mib_per_s = 4;
  std::string socket_mode = "0660";
  std::string socket_dir_mode = "0755";
  std::string socket_group;
  std::string aggregator = "localhost:9470";
  bool aggregator_tls = false;
  std::string aggregator_ca_file;
  std::string aggregator_cert_file;
  std::string aggregator_key_file;
  std::string aggregator_server_name;
  std::string aggregator_token_file;
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::string proc_dir = "/proc";
  std::string pod_logs_dir = "/var/log/pods";
  int64_t pod_resources_refresh_s = 10;
  int64_t http_port = 9472;
  std::string node_name;
  int64_t batch_interval_ms = 200;
  int64_t max_batch_reports = 512;
  int64_t max_queued_reports = 100000;
  int64_t max_queued_bytes = 16 << 20;
  int64_t push_timeout_ms = 5000;
  int64_t set_aside_after = 5;
  double unready_after_s = 60;
  int64_t shutdown_timeout_ms = 5000;
  std::string spool_dir;
  int64_t spool_max_bytes = 1ll << 30;
  bool spool_fsync = true;
  int64_t ready_fd = -1;
};

void RegisterAgentFlags(ConfigTable& table, AgentFlags& flags);

// The server's options from the flags, with what they point to (the token file).
struct AgentSetup {
  AgentServerOptions options;
  std::unique_ptr<TokenFile> token;  // options.token points here
  bool tls = false;                  // towards the aggregators
  // Allowed but unsafe settings, to log (a token sent without TLS).
  std::vector<std::string> warnings;
};

// Checks what no single range says (socket modes, the TCP listener's exposure, the aggregator
// list, the spool's share per aggregator) and opens what the flags name (the token file,
// certificates). `node_name` must be set (main.cc puts the hostname there); `agent_id` is this
// run's identity. InvalidArgument names the flag.
absl::StatusOr<AgentSetup> AgentSetupFromFlags(const AgentFlags& flags,
                                               const std::string& agent_id);

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_AGENT_FLAGS_H_
