#include "plugin/agent_client.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "absl/time/time.h"
#include "common/rpc/backoff.h"
#include "common/rpc/channel.h"
#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/report.grpc.pb.h"

namespace ncclwatch::plugin {

struct AgentClient::Stream {
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  std::unique_ptr<grpc::ClientWriter<ncclwatch::v1::RankReport>> writer;
};

AgentClient::AgentClient(std::string address, size_t max_queued, StatusLog log)
    : address_(std::move(address)), max_queued_(max_queued), log_(std::move(log)) {
  channel_ = ReconnectingChannel(address_, 1000);
  thread_ = std::thread([this] { Run(); });
}

AgentClient::~AgentClient() { Stop(std::chrono::milliseconds(1000)); }

void AgentClient::Submit(ncclwatch::v1::RankReport report) {
  ncclwatch::MutexLock lock(&mu_);
  if (stop_) {
    dropped_.fetch_add(1);
    return;
  }
  // The report being written stays at the front; drop the oldest one behind it.
  size_t protected_front = writing_ ? 1 : 0;
  while (queue_.size() >= max_queued_ && queue_.size() > protected_front) {
    queue_.erase(queue_.begin() + protected_front);
    dropped_.fetch_add(1);
  }
  queue_.push_back(std::move(report));
}

bool AgentClient::Drain(std::chrono::milliseconds timeout) {
  ncclwatch::MutexLock lock(&mu_);
  close_requested_ = true;
  // Done when everything was written and the stream closed gracefully (the agent has read it
  // all), or when there is no agent to deliver to right now.
  auto delivered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return exited_ || (!connected_ && (queue_.empty() || connect_failed_));
  };
  mu_.AwaitWithTimeout(absl::Condition(&delivered), absl::FromChrono(timeout));
  close_requested_ = false;
  return queue_.empty() && !connected_;
}

void AgentClient::Stop(std::chrono::milliseconds timeout) {
  {
    ncclwatch::MutexLock lock(&mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    // Give the thread `timeout` to hand over the queue and close the stream; then cut it off.
    if (!mu_.AwaitWithTimeout(absl::Condition(&exited_), absl::FromChrono(timeout))) {
      if (active_context_ != nullptr) active_context_->TryCancel();
      // The report being written (if any) is still referenced by the sender thread.
      size_t dropped = queue_.size() - (writing_ ? 1 : 0);
      queue_.erase(queue_.begin() + (writing_ ? 1 : 0), queue_.end());
      dropped_.fetch_add(dropped);
    }
  }
  thread_.join();
}

std::string AgentClient::DiagnoseAddress(const std::string& address) {
  if (address.rfind("unix:", 0) != 0) {
    if (address.find(':') == std::string::npos) {
      return "not a gRPC address (write unix:///path/to/agent.sock or host:port)";
    }
    return "no connection within 200 ms (is the agent listening on this host and port?)";
  }
  std::string path = address.substr(5);
  if (path.rfind("//", 0) == 0) path = path.substr(2);
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return path + ": " + std::strerror(errno) + " (is the node agent running on this node?)";
  }
  if (!S_ISSOCK(st.st_mode)) return path + " is not a socket";
  sockaddr_un sun{};
  if (path.size() >= sizeof(sun.sun_path)) return path + ": socket path too long";
  sun.sun_family = AF_UNIX;
  std::memcpy(sun.sun_path, path.c_str(), path.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket(): ") + std::strerror(errno);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun));
  int err = errno;
  close(fd);
  if (rc != 0) return path + ": " + std::strerror(err);
  return path + " accepts connections but no gRPC stream opened within 200 ms";
}

void AgentClient::NoteConnected(bool connected) {
  if (connected) {
    if (in_outage_ && log_) {
      log_(abi::kLogInfo, "ncclwatch: reached the node agent at " + address_ + " again after " +
                              std::to_string(failed_attempts_) + " failed attempts");
    }
    in_outage_ = false;
    failed_attempts_ = 0;
    return;
  }
  ++failed_attempts_;
  if (in_outage_) {
    if (log_) {
      log_(abi::kLogTrace, "ncclwatch: node agent at " + address_ + " still unreachable (attempt " +
                               std::to_string(failed_attempts_) + ")");
    }
    return;
  }
  in_outage_ = true;
  const bool first = outages_.fetch_add(1) == 0;
  if (log_) {
    log_(first ? abi::kLogWarn : abi::kLogInfo,
         "ncclwatch: cannot reach the node agent at " + address_ + ": " +
             DiagnoseAddress(address_) + "; reports are kept (up to " +
             std::to_string(max_queued_) + ") and sent when it is back");
  }
}

bool AgentClient::Connect() {
  // Bounded wait so that Stop() is noticed; the channel keeps reconnecting in the background.
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() +
                                  std::chrono::milliseconds(200))) {
    return false;
  }
  auto stream = std::make_unique<Stream>();
  auto stub = ncclwatch::v1::Agent::NewStub(channel_);
  stream->writer = stub->StreamReports(&stream->context, &stream->summary);
  if (!stream->writer) return false;
  ncclwatch::MutexLock lock(&mu_);
  active_context_ = &stream->context;
  stream_ = std::move(stream);
  connected_ = true;
  connect_failed_ = false;
  return true;
}

void AgentClient::CloseStream(bool graceful) {
  if (!stream_) return;
  if (graceful) stream_->writer->WritesDone();
  stream_->writer->Finish();
  ncclwatch::MutexLock lock(&mu_);
  active_context_ = nullptr;
  connected_ = false;
  stream_.reset();
}

void AgentClient::Run() {
  Backoff backoff(std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
  for (;;) {
    bool stopping = false;
    bool nothing_to_send = false;
    {
      ncclwatch::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty() || (close_requested_ && connected_);
      };
      mu_.Await(absl::Condition(&work));
      nothing_to_send = queue_.empty();
      stopping = stop_;
    }
    if (nothing_to_send) {
      if (stopping) break;
      // Drain() asked for a graceful close: the next Submit reopens the stream.
      CloseStream(true);
      continue;
    }
    if (!stream_ && !Connect()) {
      NoteConnected(false);
      ncclwatch::MutexLock lock(&mu_);
      connected_ = false;
      connect_failed_ = true;
      if (stop_) break;  // no agent: do not hold up shutdown
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::FromChrono(backoff.NextDelay()));
      continue;
    }
    backoff.Reset();
    NoteConnected(true);
    const ncclwatch::v1::RankReport* front;
    {
      ncclwatch::MutexLock lock(&mu_);
      front = &queue_.front();
      writing_ = true;
    }
    // Only this thread pops the queue, and Submit never erases the front while writing_.
    bool ok = stream_->writer->Write(*front);
    {
      ncclwatch::MutexLock lock(&mu_);
      writing_ = false;
      if (ok) queue_.pop_front();
    }
    if (!ok) CloseStream(false);
  }
  CloseStream(true);
  ncclwatch::MutexLock lock(&mu_);
  exited_ = true;
}

}  // namespace ncclwatch::plugin
