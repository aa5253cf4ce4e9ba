// The daemons' HTTP server (/metrics, /federate, /healthz, /readyz): GET only, bounded in every
// dimension a client controls, so that no client can take the endpoint (or the probes) down.
//
//   HttpServer http;                      // HttpServerOptions: limits, metrics
//   http.Get("/metrics", [&](const HttpRequest&, HttpResponse& res) { res.Set(text, kType); });
//   http.Probe("/healthz", ...);          // answered on the I/O thread, never queued
//   absl::StatusOr<int> port = http.Start("0.0.0.0", 9471);   // 0 = any free port
//
// One I/O thread multiplexes every connection (epoll): it reads request heads, refuses what is
// not a small GET, answers probes itself and hands other requests to a few worker threads, then
// writes the responses. What a client controls is bounded:
//   - the request head must arrive whole within `header_timeout` (a slowloris gets 408 and is
//     closed) and fit in `max_header_bytes` (431);
//   - a request with a body (Content-Length > 0 or Transfer-Encoding) gets 413 without a byte of
//     the body being read; a method other than GET or HEAD gets 405;
//   - at most `max_connections` are open: a new one evicts the oldest that is still sending its
//     head, so idle or trickling connections cannot lock out the rest;
//   - at most `max_queued` requests wait for a worker (503 beyond);
//   - a response must be taken by the client within `write_timeout`.
// Every refusal is counted in <metric_prefix>_http_refused_total{reason}. Each response closes
// its connection (Connection: close). Routes match the path exactly; the query string is decoded
// as Go's url.ParseQuery does (Prometheus' own), so unencoded selectors work too.
#ifndef NCCLWATCH_COMMON_HTTP_SERVER_H_
#define NCCLWATCH_COMMON_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ncclwatch {

class MetricRegistry;

struct HttpRequest {
  std::string method;  // "GET" or "HEAD"
  std::string path;    // percent-decoded, without the query string
  std::vector<std::pair<std::string, std::string>> params;   // decoded, in order
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased

  size_t ParamCount(std::string_view name) const;
  // The i-th value of `name`; "" when absent.
  std::string Param(std::string_view name, size_t i = 0) const;
  // The first value of header `name` (any case); "" when absent.
  std::string Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  void Set(std::string text, std::string type) {
    body = std::move(text);
    content_type = std::move(type);
  }
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

struct HttpServerOptions {
  int max_connections = 256;
  size_t max_header_bytes = 16 << 10;
  absl::Duration header_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(30);
  int workers = 2;
  size_t max_queued = 64;
  // With a registry, refusals and evictions are counted as <metric_prefix>_http_refused_total.
  MetricRegistry* metrics = nullptr;
  std::string metric_prefix = "ncclwatch";
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Register before Start(). Get: run on a worker thread. Probe: run on the I/O thread, so it
  // answers even when every worker is busy; keep it trivial (no locks held for long, no I/O).
  void Get(std::string path, HttpHandler handler);
  void Probe(std::string path, HttpHandler handler);

  // Binds (SO_REUSEADDR only: a port in use is an error, never shared) and starts serving.
  // Returns the bound port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

  // Decodes a query string as Go's url.ParseQuery does ('+' is a space, %XX a byte, pairs split
  // on '&'); a malformed escape is kept as it is.
  static std::vector<std::pair<std::string, std::string>> ParseQuery(std::string_view query);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_HTTP_SERVER_H_
