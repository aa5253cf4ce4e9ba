// A real Prometheus server for the end-to-end tests (Debian package `prometheus`, on loopback, in
// the test's directory), with its HTTP query API. Prometheus has no readiness pipe, so callers
// poll /-/ready and their query results against a deadline.
#ifndef NCCLWATCH_TESTS_E2E_PROMETHEUS_SERVER_H_
#define NCCLWATCH_TESTS_E2E_PROMETHEUS_SERVER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/e2e/process.h"

namespace ncclwatch::testing {

// A loopback port nobody listens on right now; -1 if none could be had.
int FreePort();

// One series of an instant query's answer.
struct Series {
  std::map<std::string, std::string> labels;
  double value = 0;
};

class Prometheus {
 public:
  // Starts Prometheus with `scrape_configs` (YAML after the global section, may be empty) and
  // its remote-write receiver, scraping every second.
  Prometheus(const std::string& dir, const std::string& scrape_configs);

  int port() const { return port_; }
  std::string Log() const { return process_->Log(); }

  // Polls /-/ready for up to 30 s.
  bool WaitReady();
  // Instant query through the HTTP API; empty on any error.
  std::vector<Series> Query(const std::string& expr);
  // Waits until the query returns exactly `n` series; returns them (empty on timeout).
  std::vector<Series> WaitFor(const std::string& expr, size_t n, double timeout_s = 30);
  // The active alerts (/api/v1/alerts) whose labels include all of `labels`: each alert's labels
  // and annotations in one map (annotations prefixed "annotation:").
  std::vector<std::map<std::string, std::string>> Alerts(
      const std::map<std::string, std::string>& labels);

 private:
  int port_;
  std::unique_ptr<Process> process_;
};

}  // namespace ncclwatch::testing

#endif  // NCCLWATCH_TESTS_E2E_PROMETHEUS_SERVER_H_
