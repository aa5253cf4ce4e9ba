#include "aggregator/rootcause/process_index.h"

namespace ncclwatch::aggregator {

void ProcessIndex::Set(const CommKey& comm, int rank, const ProcessKey& process) {
  if (rank < 0) return;
  std::vector<ProcessKey>& ranks = by_comm_[comm];
  std::vector<bool>& known = known_[comm];
  if (static_cast<int>(ranks.size()) <= rank) {
    ranks.resize(rank + 1);
    known.resize(rank + 1, false);
  }
  if (known[rank]) {
    if (ranks[rank] == process) return;
    auto old = by_process_.find(ranks[rank]);
    if (old != by_process_.end()) {
      old->second.erase({comm, rank});
      if (old->second.empty()) by_process_.erase(old);
    }
  }
  ranks[rank] = process;
  known[rank] = true;
  by_process_[process].insert({comm, rank});
}

void ProcessIndex::Forget(const CommKey& comm) {
  auto it = by_comm_.find(comm);
  if (it == by_comm_.end()) return;
  const std::vector<bool>& known = known_[comm];
  for (size_t r = 0; r < it->second.size(); ++r) {
    if (!known[r]) continue;
    auto p = by_process_.find(it->second[r]);
    if (p == by_process_.end()) continue;
    p->second.erase({comm, static_cast<int>(r)});
    if (p->second.empty()) by_process_.erase(p);
  }
  by_comm_.erase(it);
  known_.erase(comm);
}

int ProcessIndex::Ranks(const CommKey& comm) const {
  auto it = by_comm_.find(comm);
  return it == by_comm_.end() ? 0 : static_cast<int>(it->second.size());
}

const ProcessKey* ProcessIndex::Of(const CommKey& comm, int rank) const {
  auto it = by_comm_.find(comm);
  if (it == by_comm_.end() || rank < 0 || rank >= static_cast<int>(it->second.size())) {
    return nullptr;
  }
  return known_.at(comm)[rank] ? &it->second[rank] : nullptr;
}

const std::set<std::pair<CommKey, int>>& ProcessIndex::RanksOf(const ProcessKey& process) const {
  static const std::set<std::pair<CommKey, int>> kNone;
  auto it = by_process_.find(process);
  return it == by_process_.end() ? kNone : it->second;
}

}  // namespace ncclwatch::aggregator
