#include "agent/agent_server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "agent/agent_service.h"
#include "agent/forwarder.h"
#include "agent/inspector_series.h"
#include "agent/plugin_listener.h"
#include "agent/pod_resources.h"
#include "agent/spool.h"
#include "agent/unix_socket.h"
#include "common/log.h"
#include "common/process_metrics.h"
#include "common/rendezvous.h"
#include "grpcpp/grpcpp.h"
#include "proto/validate.h"

namespace ncclwatch::agent {
namespace {

// An aggregator endpoint as a directory name (its spool's).
std::string EndpointDirName(const std::string& endpoint) {
  std::string out;
  for (char c : endpoint) {
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  }
  return out;
}

}  // namespace

AgentServer::AgentServer(AgentServerOptions options) : options_(std::move(options)) {
  AddProcessMetrics(metrics_);
  AddBuildInfo(metrics_, "ncclwatch_agent");
}

AgentServer::~AgentServer() { Stop(); }

absl::Status AgentServer::OpenForwarders() {
  const std::vector<std::string>& endpoints = options_.aggregators;
  if (endpoints.empty()) return absl::InvalidArgumentError("no aggregator endpoint");
  const int64_t spool_share = options_.spool_max_bytes / static_cast<int64_t>(endpoints.size());
  absl::StatusOr<std::vector<ShardMember>> members = ParseShardMembers(endpoints, "--aggregator");
  if (!members.ok()) return members.status();
  for (const ShardMember& member : *members) {
    const std::string& endpoint = member.address;
    ForwarderOptions fopts = options_.forwarding;
    fopts.aggregator = endpoint;
    fopts.shard_name = member.name;
    fopts.agent_id = options_.agent_id;
    fopts.node = options_.node_name;
    fopts.metric_labels = {{"aggregator", endpoint}};
    if (!options_.spool_dir.empty()) {
      // One aggregator: the directory itself. Several: a subdirectory each, named after the
      // endpoint, so what is spooled for one is never replayed to another.
      const std::string dir = endpoints.size() == 1
                                  ? options_.spool_dir
                                  : options_.spool_dir + "/" + EndpointDirName(member.name);
      auto opened =
          Spool::Open(dir, spool_share, metrics_, options_.spool_fsync, fopts.metric_labels);
      if (!opened.ok()) return opened.status();
      LogInfo("spool %s: %d batches (%d bytes) from an earlier run", dir, (*opened)->batches(),
              (*opened)->bytes());
      fopts.spool = opened->get();
      // Small batches next to a small spool, so that dropping the oldest frees room gradually.
      fopts.max_batch_bytes = std::min<int64_t>(fopts.max_batch_bytes, spool_share / 8);
      spools_.push_back(*std::move(opened));
    }
    forwarders_.push_back(std::make_unique<Forwarder>(fopts, metrics_));
  }
  return absl::OkStatus();
}

absl::Status AgentServer::StartGrpc() {
  const bool unix_socket = absl::StartsWith(options_.listen, "unix:");
  grpc::ServerBuilder builder;
  if (unix_socket) {
    // The agent accepts on the unix socket itself, to ask the kernel who each peer is.
    const std::string path = UnixSocketPath(options_.listen);
    if (absl::Status s = PrepareUnixSocket(path, options_.socket_dir_mode); !s.ok()) return s;
    PluginListenerOptions lopts = options_.plugins;
    lopts.path = path;
    listener_ = std::make_unique<PluginListener>(lopts, peers_, metrics_);
    if (absl::Status s = listener_->Listen(); !s.ok()) return s;
  } else {
    builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials());
  }
  if (!options_.listen_tcp.empty()) {
    builder.AddListeningPort(options_.listen_tcp, grpc::InsecureServerCredentials(), &tcp_port_);
  }
  builder.RegisterService(service_.get());
  builder.SetMaxReceiveMessageSize(kMaxReportBytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a TCP port in use is an error
  // A plugin needs one stream; a connection that opens many is not a plugin.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 16);
  grpc_ = builder.BuildAndStart();
  if (!grpc_ || (!options_.listen_tcp.empty() && tcp_port_ == 0)) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s%s", options_.listen,
                        options_.listen_tcp.empty() ? "" : " and " + options_.listen_tcp));
  }
  if (listener_) listener_->Start(grpc_.get());
  return absl::OkStatus();
}

void AgentServer::InstallHttpRoutes() {
  http_.Get("/metrics", [this](const HttpRequest&, HttpResponse& res) {
    res.Set(metrics_.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // Probes on the I/O thread: they answer even while the workers are busy.
  http_.Probe("/healthz",
              [](const HttpRequest&, HttpResponse& res) { res.Set("ok\n", "text/plain"); });
  // Ready: plugins can connect, and what they send can be kept. A spool that cannot be written
  // (disk full or read-only) is the one state in which accepted reports are at risk.
  http_.Probe("/readyz", [this](const HttpRequest&, HttpResponse& res) {
    std::string problems;
    for (const auto& spool : spools_) {
      if (!spool->writable()) problems += "spool " + spool->dir() + " cannot be written\n";
    }
    // Pushes failing for long (a full disk at the aggregator, a wrong token, a poison batch).
    const int64_t now_ns = absl::GetCurrentTimeNanos();
    for (const auto& f : forwarders_) {
      const int64_t since = f->FailingSinceNs();
      if (since != 0 && now_ns - since >= absl::ToInt64Nanoseconds(options_.unready_after)) {
        problems +=
            absl::StrFormat("every push to %s has failed for %d s (last: %s)\n", f->aggregator(),
                            (now_ns - since) / 1'000'000'000, f->LastFailure());
      }
    }
    res.status = problems.empty() ? 200 : 503;
    res.Set(problems.empty() ? "ready\n" : problems, "text/plain");
  });
}

absl::Status AgentServer::Start() {
  if (started_) return absl::FailedPreconditionError("the agent server was started before");
  started_ = true;
  if (absl::Status s = OpenForwarders(); !s.ok()) {
    Abandon();
    return s;
  }
  if (!options_.pod_resources_socket.empty()) {
    PodResolverOptions popts;
    popts.socket_path = options_.pod_resources_socket;
    popts.refresh_interval = options_.pod_resources_refresh;
    pods_ = std::make_unique<PodResolver>(popts, metrics_);
  }
  std::vector<Forwarder*> shards;
  for (auto& f : forwarders_) shards.push_back(f.get());
  NodeInspectorSeries::Limits inspector_limits;
  inspector_limits.max_bytes = options_.inspector_series_bytes;
  inspector_ = std::make_unique<NodeInspectorSeries>(options_.node_name, inspector_limits);
  metrics_.AddCollector([inspector = inspector_.get()](PromTextWriter& w) {
    w.Family("ncclwatch_agent_inspector_series_capped_total",
             "Ranks (or statistics beyond 512 per rank) left out of the node-local Inspector "
             "series by their size limits.",
             "counter");
    w.Sample("ncclwatch_agent_inspector_series_capped_total", {},
             static_cast<double>(inspector->capped()));
    inspector->Collect(w);
  });
  if (!options_.pod_logs_dir.empty() && !options_.plugins.proc_dir.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(options_.pod_logs_dir, ec)) {
      pod_names_ = std::make_unique<PodDirectory>(options_.pod_logs_dir);
    } else {
      // Outside Kubernetes (or without the mount) nothing can name a pod: GPUs alone attribute.
      LogInfo(
          "--pod-logs-dir=%s is not a directory: plugins are attributed to pods by the GPU "
          "they name, not by the kernel",
          options_.pod_logs_dir);
    }
  }
  handler_ = std::make_unique<ReportHandler>(options_.node_name, shards, metrics_, pods_.get(),
                                             inspector_.get(), pod_names_.get());
  service_ = std::make_unique<AgentService>(*handler_, metrics_, options_.streams, &peers_);
  if (absl::Status s = StartGrpc(); !s.ok()) {
    Abandon();
    return s;
  }
  for (auto& f : forwarders_) f->Start();
  if (pods_) pods_->Start();
  idle_streams_ = std::make_unique<PeriodicTask>(
      std::clamp(options_.streams.idle_timeout / 4, absl::Milliseconds(50), absl::Seconds(10)),
      [this] { service_->CancelIdle(absl::Now()); });
  idle_streams_->Start();
  InstallHttpRoutes();
  absl::StatusOr<int> http_port = http_.Start("0.0.0.0", options_.http_port);
  if (!http_port.ok()) {
    Abandon();
    return http_port.status();
  }
  http_port_ = *http_port;
  running_ = true;
  return absl::OkStatus();
}

void AgentServer::Abandon() {
  if (idle_streams_) idle_streams_->Stop();
  if (listener_) listener_->Stop();
  if (grpc_) {
    grpc_->Shutdown(std::chrono::system_clock::now());
    grpc_.reset();
  }
  if (pods_) pods_->Stop();
  for (auto& f : forwarders_) f->Stop();
  http_port_ = 0;
  tcp_port_ = 0;
}

void AgentServer::Stop() {
  if (!running_) return;
  running_ = false;
  idle_streams_->Stop();
  if (listener_) listener_->Stop();
  grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  if (pods_) pods_->Stop();
  // Flush every shard within one shared deadline; what is left goes to the spool at Stop().
  const absl::Time deadline = absl::Now() + options_.shutdown_timeout;
  bool flushed = true;
  for (auto& f : forwarders_) flushed = f->Flush(deadline - absl::Now()) && flushed;
  for (auto& f : forwarders_) f->Stop();
  http_.Stop();
  // Through "%s": clang accepts only a constant format string.
  LogInfo("%s", flushed ? "all reports forwarded; exiting" : "exiting with unforwarded reports");
}

}  // namespace ncclwatch::agent
