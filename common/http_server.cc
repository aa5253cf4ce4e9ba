#include "common/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/http_message.h"
#include "common/metrics.h"
#include "common/sync.h"

namespace ncclwatch {
using http_internal::ParseRequestHead;
using http_internal::PlainResponse;
using http_internal::SerializeResponse;

struct HttpServer::Impl {
  struct Conn {
    uint64_t id = 0;
    enum State { kReading, kQueued, kWriting } state = kReading;
    std::string in;
    std::string out;
    size_t written = 0;
    absl::Time accepted;
    absl::Time deadline;
  };
  struct Job {
    int fd;
    uint64_t id;
    HttpRequest request;
    const HttpHandler* handler;
    bool head;
  };
  struct Done {
    int fd;
    uint64_t id;
    std::string bytes;
  };

  explicit Impl(HttpServerOptions o) : options(std::move(o)) {
    if (options.metrics != nullptr) {
      queued_gauge = options.metrics->GetGauge(options.metric_prefix + "_http_queued_requests",
                                               "HTTP requests waiting for a worker thread.");
      open_gauge = options.metrics->GetGauge(options.metric_prefix + "_http_open_connections",
                                             "HTTP connections open.");
    }
  }
  void SetGauges(size_t queued) {
    if (queued_gauge != nullptr) queued_gauge->Set(static_cast<double>(queued));
  }

  void Count(const std::string& reason) {
    if (options.metrics == nullptr) return;
    options.metrics
        ->GetCounter(options.metric_prefix + "_http_refused_total",
                     "HTTP requests refused or connections closed by the server's limits, by "
                     "reason.",
                     {{"reason", reason}})
        ->Increment();
  }

  // I/O thread.
  void Loop();
  void Accept();
  void Read(int fd, Conn& c);
  void Dispatch(int fd, Conn& c, size_t head_end);
  void Respond(int fd, Conn& c, std::string bytes);
  void Write(int fd, Conn& c);
  void Close(int fd);
  void CollectDone();
  void Expire();
  void Work();

  HttpServerOptions options;
  std::map<std::string, HttpHandler> gets;
  std::map<std::string, HttpHandler> probes;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::thread io;
  std::vector<std::thread> workers;
  std::map<int, Conn> conns;  // by fd; I/O thread only
  uint64_t next_id = 1;
  Gauge* queued_gauge = nullptr;
  Gauge* open_gauge = nullptr;

  Mutex mu;
  std::deque<Job> queue ABSL_GUARDED_BY(mu);
  std::deque<Done> done ABSL_GUARDED_BY(mu);
  bool quit ABSL_GUARDED_BY(mu) = false;
};

void HttpServer::Impl::Close(int fd) {
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  conns.erase(fd);
}

void HttpServer::Impl::Accept() {
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or out of descriptors: try again on the next event
    if (static_cast<int>(conns.size()) >= options.max_connections) {
      // Make room by closing the oldest connection still sending its head: idle and trickling
      // clients go first, requests being answered are never cut.
      auto oldest = conns.end();
      for (auto it = conns.begin(); it != conns.end(); ++it) {
        if (it->second.state != Conn::kReading) continue;
        if (oldest == conns.end() || it->second.accepted < oldest->second.accepted) oldest = it;
      }
      if (oldest == conns.end()) {
        Count("too_many_connections");
        close(fd);
        continue;
      }
      Count("evicted");
      Close(oldest->first);
    }
    Conn& c = conns[fd];
    c.id = next_id++;
    c.accepted = absl::Now();
    c.deadline = c.accepted + options.header_timeout;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
}

void HttpServer::Impl::Respond(int fd, Conn& c, std::string bytes) {
  c.state = Conn::kWriting;
  c.out = std::move(bytes);
  c.written = 0;
  c.deadline = absl::Now() + options.write_timeout;
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
  Write(fd, c);
}

void HttpServer::Impl::Write(int fd, Conn& c) {
  while (c.written < c.out.size()) {
    const ssize_t n = send(fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
    if (n > 0) {
      c.written += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // wait for EPOLLOUT
    break;                                                           // the client went away
  }
  shutdown(fd, SHUT_WR);
  Close(fd);
}

void HttpServer::Impl::Read(int fd, Conn& c) {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      Close(fd);
      return;
    }
    if (n < 0) break;
    c.in.append(buf, static_cast<size_t>(n));
    const size_t end = c.in.find("\r\n\r\n");
    if (end != std::string::npos && end + 4 <= options.max_header_bytes) {
      Dispatch(fd, c, end);
      return;
    }
    if (c.in.size() > options.max_header_bytes) {
      Count("header_too_large");
      Respond(fd, c, PlainResponse(431, "the request head is larger than the server accepts"));
      return;
    }
  }
}

void HttpServer::Impl::Dispatch(int fd, Conn& c, size_t head_end) {
  HttpRequest req;
  if (!ParseRequestHead(std::string_view(c.in.data(), head_end), &req)) {
    Count("malformed");
    Respond(fd, c, PlainResponse(400, "malformed request line"));
    return;
  }
  uint64_t length = 0;
  const std::string content_length = req.Header("content-length");
  if ((!content_length.empty() && (!absl::SimpleAtoi(content_length, &length) || length > 0)) ||
      !req.Header("transfer-encoding").empty()) {
    Count("body");
    Respond(fd, c, PlainResponse(413, "request bodies are not accepted"));
    return;
  }
  const bool head_only = req.method == "HEAD";
  if (req.method != "GET" && !head_only) {
    Count("method");
    HttpResponse res;
    res.status = 405;
    res.body = "only GET and HEAD are served\n";
    res.headers.emplace_back("Allow", "GET, HEAD");
    Respond(fd, c, SerializeResponse(res, false));
    return;
  }
  if (auto probe = probes.find(req.path); probe != probes.end()) {
    HttpResponse res;
    probe->second(req, res);
    Respond(fd, c, SerializeResponse(res, head_only));
    return;
  }
  auto route = gets.find(req.path);
  if (route == gets.end()) {
    Respond(fd, c, PlainResponse(404, "not found"));
    return;
  }
  {
    MutexLock lock(&mu);
    if (queue.size() < options.max_queued) {
      queue.push_back(Job{fd, c.id, std::move(req), &route->second, head_only});
      SetGauges(queue.size());
      c.state = Conn::kQueued;
      c.in.clear();
      epoll_event ev{};  // nothing to read any more: wait for the worker's answer
      ev.data.fd = fd;
      epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
      return;
    }
  }
  Count("busy");
  Respond(fd, c, PlainResponse(503, "the server is busy; retry"));
}

void HttpServer::Impl::CollectDone() {
  uint64_t ignored;
  ssize_t r = read(wake_fd, &ignored, sizeof(ignored));
  (void)r;
  std::deque<Done> ready;
  {
    MutexLock lock(&mu);
    ready.swap(done);
  }
  for (Done& d : ready) {
    auto it = conns.find(d.fd);
    if (it == conns.end() || it->second.id != d.id) continue;  // closed meanwhile
    Respond(d.fd, it->second, std::move(d.bytes));
  }
}

void HttpServer::Impl::Expire() {
  const absl::Time now = absl::Now();
  std::vector<int> late;
  for (auto& [fd, c] : conns) {
    if (c.state != Conn::kQueued && now >= c.deadline) late.push_back(fd);
  }
  for (int fd : late) {
    Conn& c = conns[fd];
    if (c.state == Conn::kReading) {
      Count("header_timeout");
      // The client may never read this; the write below does not wait for it.
      const std::string bytes = PlainResponse(408, "the request head did not arrive in time");
      ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)n;
    } else {
      Count("write_timeout");
    }
    Close(fd);
  }
}

void HttpServer::Impl::Loop() {
  epoll_event events[64];
  while (!stopping.load()) {
    const int n = epoll_wait(epoll_fd, events, 64, 250);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd) {
        Accept();
      } else if (fd == wake_fd) {
        CollectDone();
      } else if (auto it = conns.find(fd); it != conns.end()) {
        Conn& c = it->second;
        if (c.state == Conn::kQueued) {
          // Not watched for reading or writing: only a hang-up or an error wakes it. The answer
          // being prepared is dropped when it arrives.
          if (events[i].events & (EPOLLHUP | EPOLLERR)) Close(fd);
        } else if (c.state == Conn::kReading) {
          Read(fd, c);
        } else if (c.state == Conn::kWriting) {
          Write(fd, c);
        }
      }
    }
    Expire();
    if (open_gauge != nullptr) open_gauge->Set(static_cast<double>(conns.size()));
  }
}

void HttpServer::Impl::Work() {
  for (;;) {
    Job job;
    {
      MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](Impl* self)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->quit || !self->queue.empty(); },
          this));
      if (quit) return;
      job = std::move(queue.front());
      queue.pop_front();
      SetGauges(queue.size());
    }
    HttpResponse res;
    (*job.handler)(job.request, res);
    std::string bytes = SerializeResponse(res, job.head);
    {
      MutexLock lock(&mu);
      done.push_back(Done{job.fd, job.id, std::move(bytes)});
    }
    const uint64_t one = 1;
    ssize_t w = write(wake_fd, &one, sizeof(one));
    (void)w;
  }
}

HttpServer::HttpServer(HttpServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Get(std::string path, HttpHandler handler) {
  impl_->gets[std::move(path)] = std::move(handler);
}

void HttpServer::Probe(std::string path, HttpHandler handler) {
  impl_->probes[std::move(path)] = std::move(handler);
}

absl::StatusOr<int> HttpServer::Start(const std::string& host, int port) {
  Impl& m = *impl_;
  auto fail = [&](const std::string& why) {
    if (m.listen_fd >= 0) close(m.listen_fd);
    m.listen_fd = -1;
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s:%d for HTTP: %s", host, port, why));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return fail("the address does not resolve");
  }
  m.listen_fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  // SO_REUSEADDR only: with SO_REUSEPORT a second daemon would bind the same port and take half
  // of the connections. A port in use must be an error.
  int yes = 1;
  setsockopt(m.listen_fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  const bool bound = m.listen_fd >= 0 && bind(m.listen_fd, found->ai_addr, found->ai_addrlen) == 0;
  const int bind_errno = errno;
  freeaddrinfo(found);
  if (!bound) {
    return fail(bind_errno == EADDRINUSE ? "the port is in use (another instance running?)"
                                         : absl::StrCat("the address is not local or not allowed (",
                                                        std::strerror(bind_errno), ")"));
  }
  if (listen(m.listen_fd, 128) != 0) return fail(std::strerror(errno));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int bound_port =
      ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  m.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  m.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  for (int fd : {m.listen_fd, m.wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  for (int i = 0; i < std::max(1, m.options.workers); ++i) {
    m.workers.emplace_back([&m] { m.Work(); });
  }
  m.io = std::thread([&m] { m.Loop(); });
  return bound_port;
}

void HttpServer::Stop() {
  Impl& m = *impl_;
  if (!m.io.joinable()) return;
  m.stopping.store(true);
  const uint64_t one = 1;
  ssize_t w = write(m.wake_fd, &one, sizeof(one));
  (void)w;
  m.io.join();
  {
    MutexLock lock(&m.mu);
    m.quit = true;
  }
  for (auto& t : m.workers) t.join();
  m.workers.clear();
  std::vector<int> open;
  for (const auto& [fd, c] : m.conns) open.push_back(fd);
  for (int fd : open) m.Close(fd);
  for (int* fd : {&m.listen_fd, &m.epoll_fd, &m.wake_fd}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace ncclwatch
