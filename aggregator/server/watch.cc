#include "aggregator/server/watch.h"

#include <deque>

#include "absl/base/thread_annotations.h"
#include "common/sync.h"

namespace ncclwatch::aggregator {
namespace {

class RefusedWatch final : public grpc::ServerWriteReactor<ncclwatch::v1::Event> {
 public:
  explicit RefusedWatch(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// Streams events to one Watch client. Events are queued (bounded: a slow client loses the oldest,
// it never stalls ingest) and written one at a time. gRPC hands the reactor from thread to thread
// through synchronisation TSan cannot see: HandOff/TakeOver (common/sync.h) mark it.
class WatchWriter final : public grpc::ServerWriteReactor<ncclwatch::v1::Event>,
                          public EventWatcher {
 public:
  WatchWriter(EventBus& bus, Counter* dropped) : bus_(bus), dropped_(dropped) {
    bus_.Add(this);
    // Tells the client the subscription is live (it can wait for this before acting).
    HandOff(this);
    StartSendInitialMetadata();
  }

  void Deliver(const ncclwatch::v1::Event& event) override {
    const ncclwatch::v1::Event* to_write = nullptr;
    {
      ncclwatch::MutexLock lock(&mu_);
      if (finished_) return;
      if (queue_.size() >= kMaxQueued) {
        queue_.pop_front();
        dropped_->Increment();
      }
      queue_.push_back(event);
      to_write = NextWriteLocked();
    }
    // gRPC may run reactions inline: start operations outside our lock.
    if (to_write != nullptr) {
      HandOff(this);
      StartWrite(to_write);
    }
  }

  void OnWriteDone(bool ok) override {
    TakeOver(this);
    const ncclwatch::v1::Event* to_write = nullptr;
    bool finish = false;
    {
      ncclwatch::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        finish = !finished_;
        finished_ = true;
      } else {
        to_write = NextWriteLocked();
      }
    }
    HandOff(this);
    if (finish) Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
    if (to_write != nullptr) StartWrite(to_write);
  }

  void OnCancel() override {
    TakeOver(this);
    bool finish = false;
    {
      ncclwatch::MutexLock lock(&mu_);
      finish = !finished_;
      finished_ = true;
    }
    HandOff(this);
    if (finish) Finish(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    TakeOver(this);
    bus_.Remove(this);  // after this returns, Deliver is never called again
    delete this;
  }

 private:
  static constexpr size_t kMaxQueued = 4096;
  // Moves the next event out of the queue into the write slot and returns it (marking a write in
  // flight), or returns nullptr. gRPC may serialize the message any time until OnWriteDone, so it
  // lives apart from the queue, which drops its oldest entries when the client falls behind.
  const ncclwatch::v1::Event* NextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_ || queue_.empty()) return nullptr;
    writing_ = true;
    writing_event_ = std::move(queue_.front());
    queue_.pop_front();
    return &writing_event_;
  }

  EventBus& bus_;
  Counter* const dropped_;
  ncclwatch::Mutex mu_;
  std::deque<ncclwatch::v1::Event> queue_ ABSL_GUARDED_BY(mu_);  // waiting to be written
  // The event being written; untouched from StartWrite until OnWriteDone.
  ncclwatch::v1::Event writing_event_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<ncclwatch::v1::Event>* StartWatch(EventBus& bus, Counter* dropped) {
  return new WatchWriter(bus, dropped);
}

grpc::ServerWriteReactor<ncclwatch::v1::Event>* RefuseWatch(const grpc::Status& status) {
  return new RefusedWatch(status);
}

}  // namespace ncclwatch::aggregator
