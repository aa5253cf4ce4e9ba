#include "aggregator/detect/silent_nodes.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace ncclwatch::aggregator {

SilentNodeDetector::Process* SilentNodeDetector::Add(Job& job, const std::string& name,
                                                     const std::string& node, int ranks,
                                                     int silent) {
  const auto it = job.processes.try_emplace(name, Process{name, node}).first;
  Process& p = it->second;
  const bool was_seen = p.ranks > 0;
  const bool was_silent = p.silent_ranks > 0;
  p.ranks += ranks;
  p.silent_ranks += silent;
  const bool seen = p.ranks > 0;
  const bool now_silent = p.silent_ranks > 0;
  Node& n = job.nodes[p.node];
  n.processes += static_cast<int>(seen) - static_cast<int>(was_seen);
  n.silent += static_cast<int>(now_silent) - static_cast<int>(was_silent);
  job.silent_processes += static_cast<int>(now_silent) - static_cast<int>(was_silent);
  if (seen) return &p;
  job.processes.erase(it);
  return nullptr;
}

void SilentNodeDetector::Judge(const std::string& job_id, Job& job, const std::string& node,
                               int64_t now_ns, std::vector<SilentNodeChange>* changes) {
  auto it = job.nodes.find(node);
  if (it == job.nodes.end()) return;
  Node& n = it->second;
  const bool all_silent = n.processes >= options_.min_processes && n.silent == n.processes;
  // Processes elsewhere that still report: the node, not the whole job, went quiet.
  const bool others_report = static_cast<int>(job.processes.size()) - job.silent_processes > 0;
  const auto view = [&] { return SilentNodeView{job_id, node, n.processes, n.since_ns}; };
  if (n.flagged && !all_silent) {
    n.flagged = false;
    if (changes != nullptr) changes->push_back({false, view()});
  } else if (!n.flagged && all_silent && others_report) {
    n.flagged = true;
    n.since_ns = now_ns;
    if (changes != nullptr) changes->push_back({true, view()});
  }
  if (n.processes == 0 && !n.flagged) job.nodes.erase(it);
}

std::vector<SilentNodeChange> SilentNodeDetector::Member(const CommKey& comm, int rank,
                                                         const std::string& node,
                                                         const std::string& process,
                                                         int64_t now_ns) {
  std::vector<SilentNodeChange> changes;
  if (auto c = ranks_.find(comm); c != ranks_.end()) {
    if (auto it = c->second.find(rank); it != c->second.end()) {
      const Process* p = it->second.process;
      if (p->name == process && p->node == node) return changes;
      Job& job = jobs_.at(comm.job_id);
      const std::string old_node = p->node;
      Add(job, p->name, old_node, -1, it->second.silent ? -1 : 0);
      c->second.erase(it);
      if (c->second.empty()) ranks_.erase(c);
      Judge(comm.job_id, job, old_node, now_ns, &changes);
      DropIfEmpty(comm.job_id);
    }
  }
  if (node.empty()) return changes;
  Job& job = jobs_[comm.job_id];
  Process* p = Add(job, process, node, 1, 0);
  ranks_[comm][rank] = Rank{p, false};
  Judge(comm.job_id, job, p->node, now_ns, &changes);
  return changes;
}

std::vector<SilentNodeChange> SilentNodeDetector::SetSilent(const CommKey& comm, int rank,
                                                            bool silent, int64_t now_ns) {
  std::vector<SilentNodeChange> changes;
  auto c = ranks_.find(comm);
  if (c == ranks_.end()) return changes;
  auto it = c->second.find(rank);
  if (it == c->second.end() || it->second.silent == silent) return changes;
  it->second.silent = silent;
  Job& job = jobs_[comm.job_id];
  Process* p = it->second.process;
  Add(job, p->name, p->node, 0, silent ? 1 : -1);
  Judge(comm.job_id, job, p->node, now_ns, &changes);
  return changes;
}

void SilentNodeDetector::Forget(const CommKey& comm) {
  auto c = ranks_.find(comm);
  if (c == ranks_.end()) return;
  // Every rank kept is counted in its job (Member): the job is there.
  auto j = jobs_.find(comm.job_id);
  std::set<std::string> nodes;
  for (const auto& [rank, r] : c->second) {
    nodes.insert(r.process->node);
    const std::string name = r.process->name;
    Add(j->second, name, r.process->node, -1, r.silent ? -1 : 0);
  }
  ranks_.erase(c);
  for (const auto& node : nodes) Judge(comm.job_id, j->second, node, 0, nullptr);
  DropIfEmpty(comm.job_id);
}

void SilentNodeDetector::DropIfEmpty(const std::string& job_id) {
  auto j = jobs_.find(job_id);
  if (j != jobs_.end() && j->second.processes.empty() && j->second.nodes.empty()) jobs_.erase(j);
}

std::vector<SilentNodeView> SilentNodeDetector::Silent() const {
  std::vector<SilentNodeView> out;
  for (const auto& [job_id, job] : jobs_) {
    for (const auto& [node, n] : job.nodes) {
      if (n.flagged) out.push_back({job_id, node, n.processes, n.since_ns});
    }
  }
  std::sort(out.begin(), out.end(), [](const SilentNodeView& a, const SilentNodeView& b) {
    return std::tie(a.job_id, a.node) < std::tie(b.job_id, b.node);
  });
  return out;
}

bool SilentNodeDetector::IsSilent(const std::string& job_id, const std::string& node) const {
  auto j = jobs_.find(job_id);
  if (j == jobs_.end()) return false;
  auto n = j->second.nodes.find(node);
  return n != j->second.nodes.end() && n->second.flagged;
}

}  // namespace ncclwatch::aggregator
