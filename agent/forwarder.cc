#include "agent/forwarder.h"

#include <random>

#include "common/log.h"
#include "grpcpp/grpcpp.h"

namespace ncclwatch::agent {

Forwarder::Forwarder(ForwarderOptions options, MetricRegistry& m)
    : options_(std::move(options)),
      stub_(ncclwatch::v1::Ingest::NewStub(
          grpc::CreateChannel(options_.aggregator, grpc::InsecureChannelCredentials()))),
      reports_forwarded_(m.GetCounter("ncclwatch_agent_reports_forwarded_total",
                                      "Reports acknowledged by the aggregator.")),
      reports_dropped_(m.GetCounter("ncclwatch_agent_reports_dropped_total",
                                    "Reports dropped because the forward queue was full.")),
      batches_acked_(m.GetCounter("ncclwatch_agent_batches_acked_total",
                                  "Batches acknowledged by the aggregator.")),
      batches_duplicate_(m.GetCounter("ncclwatch_agent_batches_duplicate_total",
                                      "Acknowledged batches the aggregator had already stored.")),
      push_failures_(m.GetCounter("ncclwatch_agent_push_failures_total",
                                  "Batch pushes that failed and will be retried.")),
      queue_depth_(m.GetGauge("ncclwatch_agent_queue_reports",
                              "Reports waiting to be forwarded (not counting the batch in flight).")),
      last_push_seconds_(m.GetGauge("ncclwatch_agent_last_push_seconds",
                                    "Duration of the last successful batch push.")) {}

Forwarder::~Forwarder() { Stop(); }

void Forwarder::Start() { thread_ = std::thread([this] { Run(); }); }

void Forwarder::Enqueue(ncclwatch::v1::RankReport report) {
  absl::MutexLock lock(&mu_);
  if (queue_.empty()) oldest_enqueued_ = absl::Now();
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queued_reports) {
    queue_.pop_front();
    reports_dropped_->Increment();
  }
  queue_.push_back(std::move(report));
  idle_ = false;
  queue_depth_->Set(static_cast<double>(queue_.size()));
}

bool Forwarder::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  flush_requested_ = true;
  bool ok = mu_.AwaitWithTimeout(absl::Condition(&idle_), timeout);
  flush_requested_ = false;
  return ok;
}

void Forwarder::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool Forwarder::PushPending() {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(options_.push_timeout_ms));
  pending_->set_sent_unix_ns(absl::ToUnixNanos(absl::Now()));
  ncclwatch::v1::BatchAck ack;
  absl::Time start = absl::Now();
  grpc::Status status = stub_->Push(&context, *pending_, &ack);
  if (!status.ok()) {
    push_failures_->Increment();
    LogWarning("push of batch %d (%d reports) to %s failed: %s; will retry",
               pending_->batch_seq(), pending_->reports_size(), options_.aggregator,
               status.error_message());
    return false;
  }
  last_push_seconds_->Set(absl::ToDoubleSeconds(absl::Now() - start));
  batches_acked_->Increment();
  if (ack.duplicate()) batches_duplicate_->Increment();
  reports_forwarded_->Increment(pending_->reports_size());
  return true;
}

void Forwarder::Run() {
  std::minstd_rand rng(std::random_device{}());
  int backoff_ms = 100;
  for (;;) {
    if (!pending_) {
      absl::MutexLock lock(&mu_);
      // A batch is cut when it is full, when its oldest report has waited the batch interval,
      // when a flush is requested, or at stop.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || flush_requested_ ||
               static_cast<int64_t>(queue_.size()) >= options_.max_batch_reports;
      };
      if (queue_.empty()) {
        idle_ = true;
        auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || !queue_.empty();
        };
        mu_.Await(absl::Condition(&wake));
      }
      if (!queue_.empty()) {
        mu_.AwaitWithDeadline(absl::Condition(&ready),
                              oldest_enqueued_ + absl::Milliseconds(options_.batch_interval_ms));
      }
      if (queue_.empty()) {
        if (stop_) return;
        continue;
      }
      ncclwatch::v1::NodeBatch batch;
      batch.set_agent_id(options_.agent_id);
      batch.set_batch_seq(next_seq_++);
      batch.set_node(options_.node);
      while (!queue_.empty() && batch.reports_size() < options_.max_batch_reports) {
        *batch.add_reports() = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!queue_.empty()) oldest_enqueued_ = absl::Now();
      queue_depth_->Set(static_cast<double>(queue_.size()));
      pending_ = std::move(batch);
    }
    if (PushPending()) {
      pending_.reset();
      backoff_ms = 100;
      continue;
    }
    absl::MutexLock lock(&mu_);
    if (stop_) return;  // unsent data is lost here until the durable spool exists (issue 6)
    int wait = backoff_ms / 2 + static_cast<int>(rng() % (backoff_ms / 2 + 1));
    mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(wait));
    backoff_ms = std::min(backoff_ms * 2, 5000);
  }
}

}  // namespace ncclwatch::agent
