// The node agent as a server object: one Forwarder (with its Spool when spooling) per aggregator
// endpoint, the kubelet PodResolver, the plugins' gRPC service on a unix socket (and optionally
// TCP), and /metrics, /healthz and /readyz over HTTP. main.cc only parses and checks flags and
// wires this up; tests can run it in-process.
//
// Thread safety: Start() and Stop() are for the owning thread (not concurrently with each other);
// the accessors may be called from any thread once Start() has returned.
#ifndef NCCLWATCH_AGENT_AGENT_SERVER_H_
#define NCCLWATCH_AGENT_AGENT_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/agent_service.h"
#include "agent/forwarder.h"
#include "agent/plugin_listener.h"
#include "common/daemon.h"
#include "common/metrics.h"
#include "common/periodic_task.h"

namespace grpc {
class ChannelCredentials;
class Server;
}  // namespace grpc

namespace ncclwatch {
class TokenFile;
}  // namespace ncclwatch

namespace ncclwatch::agent {

class AgentService;
class Forwarder;
class NodeInspectorSeries;
class PluginListener;
class PodResolver;
class ReportHandler;
class Spool;

// Already-checked settings (main.cc checks the flags); the defaults are the flags' defaults.
struct AgentServerOptions {
  // Where plugins connect: "unix:///path" (or "unix:path") or host:port.
  std::string listen = "unix:///run/ncclwatch/agent.sock";
  std::string listen_tcp;  // a second listener, host:port (port 0: any free port); empty: none
  // The permissions of the unix socket's directory when the agent creates it.
  mode_t socket_dir_mode = 0755;
  // Plugin connections on the unix socket (PluginListener): the socket's permissions and group,
  // where peers' cgroups are read, how many connections may be open (in all, from one peer) and
  // how soon each must open a stream. Its `path` is `listen`'s.
  PluginListenerOptions plugins;

  // Aggregator endpoints, host:port or name=host:port, at least one. Jobs are sharded between
  // them by name (ShardOf).
  std::vector<std::string> aggregators;
  // How every endpoint is forwarded to (ForwarderOptions: batching, the in-memory queue, the push
  // deadline, setting poison batches aside, TLS and the bearer token). Set per endpoint by the
  // server: its address and name, the agent's id and node, the metric labels and the spool.
  ForwarderOptions forwarding;

  std::string node_name;  // stamped on every report; not empty
  std::string agent_id;   // this run's identity towards the aggregators; not empty

  // /readyz fails once every push to an aggregator has failed for this long.
  absl::Duration unready_after = absl::Minutes(1);
  // At Stop, how long to keep forwarding what is queued, all endpoints together.
  absl::Duration shutdown_timeout = absl::Milliseconds(5000);

  // The durable spool (empty: memory only). With one aggregator the directory itself, with
  // several a subdirectory each, named after the endpoint. `spool_max_bytes` is shared evenly
  // between the endpoints (at least 64 KiB each).
  std::string spool_dir;
  int64_t spool_max_bytes = 1ll << 30;
  bool spool_fsync = false;

  // Where the kubelet's per-pod log directories are (peer_identity.h), which name the pods the
  // kernel finds plugins in (with plugins.proc_dir, the processes' cgroups; either empty, or not
  // a directory as outside Kubernetes: not read, and peers are attributed by their GPU alone).
  std::string pod_logs_dir = "/var/log/pods";

  // The kubelet's pod-resources socket (empty: no pod attribution) and how often to ask it.
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  absl::Duration pod_resources_refresh = absl::Seconds(10);

  int http_port = 9472;  // on 0.0.0.0; 0: any free port
  // Plugin streams: how many may be open, and how long one may stay silent (AgentService).
  StreamLimits streams;
  // The node-local Inspector series on /metrics: rendered bytes kept (NodeInspectorSeries).
  size_t inspector_series_bytes = 16 << 20;
};

class AgentServer {
 public:
  explicit AgentServer(AgentServerOptions options);
  ~AgentServer();  // Stop()
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  // Opens the spools (logging what an earlier run left in each), prepares the unix socket, starts
  // serving plugins, forwarding and the pod resolver, then HTTP. Errors name what failed, and
  // are those of Spool::Open, PrepareUnixSocket, SecureUnixSocket (unix_socket.h),
  // HttpServer::Start, or Unavailable "cannot listen on <listen>[ and <listen_tcp>]"; whatever
  // was started is then stopped again (nothing listens, no thread runs). Call once: a second
  // call fails with FailedPrecondition. InvalidArgument without any aggregator endpoint.
  absl::Status Start();

  // The shutdown sequence: the plugins' streams get 500 ms to end, the pod resolver stops, every
  // forwarder flushes within one shared deadline of `shutdown_timeout` (what is left goes to the
  // spool), the forwarders stop, HTTP stops. Logs "all reports forwarded; exiting" or "exiting
  // with unforwarded reports". Idempotent; a no-op unless Start() succeeded.
  void Stop();

  // The bound ports once Start() succeeded: HTTP, and the --listen-tcp listener (0 without one).
  int http_port() const { return http_port_; }
  int tcp_port() const { return tcp_port_; }
  // The kubelet resolver once Start() succeeded; null without --pod-resources-socket. Tests wait
  // on its refreshes.
  const PodResolver* pod_resolver() const { return pods_.get(); }

 private:
  // Opens the spools and creates (without starting) one forwarder per endpoint.
  absl::Status OpenForwarders();
  // Prepares and binds the unix socket, starts the plugins' gRPC server, then the accept loop.
  absl::Status StartGrpc();
  void InstallHttpRoutes();
  static HttpServerOptions HttpOptions(MetricRegistry& metrics) {
    HttpServerOptions o;
    o.metrics = &metrics;
    o.metric_prefix = "ncclwatch_agent";
    return o;
  }
  // After a failed Start(): stops whatever Start() got running.
  void Abandon();

  const AgentServerOptions options_;
  // Declared in dependency order: each member may refer to those above it, and is destroyed
  // before them.
  MetricRegistry metrics_;
  std::unique_ptr<NodeInspectorSeries> inspector_;
  std::vector<std::unique_ptr<Spool>> spools_;
  std::vector<std::unique_ptr<Forwarder>> forwarders_;
  std::unique_ptr<PodResolver> pods_;
  std::unique_ptr<PodDirectory> pod_names_;
  PeerTable peers_;
  std::unique_ptr<ReportHandler> handler_;
  std::unique_ptr<AgentService> service_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<PluginListener> listener_;    // the unix socket's accept loop
  std::unique_ptr<PeriodicTask> idle_streams_;  // closes silent plugin streams
  HttpServer http_{HttpOptions(metrics_)};
  int http_port_ = 0;
  int tcp_port_ = 0;
  bool started_ = false;  // Start() was called
  bool running_ = false;  // Start() succeeded and Stop() has not run
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_AGENT_SERVER_H_
