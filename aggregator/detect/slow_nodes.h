// Node-level straggler verdicts: a node is slow in a communicator when every rank the communicator
// has on it is flagged slow, and the communicator spans more than one node (a node can only be
// singled out against other nodes).
//
// Plain structs, no gRPC; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_DETECT_SLOW_NODES_H_
#define NCCLWATCH_AGGREGATOR_DETECT_SLOW_NODES_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "aggregator/detect/straggler.h"
#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

// A node that became slow (start) or recovered in one communicator.
struct SlowNodeChange {
  bool start = true;
  std::string node;
  std::vector<int> ranks;  // the communicator's ranks on that node
};

class SlowNodeDetector {
 public:
  // Re-judges the nodes of `comm` after its rank flags changed. `node_of_rank[r]` is where rank r
  // runs ("" when unknown: never singled out); `scores` are the straggler detector's. Returns the
  // changes: recoveries first, then new slow nodes, each in node order.
  std::vector<SlowNodeChange> Update(const CommKey& comm,
                                     const std::vector<std::string>& node_of_rank,
                                     const std::vector<RankScore>& scores);
  bool IsSlow(const CommKey& comm, const std::string& node) const;
  // Whether any node of `comm` is flagged.
  bool AnySlow(const CommKey& comm) const {
    auto it = slow_.find(comm);
    return it != slow_.end() && !it->second.empty();
  }
  // Forgets the communicator's verdicts without reporting their end.
  void Forget(const CommKey& comm) { slow_.erase(comm); }

 private:
  absl::node_hash_map<CommKey, std::set<std::string>> slow_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_SLOW_NODES_H_
