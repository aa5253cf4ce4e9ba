#include "aggregator/rootcause/process_index.h"

namespace ncclwatch::aggregator {

void ProcessIndex::Set(const CommKey& comm, int rank, const ProcessKey& process) {
  if (rank < 0) return;
  auto [it, inserted] = by_comm_[comm].try_emplace(rank, process);
  if (!inserted) {
    if (it->second == process) return;
    auto old = by_process_.find(it->second);
    if (old != by_process_.end()) {
      old->second.erase({comm, rank});
      if (old->second.empty()) by_process_.erase(old);
    }
    it->second = process;
  }
  by_process_[process].insert({comm, rank});
}

void ProcessIndex::Forget(const CommKey& comm) {
  auto it = by_comm_.find(comm);
  if (it == by_comm_.end()) return;
  for (const auto& [rank, process] : it->second) {
    auto p = by_process_.find(process);
    if (p == by_process_.end()) continue;
    p->second.erase({comm, rank});
    if (p->second.empty()) by_process_.erase(p);
  }
  by_comm_.erase(it);
}

const absl::btree_map<int, ProcessKey>& ProcessIndex::Members(const CommKey& comm) const {
  static const absl::btree_map<int, ProcessKey> kNone;
  auto it = by_comm_.find(comm);
  return it == by_comm_.end() ? kNone : it->second;
}

const ProcessKey* ProcessIndex::Of(const CommKey& comm, int rank) const {
  auto it = by_comm_.find(comm);
  if (it == by_comm_.end()) return nullptr;
  auto found = it->second.find(rank);
  return found == it->second.end() ? nullptr : &found->second;
}

const std::set<std::pair<CommKey, int>>& ProcessIndex::RanksOf(const ProcessKey& process) const {
  static const std::set<std::pair<CommKey, int>> kNone;
  auto it = by_process_.find(process);
  return it == by_process_.end() ? kNone : it->second;
}

}  // namespace ncclwatch::aggregator
