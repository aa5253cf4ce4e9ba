// ncclwatch's CSI node driver: hands a training pod the node's plugin directory and the agent's
// socket directory as read-only ephemeral inline volumes, so that pods need no hostPath (which Pod
// Security "baseline" forbids) and still reach the agent over its unix socket, where the kernel
// names the process at the other end of each connection (agent/peer_identity.h).
//
//   volumes:
//     - name: ncclwatch-run
//       csi: {driver: csi.ncclwatch.io, readOnly: true, volumeAttributes: {dir: socket}}
//
// What it serves, on unix sockets, with gRPC:
//   - CSI Identity (GetPluginInfo, GetPluginCapabilities: none, Probe) and Node
//     (NodePublishVolume, NodeUnpublishVolume, NodeGetCapabilities: none, NodeGetInfo) on
//     `endpoint`; every other CSI method is UNIMPLEMENTED;
//   - the kubelet's plugin registration (GetInfo, NotifyRegistrationStatus) on
//     <registration_dir>/<driver_name>-reg.sock, so that the kubelet finds the driver without a
//     node-driver-registrar sidecar;
//   - /healthz, /readyz (200 once the kubelet has confirmed the registration) and /metrics on
//     `http_port`.
//
// NodePublishVolume bind-mounts the chosen source directory onto the kubelet's target directory,
// read-only, nosuid and nodev (the socket directory also noexec), so that no pod can write into
// what every pod of the node loads. The flags are set at Start on a private staging mount of each
// source (<endpoint's directory>/stage-plugin, stage-socket), and each volume is a bind of that:
// a bind copies the flags into the new mount and into the host's copy that mount propagation
// makes, where a remount of the volume would change only the driver's own copy. It refuses, with
// INVALID_ARGUMENT and a message that says what to change in the pod: a volume that is not
// readOnly, not ephemeral, a block volume, mount flags, a `dir` other than plugin or socket, any
// other volume attribute, and a target outside <kubelet_dir>/pods/. Publishing the same target
// twice and unpublishing one that is gone both succeed (the kubelet retries). Every call is counted
// in ncclwatch_csi_{publish,unpublish}_total{...,result}.
//
// Mount propagation: the driver must run in a mount namespace whose <kubelet_dir>/pods propagates
// to the host's (a privileged container with mountPropagation: Bidirectional).
//
// Thread safety: the gRPC handlers run on gRPC's threads; Start and Stop from one thread.
#ifndef NCCLWATCH_AGENT_CSI_CSI_DRIVER_H_
#define NCCLWATCH_AGENT_CSI_CSI_DRIVER_H_

#include <atomic>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/sync.h"

namespace grpc {
class Server;
class Status;
}  // namespace grpc

namespace csi::v1 {
class NodePublishVolumeRequest;
class NodeUnpublishVolumeRequest;
}  // namespace csi::v1

namespace ncclwatch::agent::csi {

inline constexpr char kDefaultDriverName[] = "csi.ncclwatch.io";
// The volume attribute that chooses what a volume shows, and its values.
inline constexpr char kDirAttribute[] = "dir";
inline constexpr char kPluginDir[] = "plugin";
inline constexpr char kSocketDir[] = "socket";

struct CsiDriverOptions {
  std::string driver_name = kDefaultDriverName;
  // The CSI socket, "unix:///var/lib/kubelet/plugins/csi.ncclwatch.io/csi.sock". Its path is what
  // the kubelet is told to dial, so the driver must see it at the node's path.
  std::string endpoint;
  // The kubelet's plugin watcher directory; empty: do not register (the driver is ready at once).
  std::string registration_dir;
  std::string kubelet_dir = "/var/lib/kubelet";   // targets must lie under <kubelet_dir>/pods/
  std::string socket_dir = "/run/ncclwatch";      // what dir=socket shows
  std::string plugin_dir = "/opt/ncclwatch/lib";  // what dir=plugin shows
  std::string node_name;                          // NodeGetInfo's node id
  int http_port = 9473;                           // 0: any free port
};

class CsiDriver {
 public:
  explicit CsiDriver(CsiDriverOptions options);
  ~CsiDriver();
  CsiDriver(const CsiDriver&) = delete;
  CsiDriver& operator=(const CsiDriver&) = delete;

  // Creates the source directories if they are missing, binds both sockets (a stale socket file
  // of a killed driver is replaced; a live one is refused) and the HTTP port. Errors name what
  // could not be done.
  absl::Status Start();
  // Stops serving and removes the registration socket (the kubelet then unregisters the driver).
  // Published volumes stay mounted: they belong to their pods.
  void Stop();

  int http_port() const { return http_port_; }
  bool registered() const { return registered_.load(std::memory_order_acquire); }
  MetricRegistry& metrics() { return metrics_; }
  // The path of the registration socket; empty without registration.
  std::string registration_socket() const;

  // The Node methods, callable without gRPC (the gRPC services call these).
  grpc::Status Publish(const ::csi::v1::NodePublishVolumeRequest& request);
  grpc::Status Unpublish(const ::csi::v1::NodeUnpublishVolumeRequest& request);

  // Called by the registration service.
  void SetRegistered(bool registered, const std::string& error);

 private:
  class Services;

  // Mounts each source directory, flagged read-only, nosuid and nodev (the socket directory also
  // noexec), on <state_dir>/stage-<dir>, a private mount that every published volume binds.
  absl::Status StageSources(const std::string& state_dir);
  // INVALID_ARGUMENT unless `target` is <kubelet_dir>/pods/<uid>/volumes/kubernetes.io~csi/
  // <volume>/mount, without "." or ".." components or a symbolic link on the way.
  grpc::Status CheckTarget(const std::string& target) const;
  Counter* PublishCounter(const std::string& dir, const std::string& result);
  Counter* UnpublishCounter(const std::string& result);

  const CsiDriverOptions options_;
  MetricRegistry metrics_;
  HttpServer http_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> csi_server_;
  std::unique_ptr<grpc::Server> registration_server_;
  int http_port_ = 0;
  std::atomic<bool> registered_{false};
  Gauge* registered_gauge_;
  Gauge* published_gauge_;
  std::string plugin_stage_;  // set by Start
  std::string socket_stage_;
  Mutex op_mu_;  // held through each publish and unpublish
  std::set<std::string> published_ ABSL_GUARDED_BY(op_mu_);  // targets mounted by this process
};

// Whether `path` is a mount point in this process's mount namespace (read from
// /proc/self/mountinfo, so that a bind mount of a directory onto itself counts too).
bool IsMountPoint(const std::string& path);

}  // namespace ncclwatch::agent::csi

#endif  // NCCLWATCH_AGENT_CSI_CSI_DRIVER_H_
