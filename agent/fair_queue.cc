#include "agent/fair_queue.h"

namespace ncclwatch::agent {

std::string FairQueue::TakeFront(std::map<uint64_t, Source>::iterator it) {
  Source& s = it->second;
  std::string report = std::move(s.reports.front());
  s.reports.pop_front();
  const auto size = static_cast<int64_t>(report.size());
  by_bytes_.erase({s.bytes, it->first});
  s.bytes -= size;
  bytes_ -= size;
  --reports_;
  if (s.reports.empty()) {
    sources_.erase(it);
  } else {
    by_bytes_.insert({s.bytes, it->first});
  }
  return report;
}

uint64_t FairQueue::Push(std::string report, uint64_t source) {
  const auto size = static_cast<int64_t>(report.size());
  uint64_t dropped = 0;
  while (reports_ > 0 && (reports_ >= max_reports_ || bytes_ + size > max_bytes_)) {
    // The source holding the most bytes loses its oldest report.
    auto victim = sources_.find(std::prev(by_bytes_.end())->second);
    TakeFront(victim);
    ++dropped;
  }
  auto [it, added] = sources_.try_emplace(source);
  Source& s = it->second;
  if (!added) by_bytes_.erase({s.bytes, source});
  s.bytes += size;
  by_bytes_.insert({s.bytes, source});
  s.reports.push_back(std::move(report));
  bytes_ += size;
  ++reports_;
  return dropped;
}

std::map<uint64_t, FairQueue::Source>::iterator FairQueue::Next() {
  auto it = sources_.lower_bound(cursor_);
  return it == sources_.end() ? sources_.begin() : it;
}

std::map<uint64_t, FairQueue::Source>::const_iterator FairQueue::Next() const {
  auto it = sources_.lower_bound(cursor_);
  return it == sources_.end() ? sources_.begin() : it;
}

size_t FairQueue::NextSize() const { return Next()->second.reports.front().size(); }

std::string FairQueue::Pop() {
  auto it = Next();
  cursor_ = it->first + 1;  // the next Pop serves the following source
  return TakeFront(it);
}

}  // namespace ncclwatch::agent
