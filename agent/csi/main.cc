// ncclwatch-csi-driver: the CSI node driver that gives training pods the NCCL profiler plugin and
// the agent's socket without hostPath (csi_driver.h). Runs beside the agent, one per GPU node.
#include <unistd.h>

#include <string>

#include "absl/strings/str_format.h"
#include "agent/csi/csi_driver.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/rpc/grpc_log.h"

namespace ncclwatch::agent::csi {
namespace {

int Main(int argc, char** argv) {
  BlockTerminationSignals();
  SetLogComponent("csi");
  CsiDriverOptions options;
  options.endpoint = "unix:///var/lib/kubelet/plugins/csi.ncclwatch.io/csi.sock";
  options.registration_dir = "/var/lib/kubelet/plugins_registry";
  int64_t http_port = options.http_port;
  int64_t ready_fd = -1;
  ConfigTable table(
      "ncclwatch-csi-driver",
      "CSI node driver: mounts the node's NCCL profiler plugin directory and the ncclwatch "
      "agent's socket directory read-only into pods that ask for a csi.ncclwatch.io inline "
      "volume, so that training pods need no hostPath.");
  table.AddString("endpoint", "CSI_ENDPOINT", &options.endpoint,
                  "The CSI socket (unix:///path), at the path the kubelet sees on the node.");
  table.AddString("registration-dir", "", &options.registration_dir,
                  "The kubelet's plugin registration directory; the driver registers itself "
                  "there (<driver-name>-reg.sock). Empty: do not register.");
  table.AddString("kubelet-dir", "", &options.kubelet_dir,
                  "The kubelet's root directory; volumes are mounted only under its pods/.");
  table.AddString("socket-dir", "", &options.socket_dir,
                  "Host directory of the agent's socket: what a volume with dir: socket shows.");
  table.AddString("plugin-dir", "", &options.plugin_dir,
                  "Host directory of the NCCL profiler plugin: what a volume with dir: plugin "
                  "shows.");
  table.AddString("driver-name", "", &options.driver_name,
                  "The driver's name, as pods' csi.driver and the CSIDriver object spell it.");
  table.AddString("node-name", "NODE_NAME", &options.node_name,
                  "This node's name (NodeGetInfo's node id); default: the host name.");
  table.AddInt("http-port", "", &http_port, "Port of /healthz, /readyz and /metrics (0: any).",
               Range::Between(0, 65535));
  table.AddInt("ready-fd", "", &ready_fd,
               "Write one line to this file descriptor once serving, then close it (tests).",
               Range::AtLeast(-1));
  if (auto exit_code = table.ParseDaemonCommandLine(argc, argv)) return *exit_code;
  RouteGrpcLogs();
  if (options.node_name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    options.node_name = host;
  }
  options.http_port = static_cast<int>(http_port);
  LogInfo("starting: %s", table.Describe());
  CsiDriver driver(options);
  if (absl::Status s = driver.Start(); !s.ok()) {
    LogError("%s", s.message());
    return 1;
  }
  LogInfo("serving CSI on %s, metrics on :%d%s", options.endpoint, driver.http_port(),
          options.registration_dir.empty()
              ? std::string(" (not registering with the kubelet)")
              : absl::StrFormat(", waiting for the kubelet to register it through %s",
                                driver.registration_socket()));
  NotifyReady(static_cast<int>(ready_fd),
              absl::StrFormat("ready http_port=%d", driver.http_port()));
  const int sig = WaitForTerminationSignal();
  LogInfo("signal %d: stopping (published volumes stay mounted)", sig);
  driver.Stop();
  return 0;
}

}  // namespace
}  // namespace ncclwatch::agent::csi

int main(int argc, char** argv) { return ncclwatch::agent::csi::Main(argc, argv); }
