#include "aggregator/rootcause/min_elsewhere.h"

namespace ncclwatch::aggregator {

void MinElsewhere::Add(uint64_t node, int* index) {
  *index = static_cast<int>(members_.size());
  members_.push_back(Member{0, false, node, index});
}

void MinElsewhere::Set(int i, bool has_value, double value) {
  Member& m = members_[i];
  const bool had = m.has_value;
  const double old = m.value;
  m.has_value = has_value;
  m.value = value;
  if (stale_) return;
  if (!has_value) {
    stale_ = had && (i == best_ || i == second_);
    return;
  }
  if (best_ < 0) {  // the first member with a value (none had one, or the rest have none)
    best_ = i;
    return;
  }
  const bool grew = had && value > old;
  if (i == best_ || i == second_) {
    if (grew) {
      stale_ = true;  // the next smallest could be any member: found when next asked
    } else if (i == second_ && value < members_[best_].value) {
      second_ = best_;  // on another node than i's, and the smallest there
      best_ = i;
    }
    return;
  }
  if (grew) return;  // it was not the smallest of anything
  if (value < members_[best_].value) {
    // The old smallest stays the smallest on every node but its own.
    if (m.node != members_[best_].node) second_ = best_;
    best_ = i;
  } else if (m.node != members_[best_].node && (second_ < 0 || value < members_[second_].value)) {
    second_ = i;
  }
}

void MinElsewhere::Remove(int i) {
  if (i != static_cast<int>(members_.size()) - 1) {
    members_[i] = members_.back();
    *members_[i].index = i;
  }
  members_.pop_back();
  stale_ = true;
}

void MinElsewhere::Rescan() const {
  best_ = -1;
  second_ = -1;
  for (int i = 0; i < static_cast<int>(members_.size()); ++i) {
    const Member& m = members_[i];
    if (m.has_value && (best_ < 0 || m.value < members_[best_].value)) best_ = i;
  }
  for (int i = 0; best_ >= 0 && i < static_cast<int>(members_.size()); ++i) {
    const Member& m = members_[i];
    if (m.has_value && m.node != members_[best_].node &&
        (second_ < 0 || m.value < members_[second_].value)) {
      second_ = i;
    }
  }
  stale_ = false;
}

bool MinElsewhere::SmallestElsewhere(uint64_t node, double* value) const {
  if (stale_) Rescan();
  const int found = best_ >= 0 && members_[best_].node != node ? best_ : second_;
  if (found < 0) return false;
  *value = members_[found].value;
  return true;
}

}  // namespace ncclwatch::aggregator
