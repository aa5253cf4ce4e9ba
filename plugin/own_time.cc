#include "plugin/own_time.h"

namespace ncclwatch::plugin {

int64_t OwnTimeTracker::Observe(uint64_t start_ns, uint64_t stop_ns) {
  bool found = false;
  bool unknown = false;
  uint64_t latest = 0;
  for (size_t i = 0; i < size_; ++i) {
    if (starts_[i] + kSameLaunchNs > start_ns) continue;  // this launch, or a later one
    if (ends_[i] <= start_ns + kOverlapNs && (!found || ends_[i] > latest)) {
      latest = ends_[i];
      unknown = unknown_[i];
      found = true;
    }
  }
  Record(start_ns, stop_ns, false);
  if (!found || unknown) return -1;
  return latest >= start_ns ? 0 : static_cast<int64_t>(start_ns - latest);
}

void OwnTimeTracker::ObserveUnknownEnd(uint64_t start_ns) { Record(start_ns, start_ns, true); }

void OwnTimeTracker::Record(uint64_t start_ns, uint64_t end_ns, bool unknown) {
  starts_[next_] = start_ns;
  ends_[next_] = end_ns;
  unknown_[next_] = unknown;
  next_ = (next_ + 1) % kHistory;
  if (size_ < kHistory) ++size_;
}

}  // namespace ncclwatch::plugin
