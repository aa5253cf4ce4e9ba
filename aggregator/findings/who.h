// Who a rank is, as findings name it: where it runs (node, GPU) and, inside Kubernetes, which pod
// holds that GPU. Kept per communicator by the analyzer's registry.
#ifndef NCCLWATCH_AGGREGATOR_FINDINGS_WHO_H_
#define NCCLWATCH_AGGREGATOR_FINDINGS_WHO_H_

#include <map>
#include <string>

#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

struct RankWho {
  std::string node;
  int cuda_device = -1;
  std::string gpu_uuid;
  // Where the agent found the GPU allocated (kubelet pod-resources); empty outside Kubernetes.
  std::string pod;
  std::string pod_namespace;
  std::string container;
  // The process behind the rank (with node and cuda_device: what a new process changes).
  std::string host;
  uint32_t pid = 0;
  // The rank the training job knows the process by, and its rank on the node (RANK, LOCAL_RANK,
  // SLURM_PROCID, NCCLWATCH_RANK, ...: plugin/training_rank.h); -1 when the launcher set none.
  int global_rank = -1;
  int local_rank = -1;
  // When its newest report arrived (the registry's bookkeeping, on the aggregator's clock).
  int64_t last_seen_ns = 0;
  // A hash of the identity its newest report carried (with its communicator's name and span):
  // a report whose identity hashes alike changes nothing here, and nothing is compared or copied.
  uint64_t identity_hash = 0;
  // A hash of what its series' labels are made of (CommRegistry::RankLabels: the communicator's
  // name, node, GPU, training rank), for the series table to tell when they changed.
  uint64_t labels_hash = 0;
  // Where the series table and the hang detector keep the rank's state, cached between its
  // reports (detect/types.h). Meaningless outside the registry's copy.
  CachedSlot series_slot;
  CachedSlot hang_slot;
};

struct CommWho {
  std::string comm_name;
  int nranks = 0;
  int n_nodes = 0;
  // The ranks that have reported, by rank. Sparse on purpose: what is kept grows with the ranks
  // that really report, never with the size a report claims (docs/security.md). Each stays where
  // it is while it is kept (the registry indexes them by address).
  std::map<int, RankWho> ranks;
  // Rank `rank`, or an empty RankWho (node unknown, GPU -1) when it has not reported.
  const RankWho& Rank(int rank) const {
    static const RankWho kUnknown;
    auto it = ranks.find(rank);
    return it == ranks.end() ? kUnknown : it->second;
  }
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_FINDINGS_WHO_H_
