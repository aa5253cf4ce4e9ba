// The root-cause findings that page: which GPUs are reported slow themselves, and which nodes are
// reported slow because several of their GPUs are (docs/detection.md, "Stable verdicts").
//
// The own-time analysis (own_time.h) decides, collective by collective, whether a GPU is slow
// itself, with hysteresis on the size of its excess. Throttling comes and goes in bursts of a
// few seconds, and a window median dips below the clear level between them; a finding that ended
// and started again with every burst would page on-call each time. So a reported GPU stays
// reported until the analysis has found it not slow for `hold_ns` without a break; a new slow
// verdict within that time continues the same finding. The other way round, a GPU is reported
// only once the analysis has found it slow for `confirm_ns`, both on the aggregator's clock and on
// the job's own: a hiccup of the host (a garbage collection, a checkpoint write) or the first
// steps of a job, which lift a window median for a moment, are not a slow GPU.
//
// The job's clock is the GPU's: when the collectives of the communicator whose collective made the
// verdict slow started (OwnTimeAnalyzer::JobTime). Evidence moves only when a report arrives, so
// on the aggregator's clock alone a verdict that held for a quarter of a second of the job and
// happened to end in the next report stood for a whole flush interval and was reported. A run of
// slow verdicts ends only once a clear has lasted `break_ns` of the job's time: a GPU whose
// evidence flips with the phases of every step (an expert's dispatch, then its combine) is slow
// over the run. Where the collectives are not timed (no kernel timestamps) the aggregator's clock
// alone counts, and any clear ends the run.
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
  int64_t confirm_ns = 500'000'000;  // 0.5 s of the job found slow before a GPU is reported
  int64_t break_ns = 500'000'000;    // 0.5 s of the job found not slow ends a run before that
  // Found slow this long on the aggregator's clock is enough even if the job's clock of the
  // verdict's communicator stood still (that communicator went quiet or was destroyed); found
  // clear this long, a run not reported is forgotten.
  int64_t quiet_ns = 5'000'000'000;
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
  // How far the GPU of a process has come in a communicator, on its own clock (0: not known).
  using JobClock = std::function<int64_t(const ProcessKey& process, const CommKey& comm)>;

  explicit RootCauseVerdicts(RootCauseOptions options = {}) : options_(options) {}
  const RootCauseOptions& options() const { return options_; }

  // The analysis changed its verdict on these processes at `now_ns`.
  VerdictChanges Observe(const std::vector<SlowProcess>& changed, int64_t now_ns,
                         const GpusOnNode& gpus_on_node, const JobClock& job_clock = {});
  // Reports the GPUs found slow for the confirmation time; ends the findings whose GPU has been
  // found not slow for the hold time.
  VerdictChanges Tick(int64_t now_ns, const GpusOnNode& gpus_on_node,
                      const JobClock& job_clock = {});
  // Whether a GPU found slow waits for its confirmation.
  bool AnyPending() const { return !pending_.empty(); }

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

  // A GPU found slow and not reported yet: since when (on the aggregator's clock, in `gpu`, and
  // on its own in communicator `comm`: `first_at_ns`, 0 if not timed), and when its verdict last
  // went clear on its own clock (0: slow now; on the aggregator's in `gpu.clear_since_ns`).
  struct Pending {
    ReportedGpu gpu;
    CommKey comm;
    int64_t first_at_ns = 0;
    int64_t clear_at_ns = 0;
  };

  const RootCauseOptions options_;
  // Reports the pending GPUs found slow over `confirm_ns`; forgets those found clear for
  // `quiet_ns`.
  void Confirm(int64_t now_ns, const JobClock& job_clock, VerdictChanges* out,
               std::vector<NodeKey>* touched);
  // Whether a pending GPU, slow now, has been so for the confirmation time on both clocks.
  bool Ready(const ProcessKey& process, const Pending& p, int64_t now_ns,
             const JobClock& job_clock) const;
  // Reports pending GPU `p` and forgets it as pending.
  void Report(std::map<ProcessKey, Pending>::iterator p, VerdictChanges* out,
              std::vector<NodeKey>* touched);

  std::map<ProcessKey, ReportedGpu> gpus_;
  std::map<ProcessKey, Pending> pending_;             // found slow, not confirmed yet
  std::map<NodeKey, std::vector<ProcessKey>> nodes_;  // reported slow nodes -> their GPUs
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ROOTCAUSE_VERDICTS_H_
