#include "aggregator/rootcause/verdicts.h"

#include <algorithm>
#include <iterator>

namespace ncclwatch::aggregator {

VerdictChanges RootCauseVerdicts::Observe(const std::vector<SlowProcess>& changed, int64_t now_ns,
                                          const GpusOnNode& gpus_on_node,
                                          const JobClock& job_clock) {
  VerdictChanges out;
  std::vector<NodeKey> touched;
  for (const SlowProcess& s : changed) {
    auto it = gpus_.find(s.process);
    if (it != gpus_.end()) {
      if (s.slow) {
        it->second.clear_since_ns = 0;  // slow again within the hold: the same finding
      } else if (it->second.clear_since_ns == 0) {
        it->second.clear_since_ns = now_ns;
      }
      continue;
    }
    // When it changed on the GPU's clock: the start of the collective that changed it (0: not
    // timed).
    const int64_t at_ns = job_clock ? s.at_ns : 0;
    auto p = pending_.find(s.process);
    if (s.slow) {
      if (p == pending_.end()) {
        p = pending_.emplace(s.process, Pending{ReportedGpu{s, now_ns, 0}, s.at_comm, at_ns, 0})
                .first;
      } else if (p->second.clear_at_ns != 0) {
        // Slow again: the run goes on unless the clear lasted.
        if (at_ns <= 0 || p->second.first_at_ns <= 0 ||
            at_ns - p->second.clear_at_ns >= options_.break_ns) {
          p->second = Pending{ReportedGpu{s, now_ns, 0}, s.at_comm, at_ns, 0};
        } else {
          p->second.clear_at_ns = 0;
          p->second.gpu.clear_since_ns = 0;
        }
      }
      // Slow now: reported at once if the run has lasted (a verdict that flips with the phases of
      // a step may be clear at every tick).
      if (Ready(p->first, p->second, now_ns, job_clock)) Report(p, &out, &touched);
    } else if (p != pending_.end()) {
      if (at_ns <= 0 || p->second.first_at_ns <= 0) {
        pending_.erase(p);  // not timed: any clear ends the run
      } else if (p->second.clear_at_ns == 0) {
        p->second.clear_at_ns = at_ns;
        p->second.gpu.clear_since_ns = now_ns;
      }
    }
  }
  JudgeNodes(touched, gpus_on_node, &out);
  return out;
}

bool RootCauseVerdicts::Ready(const ProcessKey& process, const Pending& p, int64_t now_ns,
                              const JobClock& job_clock) const {
  if (p.clear_at_ns != 0 || now_ns - p.gpu.since_ns < options_.confirm_ns) return false;
  if (p.first_at_ns <= 0 || !job_clock || now_ns - p.gpu.since_ns >= options_.quiet_ns) {
    return true;
  }
  // Looked up only for a run slow for the confirmation time on the aggregator's clock: few.
  return job_clock(process, p.comm) - p.first_at_ns >= options_.confirm_ns;
}

void RootCauseVerdicts::Report(std::map<ProcessKey, Pending>::iterator p, VerdictChanges* out,
                               std::vector<NodeKey>* touched) {
  ReportedGpu& gpu = gpus_[p->first];
  gpu = p->second.gpu;  // since: when it was first found slow
  out->gpus.push_back({true, gpu});
  touched->emplace_back(p->first.job_id, gpu.evidence.node);
  pending_.erase(p);
}

void RootCauseVerdicts::Confirm(int64_t now_ns, const JobClock& job_clock, VerdictChanges* out,
                                std::vector<NodeKey>* touched) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const Pending& p = it->second;
    if (p.clear_at_ns != 0) {
      // A run found clear for `quiet_ns` is over, whether or not that was `break_ns` of the job:
      // a slow verdict after a clear of `break_ns` starts a new run anyway (Observe), so only the
      // memory is at stake, and no job clock is read for it.
      it = now_ns - p.gpu.clear_since_ns >= options_.quiet_ns ? pending_.erase(it) : std::next(it);
    } else if (Ready(it->first, p, now_ns, job_clock)) {
      Report(it++, out, touched);
    } else {
      ++it;
    }
  }
}

void RootCauseVerdicts::ForgetJob(const std::string& job_id) {
  std::erase_if(gpus_, [&](const auto& kv) { return kv.first.job_id == job_id; });
  std::erase_if(pending_, [&](const auto& kv) { return kv.first.job_id == job_id; });
  std::erase_if(nodes_, [&](const auto& kv) { return kv.first.first == job_id; });
}

VerdictChanges RootCauseVerdicts::Tick(int64_t now_ns, const GpusOnNode& gpus_on_node,
                                       const JobClock& job_clock) {
  VerdictChanges out;
  std::vector<NodeKey> touched;
  Confirm(now_ns, job_clock, &out, &touched);
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
