// The HTTP server against the clients that used to take the daemons' endpoints down: idle and
// trickling connections, huge bodies, oversized heads, a flood of slow requests. Real sockets.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "common/sync.h"
#include "gtest/gtest.h"

namespace ncclwatch {
namespace {

// A client socket connected to 127.0.0.1:port whose reads give up after `timeout_ms`.
int Connect(int port, int timeout_ms = 5000) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Everything the server sends until it closes (or the read timeout passes).
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Sends `request` on a new connection and returns the whole response ("" if none came within
// `timeout_ms`).
std::string Exchange(int port, const std::string& request, int timeout_ms = 5000) {
  const int fd = Connect(port, timeout_ms);
  if (fd < 0) return "";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out = ReadAll(fd);
  close(fd);
  return out;
}

std::string Get(int port, const std::string& target, int timeout_ms = 5000) {
  return Exchange(port, "GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n", timeout_ms);
}

int Status(const std::string& response) {
  return response.size() >= 12 ? std::stoi(response.substr(9, 3)) : -1;
}

std::string Body(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions options = {}) {
    options.metrics = &metrics_;
    options.metric_prefix = "t";
    server_ = std::make_unique<HttpServer>(options);
    server_->Probe("/healthz", [](const HttpRequest&, HttpResponse& res) { res.Set("ok", "x"); });
    server_->Get("/echo", [](const HttpRequest& req, HttpResponse& res) {
      std::string out = req.method + " " + req.path;
      for (const auto& [k, v] : req.params) out += "|" + k + "=" + v;
      out += "|auth=" + req.Header("AUTHORIZATION");
      res.Set(out, "text/plain");
    });
    server_->Get("/slow", [this](const HttpRequest&, HttpResponse& res) {
      MutexLock lock(&mu_);
      ++slow_started_;
      mu_.Await(absl::Condition(&release_));
      res.Set("slow", "text/plain");
    });
    auto port = server_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
  }
  void TearDown() override {
    {
      MutexLock lock(&mu_);
      release_ = true;
    }
    if (server_) server_->Stop();
  }
  double Refused(const std::string& reason) {
    const std::string text = metrics_.Render();
    const std::string key = "t_http_refused_total{reason=\"" + reason + "\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
  }

  MetricRegistry metrics_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  Mutex mu_;
  bool release_ ABSL_GUARDED_BY(mu_) = false;
  int slow_started_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(HttpServerTest, DecodesPathQueryAndHeadersAsPrometheusClientsSendThem) {
  Start();
  // Encoded, and unencoded as `curl -g` sends it: both are the same selector.
  std::string res =
      Get(port_, "/echo?match%5B%5D=%7Brank%3D%223%22%7D&match[]={job=\"a+b\"}&x=1%2B2");
  EXPECT_EQ(Status(res), 200) << res;
  EXPECT_EQ(Body(res), "GET /echo|match[]={rank=\"3\"}|match[]={job=\"a b\"}|x=1+2|auth=");
  res = Exchange(port_, "GET /echo HTTP/1.1\r\nauthorization:  Bearer t \r\n\r\n");
  EXPECT_EQ(Body(res), "GET /echo|auth=Bearer t");
  EXPECT_EQ(Status(Get(port_, "/nowhere")), 404);
  EXPECT_EQ(Status(Exchange(port_, "HEAD /healthz HTTP/1.1\r\n\r\n")), 200);
  EXPECT_EQ(Body(Exchange(port_, "HEAD /healthz HTTP/1.1\r\n\r\n")), "");
  EXPECT_EQ(Status(Exchange(port_, "garbage\r\n\r\n")), 400);
}

TEST_F(HttpServerTest, ProbesAnswerWith64IdleConnectionsOpen) {
  Start();
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) idle.push_back(Connect(port_));
  // The client gives up after 1 s: the answer must come sooner.
  EXPECT_EQ(Status(Get(port_, "/healthz", 1000)), 200);
  EXPECT_EQ(Status(Get(port_, "/echo", 1000)), 200);
  for (int fd : idle) close(fd);
}

TEST_F(HttpServerTest, ABodyIsRefusedWithoutBeingRead) {
  Start();
  // 64 MiB announced, not a byte of it sent: the 413 comes at once, nobody waits for the body.
  const std::string res = Exchange(port_, "POST /echo HTTP/1.1\r\nContent-Length: 67108864\r\n\r\n",
                                   /*timeout_ms=*/2000);
  EXPECT_EQ(Status(res), 413) << res;
  EXPECT_EQ(Status(Exchange(port_, "GET /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")),
            413);
  EXPECT_EQ(Status(Exchange(port_, "DELETE /echo HTTP/1.1\r\n\r\n")), 405);
  EXPECT_EQ(Refused("body"), 2);
  EXPECT_EQ(Refused("method"), 1);
}

TEST_F(HttpServerTest, AHeadThatTricklesOrOverflowsIsCutOff) {
  HttpServerOptions options;
  options.header_timeout = absl::Milliseconds(300);
  options.max_header_bytes = 1024;
  Start(options);
  const int slow = Connect(port_);
  send(slow, "GET /echo HTTP/1.1\r\nX-Slow: ", 28, MSG_NOSIGNAL);
  EXPECT_EQ(Status(ReadAll(slow)), 408);  // the server closes it at the deadline
  close(slow);
  EXPECT_EQ(
      Status(Exchange(port_, "GET /echo HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n")),
      431);
  EXPECT_EQ(Refused("header_timeout"), 1);
  EXPECT_EQ(Refused("header_too_large"), 1);
}

TEST_F(HttpServerTest, NewConnectionsEvictTheOldestIdleOnesAtTheCap) {
  HttpServerOptions options;
  options.max_connections = 4;
  Start(options);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(Connect(port_));
  EXPECT_EQ(Status(Get(port_, "/echo")), 200);
  EXPECT_EQ(ReadAll(idle[0]), "") << "the oldest idle connection was closed";
  EXPECT_GE(Refused("evicted"), 1);
  for (int fd : idle) close(fd);
}

TEST_F(HttpServerTest, BusyWorkersLeaveProbesAnsweredAndExcessRequestsRefused) {
  HttpServerOptions options;
  options.workers = 1;
  options.max_queued = 1;
  Start(options);
  // One /slow occupies the only worker, one waits in the queue.
  const int first = Connect(port_);
  send(first, "GET /slow HTTP/1.1\r\n\r\n", 22, MSG_NOSIGNAL);
  {
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n >= 1; }, &slow_started_));
  }
  const int second = Connect(port_);
  send(second, "GET /slow HTTP/1.1\r\n\r\n", 22, MSG_NOSIGNAL);
  // Once the second waits in the queue (its gauge says so), the queue is full: the next request
  // is refused at once.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (metrics_.Render().find("t_http_queued_requests 1\n") == std::string::npos &&
         absl::Now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_EQ(Status(Get(port_, "/echo", 2000)), 503);
  EXPECT_EQ(Status(Get(port_, "/healthz", 1000)), 200);
  {
    MutexLock lock(&mu_);
    release_ = true;
  }
  EXPECT_EQ(Body(ReadAll(first)), "slow");
  EXPECT_EQ(Body(ReadAll(second)), "slow");
  close(first);
  close(second);
}

TEST_F(HttpServerTest, APortInUseIsAnErrorNotShared) {
  Start();
  HttpServer second;
  auto port = second.Start("127.0.0.1", port_);
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().message(), "cannot listen on 127.0.0.1:" + std::to_string(port_) +
                                         " for HTTP: the port is in use (another instance "
                                         "running?)");
}

}  // namespace
}  // namespace ncclwatch
