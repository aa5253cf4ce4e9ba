// The root-cause findings that page: which GPUs are reported slow themselves, and which nodes are
// reported slow because several of their GPUs are (docs/detection.md, "Stable verdicts").
//
// The own-time analysis (own_time.h) decides, collective by collective, whether a GPU is slow
// itself, with hysteresis on the size of its excess. Throttling comes and goes in bursts of a
// few seconds, and a window median dips below the clear level between them; a finding that ended
// and started again with every burst would page on-call each time. So a reported GPU stays
// reported until the analysis has found it not slow for `hold_ns` without a break; a new slow
// verdict within that time continues the same finding. The other way round, a GPU is reported
// only once the analysis has found it slow for `confirm_ns` without a break: a hiccup of the
// host (a garbage collection, a checkpoint write) that lifts a window median for a moment is not
// a slow GPU.
//
// A node is reported slow when at least `node_min_gpus` of its GPUs in the job, and at least
// `node_fraction` of all its GPUs the job has, are reported: a node is never judged from one GPU,
// nor from a communicator that has one rank on it.
//
// Plain structs; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_ROOTCAUSE_VERDICTS_H_
#define NCCLWATCH_AGGREGATOR_ROOTCAUSE_VERDICTS_H_

#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "aggregator/rootcause/own_time.h"
#include "aggregator/rootcause/process_index.h"

namespace ncclwatch::aggregator {

struct RootCauseOptions {
  int64_t confirm_ns = 500'000'000;  // 0.5 s found slow before a GPU is reported
  int64_t hold_ns = 30'000'000'000;  // 30 s found not slow before a finding ends
  int node_min_gpus = 2;
  double node_fraction = 0.5;
};

// A reported GPU: the evidence it was reported with (kept, so that what the finding names does
// not move while it lasts) and when the analysis last found it not slow (0: slow now).
struct ReportedGpu {
  SlowProcess evidence;
  int64_t since_ns = 0;
  int64_t clear_since_ns = 0;
};

struct GpuChange {
  bool start = false;
  ReportedGpu gpu;
};

struct NodeChange {
  bool start = false;
  std::string job_id;
  std::string node;
  std::vector<ProcessKey> gpus;  // its reported GPUs (at the start; at the end, the last ones)
};

struct VerdictChanges {
  std::vector<GpuChange> gpus;
  std::vector<NodeChange> nodes;
  bool empty() const { return gpus.empty() && nodes.empty(); }
};

class RootCauseVerdicts {
 public:
  // How many GPUs job `job_id` has on `node` (every GPU known to the analysis).
  using GpusOnNode = std::function<int(const std::string& job_id, const std::string& node)>;

  explicit RootCauseVerdicts(RootCauseOptions options = {}) : options_(options) {}
  const RootCauseOptions& options() const { return options_; }

  // The analysis changed its verdict on these processes at `now_ns`.
  VerdictChanges Observe(const std::vector<SlowProcess>& changed, int64_t now_ns,
                         const GpusOnNode& gpus_on_node);
  // Reports the GPUs found slow for the confirmation time; ends the findings whose GPU has been
  // found not slow for the hold time.
  VerdictChanges Tick(int64_t now_ns, const GpusOnNode& gpus_on_node);

  // Forgets every finding and pending verdict of `job_id` at once, without events (the job ended;
  // its findings were ended with it).
  void ForgetJob(const std::string& job_id);

  const std::map<ProcessKey, ReportedGpu>& gpus() const { return gpus_; }
  bool IsReported(const ProcessKey& p) const { return gpus_.count(p) > 0; }
  bool IsNodeSlow(const std::string& job_id, const std::string& node) const {
    return nodes_.count({job_id, node}) > 0;
  }
  // Whether any GPU of `job_id` is reported slow itself.
  bool AnyGpu(const std::string& job_id) const {
    auto it = gpus_.lower_bound(ProcessKey{job_id, std::string(), 0, INT_MIN});
    return it != gpus_.end() && it->first.job_id == job_id;
  }
  // Whether any node of `job_id` is reported slow.
  bool AnyNodeSlow(const std::string& job_id) const {
    auto it = nodes_.lower_bound({job_id, std::string()});
    return it != nodes_.end() && it->first.first == job_id;
  }

 private:
  using NodeKey = std::pair<std::string, std::string>;  // (job, node)
  // Re-judges the nodes of `touched` after GPU findings changed.
  void JudgeNodes(const std::vector<NodeKey>& touched, const GpusOnNode& gpus_on_node,
                  VerdictChanges* out);
  std::vector<ProcessKey> ReportedOn(const NodeKey& node) const;

  const RootCauseOptions options_;
  // Reports the pending GPUs found slow since `confirm_ns` before `now_ns`.
  void Confirm(int64_t now_ns, VerdictChanges* out, std::vector<NodeKey>* touched);

  std::map<ProcessKey, ReportedGpu> gpus_;
  std::map<ProcessKey, ReportedGpu> pending_;         // found slow, not confirmed yet
  std::map<NodeKey, std::vector<ProcessKey>> nodes_;  // reported slow nodes -> their GPUs
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ROOTCAUSE_VERDICTS_H_
