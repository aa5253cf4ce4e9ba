// The plugins' unix socket, accepted by the agent itself so that each connection's peer is known
// from the kernel before gRPC serves it.
//
// gRPC binding the socket would hide the connection's descriptor; here the agent binds it, gives
// it its mode and group before listening (so no process can connect while it is wider open than
// configured), accepts on its own thread, records IdentifyPeer (peer_identity.h) in a PeerTable
// and hands the descriptor to the gRPC server (grpc::AddInsecureChannelFromFd), whose calls then
// carry the peer "fd:<n>".
//
// Connections are bounded before gRPC spends memory on them: at most `max_connections` open at
// once, at most `max_per_peer` from one peer (a pod by its UID; a process outside any pod by its
// uid; every peer the kernel could not name together), and each must open a stream within
// `stream_deadline` or it is closed. A connection over a cap is closed at once, never handed over.
// To see a connection end and to close one safely, the listener keeps a duplicate of each
// descriptor it hands over (gRPC shuts a socket down before it closes it, and a peer's close
// hangs it up: either wakes the listener, which then lets go of its duplicate).
//
// Metrics:
//   ncclwatch_agent_plugin_connections_total{peer}  accepted connections: peer="pod" (the kernel
//       names its pod), "host" (a process outside any pod), "unseen" (outside the agent's pid
//       namespace: the agent lacks hostPID), "gone" (exited before its cgroup was read)
//   ncclwatch_agent_plugin_connections                   open now
//   ncclwatch_agent_plugin_connections_refused_total{reason}  closed at accept: "max_connections",
//       "max_per_peer"
//   ncclwatch_agent_plugin_connections_closed_total{reason}   closed later: "no_stream" (none
//       opened within the deadline)
//   ncclwatch_agent_plugin_accept_errors_total      failed accepts (e.g. out of descriptors)
//
// Thread safety: Listen, Start and Stop are for the owning thread, in that order.
#ifndef NCCLWATCH_AGENT_PLUGIN_LISTENER_H_
#define NCCLWATCH_AGENT_PLUGIN_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
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
  int max_connections = 1024;
  int max_per_peer = 64;
  absl::Duration stream_deadline = absl::Seconds(10);
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
  // One connection handed to gRPC, by the listener's duplicate of its descriptor.
  struct Connection {
    int fd = -1;  // gRPC's descriptor (its peer name)
    std::string peer_key;
    absl::Time deadline;  // to open a stream by
    bool streamed = false;
  };

  void Run(grpc::Server* server);
  void AcceptAll(grpc::Server* server);
  void Accepted(int fd, grpc::Server* server);
  // Lets go of the connection duplicated as `dup_fd` (it ended, or its descriptor was reused).
  void Release(int dup_fd);
  // Closes the connections past their deadline without a stream; returns the epoll_wait timeout
  // (ms) until the next deadline, -1 for none.
  int EnforceDeadlines();
  void WarnRefused(const char* why, const std::string& peer_key);

  const PluginListenerOptions options_;
  PeerTable& peers_;
  Counter* from_pod_;
  Counter* from_host_;
  Counter* gone_;
  Counter* unseen_;
  Counter* accept_errors_;
  Counter* refused_total_;
  Counter* refused_per_peer_;
  Counter* closed_no_stream_;
  Gauge* open_;
  int fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: Stop() wakes the accept thread
  // Accept thread only: the open connections by duplicate, gRPC's descriptor -> duplicate, and
  // how many each peer holds.
  absl::flat_hash_map<int, Connection> connections_;
  absl::flat_hash_map<int, int> dup_of_;
  absl::flat_hash_map<std::string, int> per_peer_;
  absl::Time last_refusal_warning_ = absl::InfinitePast();
  dev_t dev_ = 0;  // the bound socket file, to remove only our own at Stop
  ino_t ino_ = 0;
  std::atomic<bool> stopping_{false};
  bool warned_unseen_ = false;  // accept thread only
  std::thread thread_;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_PLUGIN_LISTENER_H_
