#include "aggregator/rootcause/verdicts.h"

#include <algorithm>

namespace ncclwatch::aggregator {

VerdictChanges RootCauseVerdicts::Observe(const std::vector<SlowProcess>& changed, int64_t now_ns,
                                          const GpusOnNode& gpus_on_node) {
  VerdictChanges out;
  std::vector<NodeKey> touched;
  for (const SlowProcess& s : changed) {
    auto it = gpus_.find(s.process);
    if (s.slow) {
      if (it != gpus_.end()) {
        it->second.clear_since_ns = 0;  // slow again within the hold: the same finding
      } else if (!pending_.count(s.process)) {
        pending_[s.process] = ReportedGpu{s, now_ns, 0};
      }
    } else if (it != gpus_.end()) {
      if (it->second.clear_since_ns == 0) it->second.clear_since_ns = now_ns;
    } else {
      pending_.erase(s.process);
    }
  }
  Confirm(now_ns, &out, &touched);
  JudgeNodes(touched, gpus_on_node, &out);
  return out;
}

void RootCauseVerdicts::Confirm(int64_t now_ns, VerdictChanges* out,
                                std::vector<NodeKey>* touched) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now_ns - it->second.since_ns < options_.confirm_ns) {
      ++it;
      continue;
    }
    ReportedGpu& gpu = gpus_[it->first];
    gpu = it->second;  // since: when it was first found slow
    out->gpus.push_back({true, gpu});
    touched->emplace_back(it->first.job_id, gpu.evidence.node);
    it = pending_.erase(it);
  }
}

void RootCauseVerdicts::ForgetJob(const std::string& job_id) {
  std::erase_if(gpus_, [&](const auto& kv) { return kv.first.job_id == job_id; });
  std::erase_if(pending_, [&](const auto& kv) { return kv.first.job_id == job_id; });
  std::erase_if(nodes_, [&](const auto& kv) { return kv.first.first == job_id; });
}

VerdictChanges RootCauseVerdicts::Tick(int64_t now_ns, const GpusOnNode& gpus_on_node) {
  VerdictChanges out;
  std::vector<NodeKey> touched;
  Confirm(now_ns, &out, &touched);
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    const ReportedGpu& gpu = it->second;
    if (gpu.clear_since_ns != 0 && now_ns - gpu.clear_since_ns >= options_.hold_ns) {
      out.gpus.push_back({false, gpu});
      touched.emplace_back(it->first.job_id, gpu.evidence.node);
      it = gpus_.erase(it);
    } else {
      ++it;
    }
  }
  JudgeNodes(touched, gpus_on_node, &out);
  return out;
}

std::vector<ProcessKey> RootCauseVerdicts::ReportedOn(const NodeKey& node) const {
  std::vector<ProcessKey> out;
  // gpus_ is ordered by job first: only that job's range is walked.
  for (auto it = gpus_.lower_bound(ProcessKey{node.first, "", 0, -1});
       it != gpus_.end() && it->first.job_id == node.first; ++it) {
    if (it->second.evidence.node == node.second) out.push_back(it->first);
  }
  return out;
}

void RootCauseVerdicts::JudgeNodes(const std::vector<NodeKey>& touched,
                                   const GpusOnNode& gpus_on_node, VerdictChanges* out) {
  for (const NodeKey& node : touched) {
    if (node.second.empty()) continue;  // the node is unknown: nothing to judge
    std::vector<ProcessKey> reported = ReportedOn(node);
    const int on_node = std::max(gpus_on_node(node.first, node.second), 1);
    const int n = static_cast<int>(reported.size());
    const bool slow = n >= options_.node_min_gpus && n >= options_.node_fraction * on_node;
    auto it = nodes_.find(node);
    if (slow && it == nodes_.end()) {
      nodes_[node] = reported;
      out->nodes.push_back({true, node.first, node.second, std::move(reported)});
    } else if (slow) {
      it->second = std::move(reported);
    } else if (it != nodes_.end()) {
      out->nodes.push_back({false, node.first, node.second, it->second});
      nodes_.erase(it);
    }
  }
}

}  // namespace ncclwatch::aggregator
