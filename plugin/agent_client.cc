#include "plugin/agent_client.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

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
  std::lock_guard<std::mutex> lock(mu_);
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
  cv_.notify_all();
}

bool AgentClient::Drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  close_requested_ = true;
  cv_.notify_all();
  // Done when everything was written and the stream closed gracefully (the agent has read it
  // all), or when there is no agent to deliver to right now.
  cv_.wait_for(lock, timeout,
               [this] { return exited_ || (!connected_ && (queue_.empty() || connect_failed_)); });
  close_requested_ = false;
  return queue_.empty() && !connected_;
}

void AgentClient::Stop(std::chrono::milliseconds timeout) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    cv_.notify_all();
    // Give the thread `timeout` to hand over the queue and close the stream; then cut it off.
    if (!cv_.wait_for(lock, timeout, [this] { return exited_; })) {
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
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  active_context_ = nullptr;
  connected_ = false;
  stream_.reset();
  cv_.notify_all();
}

void AgentClient::Run() {
  Backoff backoff(std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [this] { return stop_ || !queue_.empty() || (close_requested_ && connected_); });
      if (queue_.empty()) {
        if (stop_) break;
        // Drain() asked for a graceful close: the next Submit reopens the stream.
        lock.unlock();
        CloseStream(true);
        continue;
      }
    }
    if (!stream_ && !Connect()) {
      NoteConnected(false);
      std::unique_lock<std::mutex> lock(mu_);
      connected_ = false;
      connect_failed_ = true;
      cv_.notify_all();
      if (stop_) break;  // no agent: do not hold up shutdown
      cv_.wait_for(lock, backoff.NextDelay(), [this] { return stop_; });
      continue;
    }
    backoff.Reset();
    NoteConnected(true);
    const ncclwatch::v1::RankReport* front;
    {
      std::lock_guard<std::mutex> lock(mu_);
      front = &queue_.front();
      writing_ = true;
    }
    // Only this thread pops the queue, and Submit never erases the front while writing_.
    bool ok = stream_->writer->Write(*front);
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (ok) queue_.pop_front();
      cv_.notify_all();
    }
    if (!ok) CloseStream(false);
  }
  CloseStream(true);
  std::lock_guard<std::mutex> lock(mu_);
  exited_ = true;
  cv_.notify_all();
}

}  // namespace ncclwatch::plugin
