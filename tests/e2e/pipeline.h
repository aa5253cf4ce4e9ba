// Test fixture pieces for end-to-end runs: a real aggregator (RocksDB in a temp dir, gRPC and
// HTTP on free ports), real agents on per-node unix sockets, and simjob driving the real plugin.
#ifndef NCCLWATCH_TESTS_E2E_PIPELINE_H_
#define NCCLWATCH_TESTS_E2E_PIPELINE_H_

#include <signal.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/sync.h"
#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/query.grpc.pb.h"
#include "tests/e2e/process.h"

namespace ncclwatch::testing {

// Paths of the built binaries, injected by CMake.
struct Binaries {
  static std::string Aggregator();
  static std::string CrashableAggregator();
  static std::string Agent();
  static std::string Cli();
  static std::string Simjob();
  static std::string Plugin();
};

class Pipeline {
 public:
  // Starts the aggregator and `nodes` agents (node names sim-node-<i>). Check ok() afterwards.
  // In `extra_agent_flags`, "{node}" becomes the agent's index.
  // With `crashable_aggregator`, the aggregator is the test build whose store journals its syncs
  // (tests/crashfs), so that PowerCutAggregator() can be used.
  explicit Pipeline(int nodes, std::vector<std::string> extra_aggregator_flags = {},
                    std::vector<std::string> extra_agent_flags = {},
                    bool crashable_aggregator = false);
  ~Pipeline();

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }
  std::string AgentAddrTemplate() const { return "unix://" + dir_ + "/agent-{node}.sock"; }
  std::string AggregatorAddr() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  int http_port() const { return http_port_; }
  int agent_http_port(int node) const;
  int aggregator_pid() const { return aggregator_ ? aggregator_->pid() : -1; }
  int agent_pid(int node) const { return agents_[node]->pid(); }
  ncclwatch::v1::Query::Stub& query() { return *query_; }

  // SIGTERMs every agent (they forward what they hold, then exit) and checks they exited 0.
  bool StopAgents();
  // Stops the aggregator and starts a new one on the same RocksDB directory and ports. SIGTERM: it
  // runs a last detection pass and must exit 0; SIGKILL: a crash, at whatever it was doing.
  bool RestartAggregator(int signal = SIGTERM);
  // The aggregator's node loses power: SIGKILL, then everything its store had not synced is lost
  // (files cut back to their last sync, files created without a directory sync removed); then it
  // starts again. Needs `crashable_aggregator`. `dropped` (optional) gets the bytes lost.
  bool PowerCutAggregator(uint64_t* dropped = nullptr);
  // The aggregator's extra flags from its next (re)start on.
  void set_aggregator_flags(std::vector<std::string> flags) {
    extra_aggregator_flags_ = std::move(flags);
  }
  // Stops the aggregator for good (SIGTERM, exit 0 expected), e.g. to open its store directly.
  bool StopAggregator();
  // Starts the aggregator again after StopAggregator (same ports and data).
  bool StartAggregatorAgain() { return StartAggregator(); }
  // Sends `signal` to agent `node`, waits for it, runs `while_down` (if any: e.g. damage its
  // spool), and starts it again with the same flags.
  bool RestartAgent(int node, int signal, const std::function<void()>& while_down = {});
  // With a crashable aggregator: its store's disk is full (log writes fail with ENOSPC, the free
  // space reads as none) from now until it is set back.
  void SetAggregatorDiskFull(bool full);
  // HTTP GET on the aggregator; returns (status, body).
  std::pair<int, std::string> Get(const std::string& path_and_query) const;
  // HTTP GET on agent `node`'s /metrics or /healthz port.
  std::pair<int, std::string> AgentGet(int node, const std::string& path) const;
  // Everything the daemons logged, for failure messages.
  std::string Logs() const;

 private:
  // Starts the aggregator on grpc_port_/http_port_ (0: any free port).
  bool StartAggregator();
  // Starts agent `node` (appending to its log).
  std::unique_ptr<Process> StartAgent(int node);

  std::string dir_;
  std::vector<std::string> extra_aggregator_flags_;
  std::vector<std::string> extra_agent_flags_;
  std::vector<int> agent_starts_;
  int aggregator_starts_ = 0;
  bool crashable_ = false;
  bool ok_ = false;
  std::string error_;
  int grpc_port_ = -1;
  int http_port_ = -1;
  std::unique_ptr<Process> aggregator_;
  std::vector<std::unique_ptr<Process>> agents_;
  std::unique_ptr<ncclwatch::v1::Query::Stub> query_;
};

// Collects every event of a Watch stream in the background, with the time each arrived.
class EventRecorder {
 public:
  struct Received {
    ncclwatch::v1::Event event;
    int64_t received_unix_ns;
  };
  // Returns once the subscription is live on the server.
  explicit EventRecorder(ncclwatch::v1::Query::Stub& query);
  ~EventRecorder();
  std::vector<Received> Stop();  // cancels the stream, returns what arrived
  // Blocks until an event for which `match` is true has arrived (true), or `timeout_s` passed
  // (false). Event-driven: wakes on each arrival.
  bool WaitFor(const std::function<bool(const ncclwatch::v1::Event&)>& match, double timeout_s);

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<ncclwatch::v1::Event>> reader_;
  std::thread thread_;
  ncclwatch::Mutex mu_;
  std::vector<Received> events_ ABSL_GUARDED_BY(mu_);
};

// A temporary directory under /tmp, removed with its contents when the object goes away (kept
// with NCCLWATCH_KEEP_TEST_DIRS set).
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix);
  ~ScopedTempDir();
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Checks `condition` every `interval_ms` until it holds or `timeout_s` passed; returns whether it
// held. Only for state another process exposes without a way to wait on it (a directory it
// writes, its HTTP counters, its output, a server that has no readiness pipe).
bool PollUntil(const std::function<bool()>& condition, double timeout_s, int interval_ms = 100);

// Runs a program to completion; returns (exit code, stdout+stderr).
std::pair<int, std::string> RunToCompletion(const std::vector<std::string>& argv,
                                            const std::string& log_path);

}  // namespace ncclwatch::testing

#endif  // NCCLWATCH_TESTS_E2E_PIPELINE_H_
