#include "tests/e2e/pipeline.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "common/sync.h"
#include "httplib.h"
#include "tests/crashfs/journaling_fs.h"

namespace ncclwatch::testing {

std::string Binaries::Aggregator() { return NCCLWATCH_AGGREGATOR_BIN; }
std::string Binaries::CrashableAggregator() { return NCCLWATCH_CRASHABLE_AGGREGATOR_BIN; }
std::string Binaries::Agent() { return NCCLWATCH_AGENT_BIN; }
std::string Binaries::Cli() { return NCCLWATCH_CLI_BIN; }
std::string Binaries::Simjob() { return NCCLWATCH_SIMJOB_BIN; }
std::string Binaries::Plugin() { return NCCLWATCH_PLUGIN_SO; }

Pipeline::Pipeline(int nodes, std::vector<std::string> extra_aggregator_flags,
                   std::vector<std::string> extra_agent_flags, bool crashable_aggregator)
    : extra_aggregator_flags_(std::move(extra_aggregator_flags)),
      extra_agent_flags_(std::move(extra_agent_flags)),
      agent_starts_(nodes, 0),
      crashable_(crashable_aggregator) {
  char tmpl[] = "/tmp/ncclwatch-e2e-XXXXXX";
  dir_ = mkdtemp(tmpl);
  if (!StartAggregator()) return;
  for (int n = 0; n < nodes; ++n) {
    auto agent = StartAgent(n);
    if (agent == nullptr) return;
    agents_.push_back(std::move(agent));
  }
  ok_ = true;
}

std::unique_ptr<Process> Pipeline::StartAgent(int n) {
  const std::string name = "sim-node-" + std::to_string(n);
  std::vector<std::string> argv = {
      Binaries::Agent(),
      "--listen=unix://" + dir_ + "/agent-" + std::to_string(n) + ".sock",
      "--aggregator=" + AggregatorAddr(),
      "--http-port=0",
      "--node-name=" + name,
      "--batch-interval-ms=100"};
  for (const std::string& flag : extra_agent_flags_) {
    std::string f = flag;
    for (size_t at = f.find("{node}"); at != std::string::npos; at = f.find("{node}")) {
      f.replace(at, 6, std::to_string(n));
    }
    argv.push_back(f);
  }
  const std::string log =
      dir_ + "/" + name + (agent_starts_[n]++ == 0 ? "" : "-restarted") + ".log";
  auto agent =
      std::make_unique<Process>(argv, std::map<std::string, std::string>{}, log, "--ready-fd");
  if (agent->ReadyValue("http_port") <= 0) {
    error_ = name + " did not become ready:\n" + agent->Log();
    return nullptr;
  }
  return agent;
}

bool Pipeline::RestartAgent(int node, int signal, const std::function<void()>& while_down) {
  agents_[node]->Signal(signal);
  agents_[node]->Wait();
  if (while_down) while_down();
  auto agent = StartAgent(node);
  if (agent == nullptr) return false;
  agents_[node] = std::move(agent);
  return true;
}

bool Pipeline::StartAggregator() {
  std::vector<std::string> argv = {
      crashable_ ? Binaries::CrashableAggregator() : Binaries::Aggregator(),
      "--listen-host=127.0.0.1", "--grpc-port=" + std::to_string(std::max(grpc_port_, 0)),
      "--http-port=" + std::to_string(std::max(http_port_, 0)), "--data-dir=" + dir_ + "/db"};
  argv.insert(argv.end(), extra_aggregator_flags_.begin(), extra_aggregator_flags_.end());
  const std::string log =
      dir_ + "/aggregator" + (aggregator_starts_++ == 0 ? "" : "-restarted") + ".log";
  std::map<std::string, std::string> env;
  if (crashable_) {
    env["NCCLWATCH_CRASH_JOURNAL"] = dir_ + "/db.journal";
    env["NCCLWATCH_FULL_DISK_FLAG"] = dir_ + "/db.disk-full";
  }
  aggregator_ = std::make_unique<Process>(argv, env, log, "--ready-fd");
  grpc_port_ = aggregator_->ReadyValue("grpc_port");
  http_port_ = aggregator_->ReadyValue("http_port");
  if (grpc_port_ <= 0 || http_port_ <= 0) {
    error_ = "aggregator did not become ready:\n" + aggregator_->Log();
    return false;
  }
  // A channel of its own: after a restart, a channel sharing the global subchannel pool could pick
  // up the killed aggregator's dead connection for its first call.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  query_ = ncclwatch::v1::Query::NewStub(
      grpc::CreateCustomChannel(AggregatorAddr(), grpc::InsecureChannelCredentials(), args));
  return true;
}

bool Pipeline::StopAggregator() {
  aggregator_->Signal(SIGTERM);
  if (aggregator_->Wait() != 0) {
    error_ = "aggregator exited with an error:\n" + aggregator_->Log();
    return false;
  }
  return true;
}

bool Pipeline::RestartAggregator(int signal) {
  if (signal == SIGTERM) {
    if (!StopAggregator()) return false;
  } else {
    aggregator_->Signal(signal);
    aggregator_->Wait();
  }
  return StartAggregator();
}

bool Pipeline::PowerCutAggregator(uint64_t* dropped) {
  if (!crashable_) {
    error_ = "PowerCutAggregator needs a crashable aggregator";
    return false;
  }
  aggregator_->Signal(SIGKILL);
  aggregator_->Wait();
  absl::StatusOr<PowerCut> cut = ApplyPowerCut(dir_ + "/db.journal");
  if (!cut.ok()) {
    error_ = std::string(cut.status().message());
    return false;
  }
  if (dropped != nullptr) *dropped = cut->bytes_dropped;
  return StartAggregator();
}

void Pipeline::SetAggregatorDiskFull(bool full) {
  const std::string flag = dir_ + "/db.disk-full";
  if (full) {
    std::ofstream(flag).put('1');
  } else {
    std::remove(flag.c_str());
  }
}

Pipeline::~Pipeline() {
  for (auto& a : agents_) a->Signal(SIGTERM);
  agents_.clear();
  if (aggregator_) {
    aggregator_->Signal(SIGTERM);
    aggregator_->Wait();
  }
  if (!getenv("NCCLWATCH_KEEP_TEST_DIRS")) std::filesystem::remove_all(dir_);
}

bool Pipeline::StopAgents() {
  bool ok = true;
  for (auto& a : agents_) a->Signal(SIGTERM);
  for (auto& a : agents_) ok = a->Wait() == 0 && ok;
  return ok;
}

int Pipeline::agent_http_port(int node) const { return agents_[node]->ReadyValue("http_port"); }

std::pair<int, std::string> Pipeline::AgentGet(int node, const std::string& path) const {
  httplib::Client client("127.0.0.1", agent_http_port(node));
  auto res = client.Get(path.c_str());
  if (!res) return {-1, "request failed"};
  return {res->status, res->body};
}

std::pair<int, std::string> Pipeline::Get(const std::string& path) const {
  httplib::Client client("127.0.0.1", http_port_);
  auto res = client.Get(path.c_str());
  if (!res) return {-1, "request failed"};
  return {res->status, res->body};
}

std::string Pipeline::Logs() const {
  std::string out = "--- aggregator (latest run) ---\n" + (aggregator_ ? aggregator_->Log() : "");
  for (size_t i = 0; i < agents_.size(); ++i) {
    out += "--- agent " + std::to_string(i) + " ---\n" + agents_[i]->Log();
  }
  return out;
}

EventRecorder::EventRecorder(ncclwatch::v1::Query::Stub& query) {
  reader_ = query.Watch(&context_, ncclwatch::v1::WatchRequest());
  reader_->WaitForInitialMetadata();  // the server sends it once the watcher is registered
  thread_ = std::thread([this] {
    ncclwatch::v1::Event e;
    while (reader_->Read(&e)) {
      ncclwatch::MutexLock lock(&mu_);
      events_.push_back({e, absl::GetCurrentTimeNanos()});
    }
  });
}

EventRecorder::~EventRecorder() { Stop(); }

std::vector<EventRecorder::Received> EventRecorder::Stop() {
  if (thread_.joinable()) {
    context_.TryCancel();
    thread_.join();
    reader_->Finish();
  }
  ncclwatch::MutexLock lock(&mu_);
  return events_;
}

bool EventRecorder::WaitFor(const std::function<bool(const ncclwatch::v1::Event&)>& match,
                            double timeout_s) {
  ncclwatch::MutexLock lock(&mu_);
  auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::any_of(events_.begin(), events_.end(),
                       [&](const Received& r) { return match(r.event); });
  };
  return mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(timeout_s));
}

ScopedTempDir::ScopedTempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  path_ = mkdtemp(tmpl.data());
}

ScopedTempDir::~ScopedTempDir() {
  if (!getenv("NCCLWATCH_KEEP_TEST_DIRS")) std::filesystem::remove_all(path_);
}

bool PollUntil(const std::function<bool()>& condition, double timeout_s, int interval_ms) {
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(interval_ms));
  }
  return true;
}

std::pair<int, std::string> RunToCompletion(const std::vector<std::string>& argv,
                                            const std::string& log_path) {
  Process p(argv, {}, log_path);
  int code = p.Wait();
  return {code, p.Log()};
}

}  // namespace ncclwatch::testing
