#include "agent/plugin_listener.h"

#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "agent/unix_socket.h"
#include "common/log.h"

namespace ncclwatch::agent {

PluginListener::PluginListener(PluginListenerOptions options, PeerTable& peers,
                               MetricRegistry& metrics)
    : options_(std::move(options)), peers_(peers) {
  constexpr const char* kName = "ncclwatch_agent_plugin_connections_total";
  constexpr const char* kHelp =
      "Plugin connections accepted, by what the kernel says of the peer: pod (its pod is "
      "known), host (a process outside any pod), unseen (outside the agent's pid namespace), "
      "gone (it exited before the agent read its cgroup).";
  from_pod_ = metrics.GetCounter(kName, kHelp, {{"peer", "pod"}});
  from_host_ = metrics.GetCounter(kName, kHelp, {{"peer", "host"}});
  gone_ = metrics.GetCounter(kName, kHelp, {{"peer", "gone"}});
  unseen_ = metrics.GetCounter(kName, kHelp, {{"peer", "unseen"}});
  accept_errors_ = metrics.GetCounter("ncclwatch_agent_plugin_accept_errors_total",
                                      "Plugin connections that could not be accepted.");
}

PluginListener::~PluginListener() { Stop(); }

absl::Status PluginListener::Listen() {
  sockaddr_un addr{};
  if (options_.path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrFormat("socket path %s is longer than %d bytes",
                                                      options_.path, sizeof(addr.sun_path) - 1));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, options_.path.c_str(), options_.path.size() + 1);
  auto fail = [this](const char* what) {
    const std::string why = strerror(errno);
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s: %s: %s", options_.path, what, why));
  };
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return fail("socket");
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return fail("bind");
  struct stat st;
  if (lstat(options_.path.c_str(), &st) != 0) return fail("stat");
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  // Mode and group before listen(): until then nobody can connect.
  if (absl::Status s = SecureUnixSocket(options_.path, options_.mode, options_.group); !s.ok()) {
    close(fd_);
    fd_ = -1;
    unlink(options_.path.c_str());
    return s;
  }
  if (listen(fd_, SOMAXCONN) != 0) return fail("listen");
  return absl::OkStatus();
}

void PluginListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { Run(server); });
}

void PluginListener::Run(grpc::Server* server) {
  while (!stopping_.load(std::memory_order_acquire)) {
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Accepted(fd, server);
      continue;
    }
    if (stopping_.load(std::memory_order_acquire)) break;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    accept_errors_->Increment();
    LogWarning("cannot accept a plugin connection on %s: %s", options_.path, strerror(errno));
    // Out of descriptors or memory: give the streams closing meanwhile a moment to free some.
    absl::SleepFor(absl::Milliseconds(100));
  }
}

void PluginListener::Accepted(int fd, grpc::Server* server) {
  std::optional<PeerIdentity> identity = IdentifyPeer(fd, options_.proc_dir);
  if (!identity || identity->pid == 0) {
    unseen_->Increment();
    if (!warned_unseen_) {
      warned_unseen_ = true;
      LogWarning(
          "a plugin connected from outside the agent's pid namespace: its reports are attributed "
          "by the GPU they name, not by the kernel (run the agent with hostPID)");
    }
  } else if (identity->cgroup_unreadable) {
    gone_->Increment();  // exited before its cgroup was read: its reports go without a pod
  } else if (identity->pod) {
    from_pod_->Increment();
  } else {
    from_host_->Increment();
  }
  // Recorded before gRPC can read from the descriptor, so a call never misses its peer.
  peers_.Record(fd, identity ? std::make_shared<const PeerIdentity>(*std::move(identity))
                             : std::make_shared<const PeerIdentity>());
  grpc::AddInsecureChannelFromFd(server, fd);
}

void PluginListener::Stop() {
  if (fd_ < 0) return;
  stopping_.store(true, std::memory_order_release);
  shutdown(fd_, SHUT_RDWR);  // wakes accept() with EINVAL
  if (thread_.joinable()) thread_.join();
  close(fd_);
  fd_ = -1;
  struct stat st;
  if (lstat(options_.path.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    unlink(options_.path.c_str());
  }
}

}  // namespace ncclwatch::agent
