// ReportSink that streams reports to the node agent over one gRPC client stream
// (ncclwatch.v1.Agent/StreamReports), from its own thread.
//
// - Submit() only appends to a bounded in-memory queue (oldest dropped and counted when full).
// - The sender thread connects lazily, reconnects with capped exponential backoff (100 ms .. 1 s,
//   so reports resume within ~1 s of the agent coming back), and re-sends the report whose write
//   failed. A dead or absent agent therefore only ever costs queue memory, never NCCL time.
// - Says so: the first time the agent cannot be reached, one warning names the address and the
//   reason (no such socket, connection refused, not a gRPC address, ...); later outages and every
//   recovery are one informational line each. outages() counts them for the reports.
#ifndef NCCLWATCH_PLUGIN_AGENT_CLIENT_H_
#define NCCLWATCH_PLUGIN_AGENT_CLIENT_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "common/sync.h"
#include "plugin/abi.h"
#include "plugin/report_sink.h"

namespace grpc {
class Channel;
class ClientContext;
template <class W>
class ClientWriter;
}  // namespace grpc

namespace ncclwatch::plugin {

class AgentClient : public ReportSink {
 public:
  // Receives the client's state changes, from its sender thread: kLogWarn for the first outage,
  // kLogInfo for later ones and for recoveries, kLogTrace for each failed attempt.
  using StatusLog = std::function<void(abi::LogLevel level, const std::string& message)>;

  AgentClient(std::string address, size_t max_queued, StatusLog log = nullptr);
  ~AgentClient() override;

  void Submit(ncclwatch::v1::RankReport report) override;
  bool Drain(std::chrono::milliseconds timeout) override;
  uint64_t dropped() const override { return dropped_.load(); }
  uint64_t outages() const override { return outages_.load(); }

  // Why `address` cannot be reached right now, in a few words (checks the socket file of a
  // unix:// address; names a malformed address). For the warning; exposed for tests.
  static std::string DiagnoseAddress(const std::string& address);

  // Ends the stream (handing over what is queued, for at most `timeout`) and joins the thread.
  void Stop(std::chrono::milliseconds timeout);

 private:
  struct Stream;
  void Run();
  bool Connect();
  void CloseStream(bool graceful);

  void NoteConnected(bool connected);  // sender thread: logs outages and recoveries

  const std::string address_;
  const size_t max_queued_;
  const StatusLog log_;
  bool in_outage_ = false;        // sender thread only
  uint64_t failed_attempts_ = 0;  // sender thread only: in the current outage
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stream> stream_;  // sender thread only, except TryCancel under mu_

  ncclwatch::Mutex mu_;  // waiters re-check their condition whenever it is released
  std::deque<ncclwatch::v1::RankReport> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;          // a queued report is being written
  bool connected_ ABSL_GUARDED_BY(mu_) = false;        // a stream is open
  bool connect_failed_ ABSL_GUARDED_BY(mu_) = false;   // the last connection attempt failed
  bool close_requested_ ABSL_GUARDED_BY(mu_) = false;  // Drain() waits for a graceful close
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_context_ ABSL_GUARDED_BY(mu_) = nullptr;

  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> outages_{0};
  std::thread thread_;
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_AGENT_CLIENT_H_
