// Who a rank is, as findings name it: where it runs (node, GPU) and, inside Kubernetes, which pod
// holds that GPU. Kept per communicator by the analyzer's registry.
#ifndef NCCLWATCH_AGGREGATOR_FINDINGS_WHO_H_
#define NCCLWATCH_AGGREGATOR_FINDINGS_WHO_H_

#include <string>
#include <vector>

namespace ncclwatch::aggregator {

struct RankWho {
  std::string node;
  int cuda_device = -1;
  std::string gpu_uuid;
  // Where the agent found the GPU allocated (kubelet pod-resources); empty outside Kubernetes.
  std::string pod;
  std::string pod_namespace;
  std::string container;
};

struct CommWho {
  std::string comm_name;
  int nranks = 0;
  int n_nodes = 0;
  std::vector<RankWho> ranks;  // index = rank; default-constructed until the rank reports
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_FINDINGS_WHO_H_
