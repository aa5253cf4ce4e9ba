// The reports a whole Megatron-style job's plugins would send, computed instead of measured: the
// closed-loop job model of simjob (tests/simjob/job_model.h) runs every rank of the job, and for
// each flush interval this turns the operations each rank finished into the RankReports its
// plugin would have built (one per communicator the rank belongs to, as plugin/compactor.cc
// compacts them): Inspector statistics per (operation, size bucket[, peer]), the sampled
// collectives with their GPU start, duration and own time, the operations still in flight, a
// clock pair. No NCCL, no plugin, no process per rank: one core drives thousands of ranks.
//
// Sampling. The model's operations are the *sampled* ones: a rank of a real job issues `stride`
// operations for each one the model runs (the plugin's NCCLWATCH_SAMPLE_STRIDE after its cap), so
// a collective's reported seqNumber is stride x the model's sequence number, and the statistics
// count `stride` operations per model operation. Every rank agrees, as every plugin does, so the
// aggregator joins the ranks' samples on (communicator, operation, seq) exactly as in a real job.
//
// Thread safety: not thread-safe; one owner drives it interval by interval.
#ifndef NCCLWATCH_TESTS_LOADGEN_JOB_REPORTS_H_
#define NCCLWATCH_TESTS_LOADGEN_JOB_REPORTS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ncclwatch/v1/report.pb.h"
#include "tests/simjob/job_model.h"

namespace ncclwatch::loadgen {

// The shape of the scale benchmark's job (scripts/bench-scale, ncclwatch-loadgen's flags): TP x PP
// x DP ranks, 8 GPUs a node, 1F1B over `microbatches`, one layer a stage whose forward takes
// `layer_ms` (a step of about 1.6 s with the defaults).
struct ScaleJob {
  int tp = 8, pp = 8, dp = 16;
  int gpus_per_node = 8;
  int microbatches = 4;
  double layer_ms = 40;
};

// simjob's model of that job from `t0_ns` to `end_ns`: an optimizer step of two layers' forward,
// two warm-up iterations, GPU clocks up to 20 ms apart. Faults are the caller's to add.
simjob::JobModelConfig ScaleJobModel(const ScaleJob& job, uint64_t seed, int64_t t0_ns,
                                     int64_t end_ns);

struct JobReportsOptions {
  std::string job_id = "loadgen";
  // Real operations per model operation (the plugin's effective sample stride).
  int stride = 8;
  int channels = 4;
  // The in-flight operations listed per report, oldest first (NCCLWATCH_MAX_IN_FLIGHT).
  int max_in_flight = 8;
};

class JobReports {
 public:
  JobReports(simjob::JobModelConfig model, JobReportsOptions options);
  ~JobReports();

  const simjob::MegatronLayout& layout() const { return model_.layout(); }
  int nodes() const { return model_.layout().nodes(); }
  // "loadgen-node-<n>", the node name every report of node n carries (as its agent stamps it).
  static std::string NodeName(int node);

  // Advances the job to `end_ns` (the model's clock: CLOCK_REALTIME ns) and appends to `out` the
  // reports of node `node`'s ranks for the interval ending there: one per communicator of each
  // rank. Call for every node with the same `end_ns` before moving on to the next interval;
  // intervals must not overlap.
  void NodeReports(int node, int64_t end_ns, std::vector<ncclwatch::v1::RankReport>* out);

  // Model operations finalised so far (the generator's own work).
  int64_t ops() const { return ops_; }

 private:
  struct RankState;
  struct CommAcc;
  void Account(RankState& rs, const simjob::JobOp& op);
  void FillReport(RankState& rs, int comm_index, int64_t start_ns, int64_t end_ns,
                  ncclwatch::v1::RankReport* report);

  simjob::JobModel model_;
  const JobReportsOptions options_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  std::vector<std::string> comm_names_;  // [comm id]
  std::vector<uint64_t> comm_hashes_;    // [comm id]
  std::vector<int> comm_nodes_;          // [comm id]: nodes spanned
  int64_t ops_ = 0;
};

}  // namespace ncclwatch::loadgen

#endif  // NCCLWATCH_TESTS_LOADGEN_JOB_REPORTS_H_
