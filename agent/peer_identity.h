// Who is on the other end of a plugin connection, as the kernel tells it, never as a report does.
//
// The agent accepts plugin connections on its unix socket itself (plugin_listener.h) and asks the
// kernel for the peer's credentials (SO_PEERCRED: pid, uid, gid as they were at connect()). The
// pid leads to the process's cgroup (/proc/<pid>/cgroup), whose path names the pod's UID and the
// container's id under every kubelet cgroup layout:
//   systemd driver .../kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/
//                   cri-containerd-<64 hex>.scope
//   cgroupfs driver .../kubepods/besteffort/pod<uid>/<64 hex>
// and the kubelet's log directory (/var/log/pods/<namespace>_<pod>_<uid>) names the pod of a UID.
// A process cannot change any of the three: they are the kernel's and the kubelet's.
//
// Seeing the peer's pid needs the agent in the host's pid namespace (hostPID): from inside its
// own, a peer outside it reads as pid 0 and is attributed as before, from its GPU alone (counted).
//
// Thread safety: the free functions keep no state. PodDirectory and PeerTable may be used from any
// thread.
#ifndef NCCLWATCH_AGENT_PEER_IDENTITY_H_
#define NCCLWATCH_AGENT_PEER_IDENTITY_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/sync.h"

namespace ncclwatch::agent {

// The pod and container a process runs in, from its cgroup path.
struct CgroupPod {
  std::string pod_uid;       // "1f0c5a3e-...": the canonical dashed form
  std::string container_id;  // 64 hex digits; empty when the path does not end in one
  bool operator==(const CgroupPod&) const = default;
};

// Parses the contents of /proc/<pid>/cgroup (cgroup v1 or v2, either kubelet driver). nullopt for
// a process outside any pod (no "kubepods" path with a pod UID in it).
std::optional<CgroupPod> PodFromCgroup(std::string_view cgroup_file);

struct PodName {
  std::string pod_namespace;
  std::string pod;
  bool operator==(const PodName&) const = default;
};

// Parses the kubelet's per-pod log directory name "<namespace>_<pod>_<uid>" (namespaces and pod
// names cannot hold '_'); nullopt for any other name.
std::optional<std::pair<std::string, PodName>> ParsePodLogDir(std::string_view name);

// Pod UID -> namespace and name, from the directory names under the kubelet's /var/log/pods. The
// listing is read again on a miss, at most once per `min_rescan` (a pod that starts now is listed
// by the kubelet before its containers run, so its plugin finds it).
class PodDirectory {
 public:
  explicit PodDirectory(std::string dir, absl::Duration min_rescan = absl::Seconds(1));
  std::optional<PodName> Find(const std::string& pod_uid);
  const std::string& dir() const { return dir_; }

 private:
  void Rescan() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const absl::Duration min_rescan_;
  ncclwatch::Mutex mu_;
  absl::flat_hash_map<std::string, PodName> by_uid_ ABSL_GUARDED_BY(mu_);
  absl::Time scanned_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// What the kernel says about one connection.
struct PeerIdentity {
  pid_t pid = 0;  // 0: the peer is outside the agent's pid namespace (agent without hostPID)
  uid_t uid = 0;
  gid_t gid = 0;
  std::optional<CgroupPod> pod;  // nullopt: not in a pod (or pid 0, or its cgroup unreadable)
  // The pid is known but its cgroup could not be read: the process exited before the agent
  // looked (a child that connected and exited, its socket inherited). Who sends on this
  // connection is then unknown, and nothing it claims (its GPU) may name a pod for it.
  bool cgroup_unreadable = false;
};

// Asks the kernel who holds the other end of the connected unix socket `fd`, and reads its cgroup
// under `proc_dir` (normally "/proc"; empty: the cgroup is not read). nullopt when the socket has
// no peer credentials (not a unix socket).
std::optional<PeerIdentity> IdentifyPeer(int fd, const std::string& proc_dir);

// The identity of each live plugin connection, by the peer string gRPC gives its calls ("fd:<n>"
// for a connection handed to gRPC by descriptor), and whether it has opened a stream yet. An entry
// is replaced when its descriptor number is reused by a later connection, which can only happen
// once gRPC has closed the earlier one.
class PeerTable {
 public:
  static std::string PeerName(int fd);  // "fd:<fd>"
  void Record(int fd, std::shared_ptr<const PeerIdentity> identity);
  // The identity recorded for `grpc_peer`; null for a peer not accepted through the table.
  std::shared_ptr<const PeerIdentity> Find(std::string_view grpc_peer) const;
  // Find, and notes that the connection opened a stream (the listener's deadline is then met).
  std::shared_ptr<const PeerIdentity> OpenStream(std::string_view grpc_peer);
  // Whether the connection on `fd` has opened a stream since it was recorded.
  bool Streamed(int fd) const;
  // Drops the entry of a connection that has ended.
  void Forget(int fd);

 private:
  struct Entry {
    std::shared_ptr<const PeerIdentity> identity;
    bool streamed = false;
  };
  static std::optional<int> FdOf(std::string_view grpc_peer);

  mutable ncclwatch::Mutex mu_;
  absl::flat_hash_map<int, Entry> by_fd_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_PEER_IDENTITY_H_
