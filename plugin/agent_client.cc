#include "plugin/agent_client.h"

#include <random>

#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/report.grpc.pb.h"

namespace ncclwatch::plugin {

struct AgentClient::Stream {
  grpc::ClientContext context;
  ncclwatch::v1::StreamSummary summary;
  std::unique_ptr<grpc::ClientWriter<ncclwatch::v1::RankReport>> writer;
};

AgentClient::AgentClient(std::string address, size_t max_queued)
    : address_(std::move(address)), max_queued_(max_queued) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
  thread_ = std::thread([this] { Run(); });
}

AgentClient::~AgentClient() { Stop(std::chrono::milliseconds(1000)); }

void AgentClient::Submit(ncclwatch::v1::RankReport report) {
  absl::MutexLock lock(&mu_);
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
  absl::MutexLock lock(&mu_);
  close_requested_ = true;
  // Done when everything was written and the stream closed gracefully (the agent has read it
  // all), or when there is no agent to deliver to right now.
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return exited_ || (!connected_ && (queue_.empty() || connect_failed_));
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), absl::FromChrono(timeout));
  close_requested_ = false;
  return queue_.empty() && !connected_;
}

void AgentClient::Stop(std::chrono::milliseconds timeout) {
  {
    absl::MutexLock lock(&mu_);
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
  absl::MutexLock lock(&mu_);
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
  absl::MutexLock lock(&mu_);
  active_context_ = nullptr;
  connected_ = false;
  stream_.reset();
}

void AgentClient::Run() {
  std::minstd_rand jitter(std::random_device{}());
  int backoff_ms = 100;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty() || (close_requested_ && connected_);
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) {
        if (stop_) break;
        // Drain() asked for a graceful close: the next Submit reopens the stream.
        mu_.Unlock();
        CloseStream(true);
        mu_.Lock();
        continue;
      }
    }
    if (!stream_ && !Connect()) {
      absl::MutexLock lock(&mu_);
      connected_ = false;
      connect_failed_ = true;
      if (stop_) break;  // no agent: do not hold up shutdown
      int wait = backoff_ms / 2 + static_cast<int>(jitter() % (backoff_ms / 2 + 1));
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(wait));
      backoff_ms = std::min(backoff_ms * 2, 1000);
      continue;
    }
    backoff_ms = 100;
    const ncclwatch::v1::RankReport* front;
    {
      absl::MutexLock lock(&mu_);
      front = &queue_.front();
      writing_ = true;
    }
    // Only this thread pops the queue, and Submit never erases the front while writing_.
    bool ok = stream_->writer->Write(*front);
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (ok) queue_.pop_front();
    }
    if (!ok) CloseStream(false);
  }
  CloseStream(true);
  absl::MutexLock lock(&mu_);
  exited_ = true;
}

}  // namespace ncclwatch::plugin
