#include "plugin/own_time.h"

namespace ncclwatch::plugin {

int64_t OwnTimeTracker::Observe(uint64_t start_ns, uint64_t stop_ns) {
  bool found = false;
  uint64_t latest = 0;
  for (size_t i = 0; i < size_; ++i) {
    if (ends_[i] <= start_ns + kOverlapNs && (!found || ends_[i] > latest)) {
      latest = ends_[i];
      found = true;
    }
  }
  ends_[next_] = stop_ns;
  next_ = (next_ + 1) % kHistory;
  if (size_ < kHistory) ++size_;
  if (!found) return -1;
  return latest >= start_ns ? 0 : static_cast<int64_t>(start_ns - latest);
}

}  // namespace ncclwatch::plugin
