// Hands every detection event, as it is stored, to whoever watches (the Query API's Watch
// streams). Publishing never waits for a watcher: a Watch stream queues and, when its client is
// too slow, drops the oldest.
#ifndef NCCLWATCH_AGGREGATOR_INGEST_EVENT_BUS_H_
#define NCCLWATCH_AGGREGATOR_INGEST_EVENT_BUS_H_

#include <set>

#include "absl/base/thread_annotations.h"
#include "common/sync.h"
#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

// Receives every detection event as it happens. Deliver must not block.
class EventWatcher {
 public:
  virtual ~EventWatcher() = default;
  virtual void Deliver(const ncclwatch::v1::Event& event) = 0;
};

// Thread-safe.
class EventBus {
 public:
  void Add(EventWatcher* watcher) ABSL_LOCKS_EXCLUDED(mu_);
  // After Remove returns, `watcher` is never called again.
  void Remove(EventWatcher* watcher) ABSL_LOCKS_EXCLUDED(mu_);
  void Publish(const ncclwatch::v1::Event& event) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ncclwatch::Mutex mu_;
  std::set<EventWatcher*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_INGEST_EVENT_BUS_H_
