// Which communicator ranks belong to which process (one GPU): the join that job-level analysis
// needs, since all communicators of a process share its GPU, its stream and its clock.
// Plain structs; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_ROOTCAUSE_PROCESS_INDEX_H_
#define NCCLWATCH_AGGREGATOR_ROOTCAUSE_PROCESS_INDEX_H_

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/node_hash_map.h"
#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

// The process behind a communicator rank: one GPU, whatever communicators it is in.
struct ProcessKey {
  std::string job_id;
  std::string host;
  uint32_t pid = 0;
  int cuda_device = -1;
  bool operator<(const ProcessKey& o) const {
    return std::tie(job_id, host, pid, cuda_device) <
           std::tie(o.job_id, o.host, o.pid, o.cuda_device);
  }
  bool operator==(const ProcessKey& o) const = default;
};

class ProcessIndex {
 public:
  // Records that `rank` of `comm` is `process` (a later call for the same rank replaces it).
  void Set(const CommKey& comm, int rank, const ProcessKey& process);
  void Forget(const CommKey& comm);

  // The known ranks of `comm` and their processes, by rank (empty when none is known).
  const absl::btree_map<int, ProcessKey>& Members(const CommKey& comm) const;
  // The process of a communicator rank, or nullptr when unknown.
  const ProcessKey* Of(const CommKey& comm, int rank) const;
  // Every (communicator, rank) of a process, ordered.
  const std::set<std::pair<CommKey, int>>& RanksOf(const ProcessKey& process) const;

 private:
  // The ranks that reported only: sparse, whatever size a communicator claims.
  absl::node_hash_map<CommKey, absl::btree_map<int, ProcessKey>> by_comm_;
  std::map<ProcessKey, std::set<std::pair<CommKey, int>>> by_process_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ROOTCAUSE_PROCESS_INDEX_H_
