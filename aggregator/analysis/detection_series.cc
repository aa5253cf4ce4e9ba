#include "aggregator/analysis/detection_series.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace ncclwatch::aggregator {

void AppendDetectionSeries(const CommRegistry& registry, const Detectors& d,
                           const RootCauseVerdicts& verdicts, const HangOrigins& hang_origins,
                           const UnexplainedView& unexplained, int64_t now_ns,
                           std::vector<SeriesPoint>* out) {
  const int64_t now_ms = now_ns / 1'000'000;
  // Each reported GPU's rank in its evidence, and each rank paged with no origin found.
  std::set<std::pair<CommKey, int>> root_ranks;
  for (const auto& [p, gpu] : verdicts.gpus()) {
    root_ranks.emplace(gpu.evidence.comm, gpu.evidence.rank);
  }
  // The ranks of a node paged with no origin found page too (the alert is per rank, and says the
  // node), as a communicator without own times does.
  const auto& unexplained_ranks = unexplained.ranks;
  const auto& unexplained_nodes = unexplained.nodes;
  root_ranks.insert(unexplained_ranks.begin(), unexplained_ranks.end());
  std::map<CommKey, const HangView*> hung;  // the origins of hangs
  for (const auto& [comm, group] : hang_origins.origins()) hung[comm] = &group.origin;
  for (const auto& [key, entry] : registry.comms()) {
    const CommWho& who = entry.who;
    const LabelPairs comm_labels = CommRegistry::CommLabels(key, who);
    auto h = hung.find(key);
    out->push_back({"ncclwatch_hang", comm_labels, h != hung.end() ? 1.0 : 0.0, now_ms});
    // Nodes and ranks are walked only where something is flagged: most communicators, most
    // seconds, have nothing to export beyond the three series above.
    std::set<std::string> nodes;
    auto unexplained_node = unexplained_nodes.lower_bound({key, std::string()});
    const bool any_unexplained_node =
        unexplained_node != unexplained_nodes.end() && unexplained_node->first == key;
    if (entry.own_times ? verdicts.AnyNodeSlow(key.job_id) || any_unexplained_node
                        : d.slow_nodes.AnySlow(key)) {
      for (const auto& [rank, r] : who.ranks) {
        if (!r.node.empty()) nodes.insert(r.node);
      }
    }
    for (const auto& node : nodes) {
      if (!(entry.own_times
                ? verdicts.IsNodeSlow(key.job_id, node) || unexplained_nodes.count({key, node}) > 0
                : d.slow_nodes.IsSlow(key, node))) {
        continue;
      }
      LabelPairs node_labels = comm_labels;
      node_labels.emplace_back("node", node);
      out->push_back({"ncclwatch_node_straggler", std::move(node_labels), 1.0, now_ms});
    }
    LabelPairs class_labels = comm_labels;
    class_labels.emplace_back("class", d.degraded.IsHybrid(key) ? "hybrid" : "nvlink");
    out->push_back({"ncclwatch_comm_degraded", std::move(class_labels),
                    d.degraded.IsDegraded(key) ? 1.0 : 0.0, now_ms});
    out->push_back({"ncclwatch_hang_age_seconds", comm_labels,
                    h != hung.end() ? (now_ns - h->second->enqueued_ns) * 1e-9 : 0.0, now_ms});
    // Per-rank series for the ranks that report, and for the missing ranks a hang names (never
    // one per rank a communicator merely claims: detect/rank_set.h).
    const bool any_silent = d.hangs.AnySilent(key);
    for (const auto& [r, rank_who] : who.ranks) {
      if (h == hung.end() && !any_silent) break;
      const bool missing = h != hung.end() && d.hangs.Missing(key, r);
      const bool silent = d.hangs.IsSilent(key, r);
      if (!missing && !silent) continue;
      LabelPairs labels = CommRegistry::RankLabels(comm_labels, who, r);
      if (missing) out->push_back({"ncclwatch_rank_missing", labels, 1.0, now_ms});
      if (silent) out->push_back({"ncclwatch_rank_silent", std::move(labels), 1.0, now_ms});
    }
    if (h != hung.end()) {
      for (int r : h->second->missing) {
        if (who.ranks.count(r)) continue;
        out->push_back(
            {"ncclwatch_rank_missing", CommRegistry::RankLabels(comm_labels, who, r), 1.0, now_ms});
      }
    }
    // Every rank's score where a reported GPU's evidence is in this communicator (it is flagged
    // whatever its lateness); elsewhere only the ranks flagged or late.
    auto root = root_ranks.lower_bound({key, -1});
    const bool has_root = root != root_ranks.end() && root->first == key;
    for (const RankScore& score :
         entry.own_times&& has_root ? d.stragglers.Scores(key) : d.stragglers.Notable(key)) {
      if (score.rank >= who.nranks) continue;
      const bool flagged =
          entry.own_times ? root_ranks.count({key, score.rank}) > 0 : score.flagged;
      const bool late = score.lateness_ns >= d.stragglers.options().threshold_ns;
      if (!flagged && !late) continue;
      LabelPairs labels = CommRegistry::RankLabels(comm_labels, who, score.rank);
      if (flagged) out->push_back({"ncclwatch_straggler", labels, 1.0, now_ms});
      if (unexplained_ranks.count({key, score.rank}) > 0) {
        out->push_back({"ncclwatch_origin_not_found", labels, 1.0, now_ms});
      }
      out->push_back(
          {"ncclwatch_rank_lateness_seconds", std::move(labels), score.lateness_ns * 1e-9, now_ms});
    }
  }
  for (const SuspectView& s : d.degraded.Suspects()) {
    out->push_back(
        {"ncclwatch_node_network_suspect", {{"job_id", s.job_id}, {"node", s.node}}, 1.0, now_ms});
  }
  // A job some of whose ranks never reported (the coverage finding): how many, in its largest
  // incomplete communicator (the world's count, when it has one).
  for (const auto& [job_id, gap] : d.coverage.gaps()) {
    int unreported = 0;
    for (const CommCoverage& c : gap.comms) unreported = std::max(unreported, c.unreported_count);
    out->push_back({"ncclwatch_job_ranks_unreported",
                    {{"job_id", job_id}},
                    static_cast<double>(unreported),
                    now_ms});
  }
  for (const SilentNodeView& n : d.silent_nodes.Silent()) {
    out->push_back(
        {"ncclwatch_node_silent", {{"job_id", n.job_id}, {"node", n.node}}, 1.0, now_ms});
  }
}

}  // namespace ncclwatch::aggregator
