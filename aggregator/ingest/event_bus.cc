#include "aggregator/ingest/event_bus.h"

namespace ncclwatch::aggregator {

void EventBus::Add(EventWatcher* watcher) {
  ncclwatch::MutexLock lock(&mu_);
  watchers_.insert(watcher);
}

void EventBus::Remove(EventWatcher* watcher) {
  ncclwatch::MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

void EventBus::Publish(const ncclwatch::v1::Event& event) {
  ncclwatch::MutexLock lock(&mu_);
  for (EventWatcher* w : watchers_) w->Deliver(event);
}

}  // namespace ncclwatch::aggregator
