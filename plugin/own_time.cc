#include "plugin/own_time.h"

namespace ncclwatch::plugin {

int64_t OwnTimeTracker::Observe(uint64_t start_ns, uint64_t stop_ns, bool p2p) {
  bool found = false;
  bool unknown = false;
  uint64_t latest = 0;
  for (size_t i = 0; i < size_; ++i) {
    if (p2p && p2p_[i] && starts_[i] + kSameLaunchNs > start_ns) continue;  // this launch
    if (ends_[i] <= start_ns + kOverlapNs && (!found || ends_[i] > latest)) {
      latest = ends_[i];
      unknown = unknown_[i];
      found = true;
    }
  }
  Record(start_ns, stop_ns, false, p2p);
  if (!found || unknown) return -1;
  return latest >= start_ns ? 0 : static_cast<int64_t>(start_ns - latest);
}

void OwnTimeTracker::ObserveUnknownEnd(uint64_t start_ns) {
  Record(start_ns, start_ns, true, false);
}

void OwnTimeTracker::Record(uint64_t start_ns, uint64_t end_ns, bool unknown, bool p2p) {
  starts_[next_] = start_ns;
  p2p_[next_] = p2p;
  ends_[next_] = end_ns;
  unknown_[next_] = unknown;
  next_ = (next_ + 1) % kHistory;
  if (size_ < kHistory) ++size_;
}

}  // namespace ncclwatch::plugin
