#include "agent/agent_flags.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "agent/unix_socket.h"
#include "common/daemon.h"
#include "common/rpc/tls.h"

namespace ncclwatch::agent {

void RegisterAgentFlags(ConfigTable& t, AgentFlags& c) {
  t.AddString("listen", "NCCLWATCH_AGENT_LISTEN", &c.listen,
              "Where plugins connect: unix:///path for a unix socket, or host:port for TCP.");
  t.AddString("listen-tcp", "NCCLWATCH_AGENT_LISTEN_TCP", &c.listen_tcp,
              "Also accept plugins on this host:port (e.g. 127.0.0.1:9473); empty: only --listen.");
  t.AddInt("max-plugin-streams", "", &c.max_plugin_streams,
           "Most plugin streams open at once (one per rank process); further ones are refused "
           "(RESOURCE_EXHAUSTED, ncclwatch_agent_plugin_streams_refused_total).",
           Range::AtLeast(1));
  t.AddDouble("inspector-series-mib", "", &c.inspector_series_mib,
              "Most MiB of node-local Inspector series (as rendered on /metrics) the agent keeps; "
              "ranks beyond are left out (ncclwatch_agent_inspector_series_capped_total).",
              Range::Positive());
  t.AddInt("max-plugin-connections", "", &c.max_plugin_connections,
           "Most plugin connections open at once on the unix socket; one beyond is closed as "
           "soon as accepted (ncclwatch_agent_plugin_connections_refused_total).",
           Range::Between(1, 1 << 20));
  t.AddInt("max-plugin-connections-per-peer", "", &c.max_plugin_connections_per_peer,
           "Most plugin connections one pod (or one uid outside pods) may hold open; one beyond "
           "is closed as soon as accepted.",
           Range::Between(1, 1 << 20));
  t.AddDouble("plugin-connect-deadline-s", "", &c.plugin_connect_deadline_s,
              "A plugin connection that opens no stream within this long is closed "
              "(ncclwatch_agent_plugin_connections_closed_total{reason=\"no_stream\"}).",
              Range::Positive());
  t.AddDouble("plugin-stream-idle-s", "", &c.plugin_stream_idle_s,
              "A plugin stream that sends nothing for this long is closed (the plugin reconnects "
              "when it has a report).",
              Range::Positive());
  t.AddDouble("plugin-stream-mib-per-s", "", &c.plugin_stream_mib_per_s,
              "Most MiB a second one plugin stream may send on average (bursts of 4 seconds' "
              "worth, at least 16 MiB); reports beyond are dropped (rejected, rate_limited).",
              Range::Positive());
  t.AddBool("insecure-tcp", "", &c.insecure_tcp,
            "Allow a --listen-tcp address other machines can reach (plugins cannot "
            "authenticate: anyone reaching it can write reports in this node's name).");
  t.AddString("socket-mode", "", &c.socket_mode,
              "Permissions of the unix socket, octal: 0660 admits processes of the socket's user "
              "and group (see --socket-group), 0666 every user of the node.");
  t.AddString("socket-dir-mode", "", &c.socket_dir_mode,
              "Permissions of the socket's directory when the agent creates it, octal.");
  t.AddString("socket-group", "", &c.socket_group,
              "Group (name or gid) to own the unix socket; empty: the agent's own.");
  t.AddString("aggregator", "NCCLWATCH_AGGREGATOR", &c.aggregator,
              "Aggregator gRPC address, host:port. Several, comma-separated, are one sharded "
              "service: each job goes whole to one of them, chosen by rendezvous hashing of the "
              "job id over their names (every node must list the same names, in any order; adding "
              "one moves only the jobs it takes over). An entry name=host:port names a member "
              "apart from its address (e.g. a StatefulSet pod name); the aggregators' "
              "--shard-peers lists the same entries.");
  t.AddBool("aggregator-tls", "NCCLWATCH_AGGREGATOR_TLS", &c.aggregator_tls,
            "Talk TLS to the aggregator (implied by any --aggregator-*-file below).");
  t.AddString("aggregator-ca-file", "NCCLWATCH_AGGREGATOR_CA_FILE", &c.aggregator_ca_file,
              "PEM roots that sign the aggregator's certificate; empty: the system's roots.");
  t.AddString("aggregator-cert-file", "NCCLWATCH_AGGREGATOR_CERT_FILE", &c.aggregator_cert_file,
              "PEM client certificate for mutual TLS.");
  t.AddString("aggregator-key-file", "NCCLWATCH_AGGREGATOR_KEY_FILE", &c.aggregator_key_file,
              "PEM private key of --aggregator-cert-file.");
  t.AddString("aggregator-server-name", "", &c.aggregator_server_name,
              "Name to verify in the aggregator's certificate; empty: the host of --aggregator.");
  t.AddString("aggregator-token-file", "NCCLWATCH_AGGREGATOR_TOKEN_FILE", &c.aggregator_token_file,
              "File holding a bearer token sent with every batch (re-read every 30 s).");
  t.AddString("proc-dir", "", &c.proc_dir,
              "Where the plugins' processes are seen (their cgroups name their pods; needs the "
              "host's pid namespace, hostPID); empty: attribute plugins by their GPU alone.");
  t.AddString("pod-logs-dir", "", &c.pod_logs_dir,
              "The kubelet's per-pod log directories (<namespace>_<pod>_<uid>), which name the pod "
              "the kernel finds a plugin in; empty: attribute plugins by their GPU alone.");
  t.AddString("pod-resources-socket", "NCCLWATCH_POD_RESOURCES_SOCKET", &c.pod_resources_socket,
              "The kubelet's pod-resources socket, to name the pod of each GPU; empty: off. "
              "Absent sockets are retried quietly (outside Kubernetes there is none).");
  t.AddInt("pod-resources-refresh-s", "", &c.pod_resources_refresh_s,
           "How often to ask the kubelet which pod holds which GPU.", Range::AtLeast(1));
  t.AddInt("http-port", "NCCLWATCH_AGENT_HTTP_PORT", &c.http_port,
           "Port of /metrics, /healthz and /readyz (0 = any free port).", Range::Between(0, 65535));
  t.AddString("node-name", "NODE_NAME", &c.node_name,
              "Name of this node in every report; empty means the hostname.");
  t.AddInt("batch-interval-ms", "", &c.batch_interval_ms,
           "Longest time a report waits before its batch is sent.", Range::AtLeast(1));
  t.AddInt("max-batch-reports", "", &c.max_batch_reports, "Most reports in one batch.",
           Range::AtLeast(1));
  t.AddInt("max-queued-reports", "", &c.max_queued_reports,
           "Reports held in memory while the aggregator is away; the oldest are dropped beyond.",
           Range::AtLeast(1));
  t.AddInt("max-queued-bytes", "", &c.max_queued_bytes,
           "Serialized bytes of reports held in memory (queue, and unsent batches without a "
           "spool, each); the oldest are dropped beyond.",
           Range::AtLeast(1 << 20));
  t.AddInt("push-timeout-ms", "", &c.push_timeout_ms, "Deadline of one batch push.",
           Range::AtLeast(1));
  t.AddDouble("unready-after-s", "", &c.unready_after_s,
              "/readyz fails once every push to an aggregator has failed for this long (a full "
              "disk there, a wrong token, an unreachable aggregator: nothing leaves the node).",
              Range::AtLeast(0));
  t.AddInt("set-aside-after", "", &c.set_aside_after,
           "A batch that fails this many times in a way a retry may not mend (the aggregator "
           "cannot parse it, an internal error: not unreachable, busy or a wrong token) is set "
           "aside once a later batch gets through (kept in the spool as *.rejected).",
           Range::AtLeast(1));
  t.AddInt("shutdown-timeout-ms", "", &c.shutdown_timeout_ms,
           "On SIGTERM, how long to keep forwarding what is queued before exiting.",
           Range::AtLeast(0));
  t.AddString("spool-dir", "NCCLWATCH_AGENT_SPOOL_DIR", &c.spool_dir,
              "Directory of the durable spool: every batch is kept there until the aggregator "
              "acknowledges it, and replayed after a restart (empty: memory only). With several "
              "aggregators, one subdirectory each.");
  t.AddInt("spool-max-bytes", "NCCLWATCH_AGENT_SPOOL_MAX_BYTES", &c.spool_max_bytes,
           "Most bytes in the spool (shared evenly by several aggregators); beyond, the oldest "
           "batches are dropped and counted.",
           Range::AtLeast(64 << 10));
  t.AddBool("spool-fsync", "", &c.spool_fsync,
            "Sync every spooled batch (and its directory entry) to disk, so that it survives a "
            "power loss or node crash too; --no-spool-fsync keeps only what survives a crash or "
            "restart of the agent itself.");
  t.AddInt("ready-fd", "", &c.ready_fd,
           "Write 'ready grpc=... http_port=N tcp_port=M' to this file descriptor once serving "
           "(-1: off; tcp_port 0 without --listen-tcp).");
}

absl::StatusOr<AgentSetup> AgentSetupFromFlags(const AgentFlags& config,
                                               const std::string& agent_id) {
  absl::StatusOr<mode_t> socket_mode = ParseFileMode("socket-mode", config.socket_mode);
  if (!socket_mode.ok()) return socket_mode.status();
  absl::StatusOr<mode_t> dir_mode = ParseFileMode("socket-dir-mode", config.socket_dir_mode);
  if (!dir_mode.ok()) return dir_mode.status();
  if (!config.listen_tcp.empty()) {
    const size_t colon = config.listen_tcp.rfind(':');
    const std::string host =
        colon == std::string::npos ? config.listen_tcp : config.listen_tcp.substr(0, colon);
    if (!IsLoopbackHost(host) && !config.insecure_tcp) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "refusing --listen-tcp=%s, which other machines can reach: plugins cannot "
          "authenticate, so anyone could write reports in this node's name; use 127.0.0.1 or "
          "pass --insecure-tcp",
          config.listen_tcp));
    }
  }
  std::vector<std::string> endpoints;
  for (absl::string_view e : absl::StrSplit(config.aggregator, ',', absl::SkipWhitespace())) {
    endpoints.emplace_back(absl::StripAsciiWhitespace(e));
  }
  if (endpoints.empty()) {
    return absl::InvalidArgumentError("--aggregator needs at least one host:port");
  }
  const int64_t spool_share = config.spool_max_bytes / static_cast<int64_t>(endpoints.size());
  if (!config.spool_dir.empty() && spool_share < (64 << 10)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--spool-max-bytes must be at least 64 KiB per aggregator (%d aggregators)",
                        endpoints.size()));
  }
  const ClientTls tls =
      ClientTls::FromFlags(config.aggregator_tls, config.aggregator_ca_file,
                           config.aggregator_cert_file, config.aggregator_key_file);
  auto credentials = MakeChannelCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  auto token = TokenFile::Open(config.aggregator_token_file);
  if (!token.ok()) return token.status();

  AgentSetup setup;
  setup.tls = tls.enabled;
  setup.token = std::move(*token);
  if (setup.token != nullptr && !tls.enabled) {
    setup.warnings.push_back(
        "--aggregator-token-file without TLS: the token crosses the network in clear");
  }
  AgentServerOptions& options = setup.options;
  options.listen = config.listen;
  options.listen_tcp = config.listen_tcp;
  options.socket_dir_mode = *dir_mode;
  options.plugins.mode = *socket_mode;
  options.plugins.group = config.socket_group;
  options.plugins.proc_dir = config.proc_dir;
  options.plugins.max_connections = static_cast<int>(config.max_plugin_connections);
  options.plugins.max_per_peer = static_cast<int>(config.max_plugin_connections_per_peer);
  options.plugins.stream_deadline = absl::Seconds(config.plugin_connect_deadline_s);
  options.streams.max_streams = static_cast<int>(config.max_plugin_streams);
  options.streams.idle_timeout = absl::Seconds(config.plugin_stream_idle_s);
  options.streams.bytes_per_s = config.plugin_stream_mib_per_s * (1 << 20);
  options.streams.burst_bytes = std::max(4 * options.streams.bytes_per_s, 16.0 * (1 << 20));
  options.inspector_series_bytes = static_cast<size_t>(config.inspector_series_mib * (1 << 20));
  options.aggregators = endpoints;
  options.forwarding.credentials = *credentials;
  options.forwarding.tls_server_name = config.aggregator_server_name;
  options.forwarding.token = setup.token.get();
  options.forwarding.batch_interval_ms = config.batch_interval_ms;
  options.forwarding.max_batch_reports = config.max_batch_reports;
  options.forwarding.max_queued_reports = config.max_queued_reports;
  options.forwarding.max_queued_bytes = config.max_queued_bytes;
  options.forwarding.push_timeout_ms = config.push_timeout_ms;
  options.forwarding.set_aside_after = config.set_aside_after;
  options.node_name = config.node_name;
  options.agent_id = agent_id;
  options.unready_after = absl::Seconds(config.unready_after_s);
  options.shutdown_timeout = absl::Milliseconds(config.shutdown_timeout_ms);
  options.spool_dir = config.spool_dir;
  options.spool_max_bytes = config.spool_max_bytes;
  options.spool_fsync = config.spool_fsync;
  options.pod_resources_socket = config.pod_resources_socket;
  options.pod_logs_dir = config.pod_logs_dir;
  options.pod_resources_refresh = absl::Seconds(config.pod_resources_refresh_s);
  options.http_port = static_cast<int>(config.http_port);
  return setup;
}

}  // namespace ncclwatch::agent
