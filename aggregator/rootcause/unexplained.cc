#include "aggregator/rootcause/unexplained.h"

#include <algorithm>

namespace ncclwatch::aggregator {

bool CommFamilies::Set(const CommKey& comm, int nranks, int n_nodes) {
  Key key{comm.job_id, nranks, n_nodes};
  auto [it, added] = of_.try_emplace(comm, key);
  if (!added) {
    if (it->second == key) return false;
    Forget(comm);
    of_.emplace(comm, key);
  }
  families_[key].insert(comm);
  return true;
}

bool CommFamilies::Forget(const CommKey& comm) {
  auto it = of_.find(comm);
  if (it == of_.end()) return false;
  auto family = families_.find(it->second);
  if (family != families_.end()) {
    family->second.erase(comm);
    if (family->second.empty()) families_.erase(family);
  }
  of_.erase(it);
  return true;
}

const std::set<CommKey>& CommFamilies::FamilyOf(const CommKey& comm) const {
  static const std::set<CommKey> kNone;
  auto it = of_.find(comm);
  if (it == of_.end()) return kNone;
  auto family = families_.find(it->second);
  return family == families_.end() ? kNone : family->second;
}

UnexplainedPages DecideUnexplained(const std::vector<LateGpu>& late,
                                   const std::function<int(const std::string&)>& gpus_on_node,
                                   const NodeRule& rule, int64_t now_ns, int64_t after_ns) {
  auto ready = [&](const LateGpu& g) { return now_ns - g.since_ns >= after_ns; };
  std::map<std::string, std::vector<const LateGpu*>> by_node;
  for (const LateGpu& g : late) by_node[g.node].push_back(&g);
  UnexplainedPages out;
  for (const auto& [node, gpus] : by_node) {
    const int n = static_cast<int>(gpus.size());
    const bool whole =
        !node.empty() && n >= rule.min_gpus && n >= rule.fraction * std::max(1, gpus_on_node(node));
    if (whole) {
      if (std::all_of(gpus.begin(), gpus.end(), [&](const LateGpu* g) { return ready(*g); })) {
        std::vector<int> ids;
        for (const LateGpu* g : gpus) ids.push_back(g->id);
        out.nodes.emplace_back(node, std::move(ids));
      }
      continue;  // a node page, now or once its last GPU is ready
    }
    for (const LateGpu* g : gpus) {
      if (ready(*g)) out.gpus.push_back(g->id);
    }
  }
  return out;
}

}  // namespace ncclwatch::aggregator
