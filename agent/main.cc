// ncclwatch-agent: the node agent (one per GPU node, a Kubernetes DaemonSet).
// Receives RankReports from the plugins of this node's training processes on a unix socket,
// stamps them with the node name and forwards them to the aggregator in acknowledged batches.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "agent/agent_service.h"
#include "agent/forwarder.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/metrics.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"

namespace ncclwatch::agent {
namespace {

struct AgentConfig {
  std::string listen = "unix:///run/ncclwatch/agent.sock";
  std::string aggregator = "localhost:9470";
  int64_t http_port = 9472;
  std::string node_name;
  int64_t batch_interval_ms = 200;
  int64_t max_batch_reports = 512;
  int64_t max_queued_reports = 100000;
  int64_t max_queued_bytes = 16 << 20;
  int64_t push_timeout_ms = 5000;
  int64_t shutdown_timeout_ms = 5000;
  std::string spool_dir;
  int64_t spool_max_bytes = 1ll << 30;
  bool spool_fsync = false;
  int64_t ready_fd = -1;
};

void Register(ConfigTable& t, AgentConfig& c) {
  t.AddString("listen", "NCCLWATCH_AGENT_LISTEN", &c.listen,
              "Where plugins connect: unix:///path for a unix socket, or host:port for TCP.");
  t.AddString("aggregator", "NCCLWATCH_AGGREGATOR", &c.aggregator,
              "Aggregator gRPC address, host:port.");
  t.AddInt("http-port", "NCCLWATCH_AGENT_HTTP_PORT", &c.http_port,
           "Port of /metrics and /healthz (0 = any free port).");
  t.AddString("node-name", "NODE_NAME", &c.node_name,
              "Name of this node in every report; empty means the hostname.");
  t.AddInt("batch-interval-ms", "", &c.batch_interval_ms,
           "Longest time a report waits before its batch is sent.");
  t.AddInt("max-batch-reports", "", &c.max_batch_reports, "Most reports in one batch.");
  t.AddInt("max-queued-reports", "", &c.max_queued_reports,
           "Reports held in memory while the aggregator is away; the oldest are dropped beyond.");
  t.AddInt("max-queued-bytes", "", &c.max_queued_bytes,
           "Serialized bytes of reports held in memory (queue, and unsent batches without a "
           "spool, each); the oldest are dropped beyond.");
  t.AddInt("push-timeout-ms", "", &c.push_timeout_ms, "Deadline of one batch push.");
  t.AddInt("shutdown-timeout-ms", "", &c.shutdown_timeout_ms,
           "On SIGTERM, how long to keep forwarding what is queued before exiting.");
  t.AddString("spool-dir", "NCCLWATCH_AGENT_SPOOL_DIR", &c.spool_dir,
              "Directory of the durable spool: every batch is kept there until the aggregator "
              "acknowledges it, and replayed after a restart (empty: memory only).");
  t.AddInt("spool-max-bytes", "", &c.spool_max_bytes,
           "Most bytes in the spool; beyond, the oldest batches are dropped and counted.");
  t.AddBool("spool-fsync", "", &c.spool_fsync,
            "Sync every spooled batch to disk, so that it survives a power loss too (slower); "
            "without it a batch survives any crash or restart of the agent.");
  t.AddInt("ready-fd", "", &c.ready_fd,
           "Write 'ready grpc=... http_port=N' to this file descriptor once serving (-1: off).");
}

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

// gRPC refuses to bind over an existing socket file: remove a stale one, create the directory.
absl::Status PrepareUnixSocket(const std::string& listen) {
  if (!absl::StartsWith(listen, "unix:")) return absl::OkStatus();
  std::string path = listen.substr(listen.rfind("unix://") == 0 ? 7 : 5);
  std::error_code ec;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrFormat("cannot create socket directory %s: %s", p.parent_path().string(),
                        ec.message()));
  }
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s exists and is not a socket; refusing to replace it", path));
    }
    unlink(path.c_str());
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  SetLogComponent("agent");
  AgentConfig config;
  ConfigTable table("ncclwatch-agent",
                    "Node agent: receives NCCL profiler reports from the training processes on "
                    "this node and forwards them to the ncclwatch aggregator.");
  Register(table, config);
  if (auto exit_code = table.ParseDaemonCommandLine(argc, argv)) return *exit_code;
  if (config.node_name.empty()) config.node_name = Hostname();
  LogInfo("starting: %s", table.Describe());

  MetricRegistry metrics;
  ForwarderOptions fopts;
  fopts.aggregator = config.aggregator;
  fopts.agent_id = config.node_name + "-" + RandomHex(8);
  fopts.node = config.node_name;
  fopts.batch_interval_ms = config.batch_interval_ms;
  fopts.max_batch_reports = config.max_batch_reports;
  fopts.max_queued_reports = config.max_queued_reports;
  fopts.max_queued_bytes = config.max_queued_bytes;
  fopts.push_timeout_ms = config.push_timeout_ms;
  if (config.max_queued_bytes < (1 << 20)) {
    LogError("--max-queued-bytes must be at least 1 MiB");
    return 2;
  }
  LogInfo("agent id %s", fopts.agent_id);
  std::unique_ptr<Spool> spool;
  if (!config.spool_dir.empty()) {
    if (config.spool_max_bytes < (64 << 10)) {
      LogError("--spool-max-bytes must be at least 64 KiB");
      return 2;
    }
    auto opened =
        Spool::Open(config.spool_dir, config.spool_max_bytes, metrics, config.spool_fsync);
    if (!opened.ok()) {
      LogError("%s", opened.status().message());
      return 1;
    }
    spool = *std::move(opened);
    LogInfo("spool %s: %d batches (%d bytes) from an earlier run", config.spool_dir,
            spool->batches(), spool->bytes());
    fopts.spool = spool.get();
    // Small batches next to a small spool, so that dropping the oldest frees room gradually.
    fopts.max_batch_bytes = std::min<int64_t>(fopts.max_batch_bytes, config.spool_max_bytes / 8);
  }
  Forwarder forwarder(fopts, metrics);
  ReportHandler handler(config.node_name, forwarder, metrics);
  AgentService service(handler);

  if (absl::Status s = PrepareUnixSocket(config.listen); !s.ok()) {
    LogError("%s", s.message());
    return 1;
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    LogError("cannot listen on %s", config.listen);
    return 1;
  }
  forwarder.Start();

  HttpServer http;
  http.server().Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.server().Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  auto http_port = http.Start("0.0.0.0", static_cast<int>(config.http_port));
  if (!http_port.ok()) {
    LogError("%s", http_port.status().message());
    return 1;
  }
  LogInfo("serving plugins on %s, metrics on :%d, forwarding to %s", config.listen, *http_port,
          config.aggregator);
  NotifyReady(static_cast<int>(config.ready_fd),
              absl::StrFormat("ready grpc=%s http_port=%d", config.listen, *http_port));

  int sig = WaitForTerminationSignal();
  LogInfo("signal %d: closing plugin streams, forwarding what is queued", sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  bool flushed = forwarder.Flush(absl::Milliseconds(config.shutdown_timeout_ms));
  forwarder.Stop();
  http.Stop();
  LogInfo(flushed ? "all reports forwarded; exiting" : "exiting with unforwarded reports");
  return 0;
}

}  // namespace
}  // namespace ncclwatch::agent

int main(int argc, char** argv) { return ncclwatch::agent::Main(argc, argv); }
