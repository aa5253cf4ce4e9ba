#include "agent/plugin_listener.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

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
  constexpr const char* kRefused = "ncclwatch_agent_plugin_connections_refused_total";
  constexpr const char* kRefusedHelp =
      "Plugin connections closed as soon as accepted: max_connections (--max-plugin-connections "
      "were open), max_per_peer (its pod, or uid outside pods, held "
      "--max-plugin-connections-per-peer).";
  refused_total_ = metrics.GetCounter(kRefused, kRefusedHelp, {{"reason", "max_connections"}});
  refused_per_peer_ = metrics.GetCounter(kRefused, kRefusedHelp, {{"reason", "max_per_peer"}});
  closed_no_stream_ =
      metrics.GetCounter("ncclwatch_agent_plugin_connections_closed_total",
                         "Plugin connections the agent closed: no_stream (none opened within "
                         "--plugin-connect-deadline-s).",
                         {{"reason", "no_stream"}});
  open_ = metrics.GetGauge("ncclwatch_agent_plugin_connections",
                           "Plugin connections open on the unix socket.");
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
    for (int* f : {&fd_, &epoll_fd_, &wake_fd_}) {
      if (*f >= 0) close(*f);
      *f = -1;
    }
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
  if (fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK) != 0) return fail("fcntl");
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return fail("epoll_create1");
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return fail("eventfd");
  for (int watched : {fd_, wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = watched;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, watched, &ev) != 0) return fail("epoll_ctl");
  }
  return absl::OkStatus();
}

void PluginListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { Run(server); });
}

void PluginListener::Run(grpc::Server* server) {
  std::vector<epoll_event> events(64);
  while (!stopping_.load(std::memory_order_acquire)) {
    const int timeout_ms = EnforceDeadlines();
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      LogError("plugin socket %s: epoll_wait: %s", options_.path, strerror(errno));
      break;
    }
    // Hang-ups first: a connection accepted in this round may get the number of a duplicate
    // released in it, and an event of the old one must not release the new one.
    bool accept = false;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == fd_) {
        accept = true;
      } else if (fd != wake_fd_) {
        Release(fd);  // hung up: the peer closed, or gRPC shut the socket down
      }
    }
    if (accept) AcceptAll(server);
  }
}

void PluginListener::AcceptAll(grpc::Server* server) {
  while (!stopping_.load(std::memory_order_acquire)) {
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      Accepted(fd, server);
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    accept_errors_->Increment();
    LogWarning("cannot accept a plugin connection on %s: %s", options_.path, strerror(errno));
    // Out of descriptors or memory: give the streams closing meanwhile a moment to free some.
    absl::SleepFor(absl::Milliseconds(100));
    return;
  }
}

namespace {

// Whose connections count together against --max-plugin-connections-per-peer: a pod's, a uid's
// outside pods, and every peer's the kernel could not name.
std::string PeerKey(const std::optional<PeerIdentity>& identity) {
  if (!identity || identity->pid == 0 || identity->cgroup_unreadable) return "unknown";
  if (identity->pod) return "pod " + identity->pod->pod_uid;
  return "uid " + std::to_string(identity->uid);
}

}  // namespace

void PluginListener::WarnRefused(const char* why, const std::string& peer_key) {
  const absl::Time now = absl::Now();
  if (now - last_refusal_warning_ < absl::Minutes(1)) return;
  last_refusal_warning_ = now;
  LogWarning(
      "plugin connections refused on %s: %s (this one from %s); counted in "
      "ncclwatch_agent_plugin_connections_refused_total, logged at most once a minute",
      options_.path, why, peer_key);
}

void PluginListener::Accepted(int fd, grpc::Server* server) {
  // gRPC closed the connection that held this descriptor number before: it is over.
  if (auto it = dup_of_.find(fd); it != dup_of_.end()) Release(it->second);

  std::optional<PeerIdentity> identity = IdentifyPeer(fd, options_.proc_dir);
  const std::string key = PeerKey(identity);
  if (static_cast<int>(connections_.size()) >= options_.max_connections) {
    refused_total_->Increment();
    WarnRefused("--max-plugin-connections are open", key);
    close(fd);
    return;
  }
  int& held = per_peer_[key];
  if (held >= options_.max_per_peer) {
    refused_per_peer_->Increment();
    WarnRefused("one peer holds --max-plugin-connections-per-peer", key);
    close(fd);
    return;
  }
  const int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  epoll_event ev{};
  // Only EPOLLHUP and EPOLLERR, which are always reported: both directions shut, by the peer's
  // close or gRPC's shutdown. A peer that only stops writing is still a connection gRPC holds.
  ev.events = 0;
  ev.data.fd = dup_fd;
  if (dup_fd < 0 || epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, dup_fd, &ev) != 0) {
    accept_errors_->Increment();
    LogWarning("cannot track a plugin connection on %s: %s", options_.path, strerror(errno));
    if (dup_fd >= 0) close(dup_fd);
    close(fd);
    if (held == 0) per_peer_.erase(key);
    return;
  }
  ++held;
  connections_.emplace(dup_fd, Connection{fd, key, absl::Now() + options_.stream_deadline});
  dup_of_[fd] = dup_fd;
  open_->Set(static_cast<double>(connections_.size()));

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

void PluginListener::Release(int dup_fd) {
  auto it = connections_.find(dup_fd);
  if (it == connections_.end()) return;
  const Connection& c = it->second;
  if (auto d = dup_of_.find(c.fd); d != dup_of_.end() && d->second == dup_fd) {
    dup_of_.erase(d);
    peers_.Forget(c.fd);
  }
  if (auto p = per_peer_.find(c.peer_key); p != per_peer_.end() && --p->second <= 0) {
    per_peer_.erase(p);
  }
  // Out of the epoll set before the close: gRPC may still hold the socket open a moment.
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, dup_fd, nullptr);
  close(dup_fd);
  connections_.erase(it);
  open_->Set(static_cast<double>(connections_.size()));
}

int PluginListener::EnforceDeadlines() {
  const absl::Time now = absl::Now();
  absl::Time next = absl::InfiniteFuture();
  for (auto& [dup_fd, c] : connections_) {
    if (c.streamed) continue;
    if (dup_of_.contains(c.fd) && peers_.Streamed(c.fd)) {
      c.streamed = true;
      continue;
    }
    if (c.deadline > now) {
      next = std::min(next, c.deadline);
      continue;
    }
    // gRPC notices the shutdown and closes its side; the hang-up then releases the duplicate.
    c.streamed = true;  // not again
    closed_no_stream_->Increment();
    shutdown(dup_fd, SHUT_RDWR);
  }
  if (next == absl::InfiniteFuture()) return -1;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(next - now) + 1, 60'000));
}

void PluginListener::Stop() {
  if (fd_ < 0) return;
  stopping_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    LogWarning("cannot wake the plugin socket's accept thread: %s", strerror(errno));
  }
  if (thread_.joinable()) thread_.join();
  // The duplicates go; the connections stay with gRPC, which closes them at its shutdown.
  for (const auto& [dup_fd, c] : connections_) close(dup_fd);
  connections_.clear();
  dup_of_.clear();
  per_peer_.clear();
  open_->Set(0);
  for (int* f : {&fd_, &epoll_fd_, &wake_fd_}) {
    close(*f);
    *f = -1;
  }
  struct stat st;
  if (lstat(options_.path.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
    unlink(options_.path.c_str());
  }
}

}  // namespace ncclwatch::agent
