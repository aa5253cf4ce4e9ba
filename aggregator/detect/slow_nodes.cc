#include "aggregator/detect/slow_nodes.h"

#include <algorithm>

namespace ncclwatch::aggregator {

std::vector<SlowNodeChange> SlowNodeDetector::Update(const CommKey& comm,
                                                     const std::vector<std::string>& node_of_rank,
                                                     const std::vector<RankScore>& scores) {
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < static_cast<int>(node_of_rank.size()); ++r) {
    ranks_of[node_of_rank[r]].push_back(r);
  }
  std::set<std::string> slow;
  if (ranks_of.size() > 1) {
    std::vector<bool> flagged(node_of_rank.size(), false);
    for (const RankScore& s : scores) {
      if (s.rank >= 0 && s.rank < static_cast<int>(flagged.size())) flagged[s.rank] = s.flagged;
    }
    for (const auto& [node, ranks] : ranks_of) {
      if (node.empty()) continue;
      if (std::all_of(ranks.begin(), ranks.end(), [&](int r) { return flagged[r]; })) {
        slow.insert(node);
      }
    }
  }
  std::set<std::string>& was = slow_[comm];
  std::vector<SlowNodeChange> changes;
  for (const auto& node : was) {
    if (!slow.count(node)) changes.push_back({false, node, ranks_of[node]});
  }
  for (const auto& node : slow) {
    if (!was.count(node)) changes.push_back({true, node, ranks_of[node]});
  }
  was = std::move(slow);
  return changes;
}

bool SlowNodeDetector::IsSlow(const CommKey& comm, const std::string& node) const {
  auto it = slow_.find(comm);
  return it != slow_.end() && it->second.count(node) > 0;
}

}  // namespace ncclwatch::aggregator
