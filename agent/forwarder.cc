#include "agent/forwarder.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/rpc/backoff.h"
#include "common/rpc/channel.h"
#include "common/sync.h"
#include "grpcpp/grpcpp.h"

namespace ncclwatch::agent {

Forwarder::Forwarder(ForwarderOptions options, MetricRegistry& m)
    : options_(std::move(options)),
      channel_(ReconnectingChannel(options_.aggregator, 1000, options_.credentials,
                                   options_.tls_server_name)),
      stub_(channel_),
      queue_(options_.max_queued_reports, options_.max_queued_bytes),
      reports_forwarded_(m.GetCounter("ncclwatch_agent_reports_forwarded_total",
                                      "Reports acknowledged by the aggregator.",
                                      options_.metric_labels)),
      reports_dropped_(m.GetCounter("ncclwatch_agent_reports_dropped_total",
                                    "Reports dropped because the in-memory queue was full.",
                                    options_.metric_labels)),
      batches_acked_(m.GetCounter("ncclwatch_agent_batches_acked_total",
                                  "Batches acknowledged by the aggregator.",
                                  options_.metric_labels)),
      batches_duplicate_(m.GetCounter("ncclwatch_agent_batches_duplicate_total",
                                      "Acknowledged batches the aggregator had already stored.",
                                      options_.metric_labels)),
      push_failures_(m.GetCounter("ncclwatch_agent_push_failures_total",
                                  "Batch pushes that failed and will be retried.",
                                  options_.metric_labels)),
      batches_refused_(m.GetCounter(
          "ncclwatch_agent_batches_refused_total",
          "Batches the aggregator refused for good (malformed or too large) and that were dropped.",
          options_.metric_labels)),
      batches_set_aside_(m.GetCounter(
          "ncclwatch_agent_batches_set_aside_total",
          "Batches that failed again and again while later ones got through, set aside so "
          "that they no longer hold the node's batches back (kept in the spool as *.rejected).",
          options_.metric_labels)),
      batches_replayed_(m.GetCounter("ncclwatch_agent_batches_replayed_total",
                                     "Batches an earlier run left in the spool, acknowledged now.",
                                     options_.metric_labels)),
      queue_depth_(m.GetGauge("ncclwatch_agent_queue_reports",
                              "Reports waiting to be cut into a batch.", options_.metric_labels)),
      outbox_depth_(m.GetGauge("ncclwatch_agent_outbox_batches",
                               "Batches cut and waiting for the aggregator's acknowledgement.",
                               options_.metric_labels)),
      last_push_duration_(m.GetGauge("ncclwatch_agent_last_push_duration_seconds",
                                     "Duration of the last successful batch push.",
                                     options_.metric_labels)),
      push_seconds_(
          m.GetHistogram("ncclwatch_agent_push_duration_seconds",
                         "Round trip of successful batch pushes to the aggregator.",
                         {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
                         options_.metric_labels)),
      delay_seconds_(m.GetHistogram(
          "ncclwatch_agent_batch_delay_seconds",
          "From the receipt of a batch's oldest report to the aggregator's acknowledgement.",
          {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800}, options_.metric_labels)) {}

Forwarder::~Forwarder() { Stop(); }

void Forwarder::Start() {
  if (options_.spool != nullptr) {
    for (const Spool::Entry& e : options_.spool->TakeRecovered()) {
      outbox_.push_back({e.name, std::nullopt, e.reports});
    }
    if (!outbox_.empty()) {
      LogInfo("spool: %d batches left by an earlier run go first", outbox_.size());
      ncclwatch::MutexLock lock(&mu_);
      idle_ = false;
    }
  }
  thread_ = std::thread([this] { Run(); });
}

void Forwarder::Enqueue(std::string report, uint64_t source) {
  ncclwatch::MutexLock lock(&mu_);
  if (queue_.empty()) oldest_enqueued_ = absl::Now();
  if (uint64_t dropped = queue_.Push(std::move(report), source); dropped > 0) {
    reports_dropped_->Increment(dropped);
  }
  idle_ = false;
  queue_depth_->Set(static_cast<double>(queue_.size()));
}

bool Forwarder::Flush(absl::Duration timeout) {
  ncclwatch::MutexLock lock(&mu_);
  flush_requested_ = true;
  bool ok = mu_.AwaitWithTimeout(absl::Condition(&idle_), timeout);
  flush_requested_ = false;
  return ok;
}

void Forwarder::Stop() {
  {
    ncclwatch::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

Forwarder::PushResult Forwarder::Push(ncclwatch::v1::NodeBatchBytes& batch) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(options_.push_timeout_ms));
  batch.set_sent_unix_ns(absl::ToUnixNanos(absl::Now()));
  ncclwatch::v1::BatchAck ack;
  if (options_.token != nullptr) {
    context.AddMetadata("authorization", "Bearer " + options_.token->Get());
  }
  absl::Time start = absl::Now();
  grpc::Status status;
  ncclwatch::Notification done;
  stub_.UnaryCall(&context, "/ncclwatch.v1.Ingest/Push", grpc::StubOptions(), &batch, &ack,
                  [&](grpc::Status s) {
                    status = std::move(s);
                    done.Notify();
                  });
  done.WaitForNotification();
  // A batch the aggregator can never take would otherwise be retried forever, holding back
  // every batch behind it.
  if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
      status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
    batches_refused_->Increment();
    LogError("the aggregator %s refused batch %d (%d reports, %d bytes) for good: %s; dropped",
             options_.aggregator, batch.batch_seq(), batch.reports_size(), batch.ByteSizeLong(),
             status.error_message());
    return PushResult::kRefused;
  }
  if (!status.ok()) {
    push_failures_->Increment();
    if (failing_since_ns_.load(std::memory_order_relaxed) == 0) {
      failing_since_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
    }
    {
      ncclwatch::MutexLock lock(&failure_mu_);
      last_failure_ =
          absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                       ": ", status.error_message());
    }
    const std::string code =
        absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
    LogWarningWith({{"aggregator", options_.aggregator},
                    {"batch", absl::StrCat(batch.batch_seq())},
                    {"code", code}},
                   "push of batch %d (%d reports) to %s failed: %s: %s; will retry",
                   batch.batch_seq(), batch.reports_size(), options_.aggregator, code,
                   status.error_message());
    switch (status.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::DEADLINE_EXCEEDED:
      case grpc::StatusCode::CANCELLED:
      case grpc::StatusCode::ABORTED:
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
        return PushResult::kRetry;  // the path or the aggregator, not this batch
      default:
        return PushResult::kFailed;
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  last_push_duration_->Set(seconds);
  push_seconds_->Observe(seconds);
  batches_acked_->Increment();
  failing_since_ns_.store(0, std::memory_order_relaxed);
  if (ack.duplicate()) batches_duplicate_->Increment();
  if (batch.agent_id() != options_.agent_id) batches_replayed_->Increment();
  reports_forwarded_->Increment(batch.reports_size());
  return PushResult::kAcked;
}

std::string Forwarder::LastFailure() const {
  ncclwatch::MutexLock lock(&failure_mu_);
  return last_failure_;
}

bool Forwarder::Load(Outgoing& o) {
  if (o.batch) return true;
  auto read = options_.spool->Read(o.spool_name);
  if (!read.ok()) {
    LogWarning("%s", read.status().message());
    return false;
  }
  o.batch = *std::move(read);
  return true;
}

void Forwarder::Release(const Outgoing& o) {
  if (!o.spool_name.empty()) {
    options_.spool->Remove(o.spool_name);
  } else {
    outbox_reports_ -= o.reports;
    outbox_bytes_ -= o.bytes;
  }
}

Forwarder::Cut Forwarder::CutBatch() {
  ncclwatch::v1::NodeBatchBytes batch;
  batch.set_agent_id(options_.agent_id);
  batch.set_batch_seq(next_seq_++);
  batch.set_node(options_.node);
  int64_t bytes = 0;
  while (!queue_.empty() && batch.reports_size() < options_.max_batch_reports &&
         (batch.reports_size() == 0 ||
          bytes + static_cast<int64_t>(queue_.NextSize()) <= options_.max_batch_bytes)) {
    bytes += static_cast<int64_t>(queue_.NextSize());
    *batch.add_reports() = queue_.Pop();
  }
  Cut cut{std::move(batch), oldest_enqueued_};
  if (!queue_.empty()) oldest_enqueued_ = absl::Now();
  queue_depth_->Set(static_cast<double>(queue_.size()));
  return cut;
}

void Forwarder::Admit(Cut cut) {
  ncclwatch::v1::NodeBatchBytes& batch = cut.batch;
  const int reports = batch.reports_size();
  if (options_.spool != nullptr) {
    auto name = options_.spool->Add(batch);
    if (name.ok()) {
      outbox_.push_back({*name, std::nullopt, reports, 0, cut.oldest_report});
      outbox_depth_->Set(static_cast<double>(outbox_.size()));
      return;
    }
    LogWarning("%s; batch %d stays in memory only", name.status().message(), batch.batch_seq());
  }
  int64_t bytes = 0;
  for (const std::string& r : batch.reports()) bytes += static_cast<int64_t>(r.size());
  outbox_.push_back({"", std::move(batch), reports, bytes, cut.oldest_report});
  outbox_reports_ += reports;
  outbox_bytes_ += bytes;
  // Without the spool's disk, memory is the bound: the oldest batches in memory go first (never
  // the one being pushed, at the front).
  while (outbox_.size() > 1 && (outbox_reports_ > options_.max_queued_reports ||
                                outbox_bytes_ > options_.max_queued_bytes)) {
    auto oldest = std::find_if(outbox_.begin() + 1, outbox_.end(),
                               [](const Outgoing& o) { return o.bytes > 0; });
    if (oldest == outbox_.end()) break;
    reports_dropped_->Increment(static_cast<uint64_t>(oldest->reports));
    outbox_reports_ -= oldest->reports;
    outbox_bytes_ -= oldest->bytes;
    outbox_.erase(oldest);
  }
  outbox_depth_->Set(static_cast<double>(outbox_.size()));
}

void Forwarder::Run() {
  Backoff backoff(std::chrono::milliseconds(100), kPushRetryMaxDelay);
  absl::Time retry_at = absl::InfinitePast();
  for (;;) {
    std::vector<Cut> cut;
    bool stopping = false;
    {
      ncclwatch::MutexLock lock(&mu_);
      if (queue_.empty() && outbox_.empty()) {
        idle_ = true;
        auto wake = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&wake));
      }
      // Sleep until a batch is due (full, flushed, stopping, or its oldest report waited the
      // interval) or the next push attempt, whichever comes first.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || (flush_requested_ && !queue_.empty()) ||
               queue_.size() >= options_.max_batch_reports;
      };
      absl::Time wake_at = absl::InfiniteFuture();
      if (!queue_.empty())
        wake_at = oldest_enqueued_ + absl::Milliseconds(options_.batch_interval_ms);
      if (!outbox_.empty()) wake_at = std::min(wake_at, retry_at);
      mu_.AwaitWithDeadline(absl::Condition(&ready), wake_at);
      stopping = stop_;
      const bool due =
          !queue_.empty() &&
          (ready() ||
           absl::Now() >= oldest_enqueued_ + absl::Milliseconds(options_.batch_interval_ms));
      while (due && !queue_.empty()) cut.push_back(CutBatch());
    }
    for (Cut& c : cut) Admit(std::move(c));
    if (outbox_.empty()) {
      if (stopping) return;
      continue;
    }
    if (!stopping && absl::Now() < retry_at) continue;  // backing off; batches keep being cut

    Outgoing& next = outbox_.front();
    if (!Load(next)) {  // dropped to make room, or unreadable: nothing left to send
      outbox_.pop_front();
      front_failures_ = 0;
      continue;
    }
    PushResult pushed = Push(*next.batch);
    front_failures_ = pushed == PushResult::kFailed ? front_failures_ + 1 : 0;
    if (front_failures_ >= options_.set_aside_after && outbox_.size() > 1 && Load(outbox_[1])) {
      // Is it this batch, or the aggregator? The next batch tells: if it gets through, the
      // oldest is set aside and the rest flow; if not, both wait.
      Outgoing& later = outbox_[1];
      const PushResult probe = Push(*later.batch);
      // One last try of the oldest, now that a later batch got through: a fault that just ended
      // must not cost a good batch.
      const PushResult last = probe == PushResult::kAcked ? Push(*next.batch) : PushResult::kFailed;
      if (probe != PushResult::kAcked) {
        if (!later.spool_name.empty()) later.batch.reset();
      } else if (last == PushResult::kAcked || last == PushResult::kRefused) {
        Release(next);
        outbox_.pop_front();
        front_failures_ = 0;
        pushed = probe;  // the later one's, settled below as the front's
      } else {
        Outgoing poison = std::move(outbox_.front());
        outbox_.pop_front();
        batches_set_aside_->Increment();
        LogError("batch %d (%d reports) failed %d times while batch %d got through: set aside%s",
                 poison.batch->batch_seq(), poison.reports, front_failures_,
                 outbox_.front().batch->batch_seq(),
                 poison.spool_name.empty() ? " (dropped: no spool)"
                                           : absl::StrCat(" as ", options_.spool->dir(), "/",
                                                          poison.spool_name, ".rejected"));
        if (!poison.spool_name.empty()) options_.spool->SetAside(poison.spool_name);
        Release(poison);
        front_failures_ = 0;
        pushed = probe;  // settled below, as the front's
      }
    }
    Outgoing& front = outbox_.front();
    if (pushed != PushResult::kRetry && pushed != PushResult::kFailed) {
      if (pushed == PushResult::kAcked && front.oldest_report != absl::InfinitePast()) {
        delay_seconds_->Observe(absl::ToDoubleSeconds(absl::Now() - front.oldest_report));
      }
      Release(front);
      outbox_.pop_front();
      outbox_depth_->Set(static_cast<double>(outbox_.size()));
      front_failures_ = 0;
      backoff.Reset();
      retry_at = absl::InfinitePast();
      continue;
    }
    if (!front.spool_name.empty()) front.batch.reset();  // on disk already: free the memory
    if (stopping) {
      if (options_.spool != nullptr) {
        LogInfo(
            "stopping with the aggregator unreachable: %d batches (%d bytes) wait in the "
            "spool for the next start",
            options_.spool->batches(), options_.spool->bytes());
      } else {
        LogWarning("stopping with the aggregator unreachable: %d batches are lost (no spool)",
                   outbox_.size());
      }
      return;
    }
    retry_at = absl::Now() + absl::FromChrono(backoff.NextDelay());
  }
}

}  // namespace ncclwatch::agent
