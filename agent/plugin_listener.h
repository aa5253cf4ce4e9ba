// The plugins' unix socket, accepted by the agent itself so that each connection's peer is known
// from the kernel before gRPC serves it.
//
// gRPC binding the socket would hide the connection's descriptor; here the agent binds it, gives
// it its mode and group before listening (so no process can connect while it is wider open than
// configured), accepts on its own thread, records IdentifyPeer (peer_identity.h) in a PeerTable
// and hands the descriptor to the gRPC server (grpc::AddInsecureChannelFromFd), whose calls then
// carry the peer "fd:<n>".
//
// Metrics:
//   ncclwatch_agent_plugin_connections_total{peer}  accepted connections: peer="pod" (the kernel
//       names its pod), "host" (a process outside any pod), "unseen" (outside the agent's pid
//       namespace: the agent lacks hostPID)
//   ncclwatch_agent_plugin_accept_errors_total      failed accepts (e.g. out of descriptors)
//
// Thread safety: Listen, Start and Stop are for the owning thread, in that order.
#ifndef NCCLWATCH_AGENT_PLUGIN_LISTENER_H_
#define NCCLWATCH_AGENT_PLUGIN_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "agent/peer_identity.h"
#include "common/metrics.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace ncclwatch::agent {

struct PluginListenerOptions {
  std::string path;  // the socket file; its directory prepared by PrepareUnixSocket
  mode_t mode = 0660;
  std::string group;               // name or gid; empty: the agent's own
  std::string proc_dir = "/proc";  // where peers' cgroups are read; empty: not read
};

class PluginListener {
 public:
  PluginListener(PluginListenerOptions options, PeerTable& peers, MetricRegistry& metrics);
  ~PluginListener();  // Stop()
  PluginListener(const PluginListener&) = delete;
  PluginListener& operator=(const PluginListener&) = delete;

  // Binds the socket, applies its group and mode (SecureUnixSocket's errors), then listens.
  // Unavailable "cannot listen on <path>: <why>" otherwise.
  absl::Status Listen();
  // Accepts connections on a thread of its own, handing each to `server` (started; outlives the
  // listener's Stop).
  void Start(grpc::Server* server);
  // Stops accepting and removes the socket file if it is still the one bound here. Connections
  // handed over stay with gRPC. Idempotent.
  void Stop();

 private:
  void Run(grpc::Server* server);
  void Accepted(int fd, grpc::Server* server);

  const PluginListenerOptions options_;
  PeerTable& peers_;
  Counter* from_pod_;
  Counter* from_host_;
  Counter* gone_;
  Counter* unseen_;
  Counter* accept_errors_;
  int fd_ = -1;
  dev_t dev_ = 0;  // the bound socket file, to remove only our own at Stop
  ino_t ino_ = 0;
  std::atomic<bool> stopping_{false};
  bool warned_unseen_ = false;  // accept thread only
  std::thread thread_;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_PLUGIN_LISTENER_H_
