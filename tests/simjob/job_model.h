// The closed-loop timing model of a Megatron-style training job (simjob --layout megatron).
//
// Every rank process builds the same JobModel from the same JobModelConfig and so computes the
// same schedule of the whole job without talking to the other ranks. The model runs the programs
// of megatron_layout.h through one GPU stream per rank, in program order, the way synchronous
// training propagates delay. For op i of rank r (times are absolute virtual ns, like timeline.h):
//
//   ready_i   = enq_{i-1} + host_overhead (+ the rank's stall before an iteration's first op)
//   enq_i     = max(ready_i, end_{i-1-host_ahead})     host enqueue; the host keeps at most
//                                                      host_ahead ops queued behind the oldest
//                                                      unfinished one
//   start_i   = max(max(end_{i-1}, ready_i) + c_i, enq_i)   the kernel starts: the rank ARRIVES
//   end_i     = max over the op's tasks of (max(start of every party) + transfer)
//
// The parties of a collective are all members of the communicator instance (matched by the
// per-(communicator, kind) sequence number); those of a p2p task are the sender's op and the
// receiver's op (matched per (communicator, sender, receiver) in order). Early arrivers wait
// inside their kernel; the last arriver has the shortest kernel. Delay crosses TP, PP and DP only
// through this rule. transfer = latency + bytes x BusFactor / bandwidth (timeline.h's BusFactor;
// NVLink within a node, the network across nodes, p2p by the two peers' nodes). The pairs of one
// group (an MoE all-to-all, an interleaved pipeline exchange) transfer side by side, each at the
// full bandwidth: the model does not share a NIC between them.
//
// c_i = nominal compute (megatron_layout.h; stage factor included) x warm-up factor (first
// warmup_iterations: 1 + warmup_extra x (W - k) / W x [0.5, 1.5) per (rank, iteration)) x fault
// factor at the compute's start (slow GPUs, throttling, drift) x (1 + compute_jitter x [-1, 1]) per
// (rank, op index), jitter by SplitMix64(seed, rank, index).
//
// Job-wide decisions for iteration k, the same for all ranks: it runs if k < max_iterations and
// (k < 2 or iteration k-2 ended job-wide before end_ns); every stall_every_ns (from t0) the next
// iteration decided after the job-wide end of iteration k-2 crossed a multiple of it starts with a
// stall: each rank's host pauses stall_ns x (1 +/- stall_spread) before enqueuing it; likewise
// every gc_every_ns one rank's host alone pauses gc_ns (garbage collection). (Iteration
// k-2 has always ended everywhere when a rank reaches iteration k: the DP and mp groups connect
// every rank every iteration.)
//
// Faults: a hung rank's host stops at its first op with enq >= hang_at_ns (that op is never
// enqueued; ops already enqueued still run). A killed rank's host stops at kill_at_ns; an op that
// would start at or after it never starts, and an op that contains the killed rank and would end
// after it never ends. Every op on the fabric-hang communicator whose transfer would start at or
// after fabric_hang_at_ns never ends. An op that never ends blocks its rank's stream: later ops
// never start, but the host still enqueues host_ahead of them (in any communicator). When nothing
// can progress any more, the model lists those queued ops and stops: the job hangs.
//
// The model is generated iteration by iteration (ranks never get more than about one iteration
// ahead of what the caller consumed), so memory stays bounded however long the job runs.
//
// Pure computation: no clocks, no threads, no I/O. Not thread-safe; one instance per thread.
#ifndef NCCLWATCH_TESTS_SIMJOB_JOB_MODEL_H_
#define NCCLWATCH_TESTS_SIMJOB_JOB_MODEL_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tests/simjob/megatron_layout.h"
#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {

struct SlowGpu {
  int rank = -1;
  double factor = 2.0;       // compute takes factor x as long
  int64_t at_ns = 0;         // from this absolute time on (compute starting at or after it)
  bool expert_only = false;  // only its mixture-of-experts expert compute (JobOp::expert_compute)
};

struct ThrottledGpu {
  int rank = -1;
  double factor = 2.0;
  int64_t on_ns = 2'000'000'000;  // slow for on_ns, then normal for off_ns, repeating
  int64_t off_ns = 2'000'000'000;
  int64_t at_ns = 0;  // the first on period starts here
};

// A GPU that loses speed steadily (a failing fan, a degrading HBM stack): compute takes
// 1 + per_s x (seconds since at_ns) as long.
struct DriftingGpu {
  int rank = -1;
  double per_s = 0.01;
  int64_t at_ns = 0;
};

struct JobModelConfig {
  int tp = 2, pp = 2, dp = 2;
  int gpus_per_node = 2;
  ProgramSpec program;
  uint64_t seed = 1;
  int64_t t0_ns = 0;
  int64_t end_ns = kNever;  // see "job-wide decisions" above
  int64_t max_iterations = kNever;
  double compute_jitter = 0.02;
  int warmup_iterations = 3;
  double warmup_extra = 1.0;
  int host_ahead = 4;
  int64_t host_overhead_ns = 10'000;
  double net_gbs = 25.0;
  double nvlink_gbs = 300.0;
  int64_t net_latency_ns = 20'000;
  int64_t nvlink_latency_ns = 10'000;
  int64_t stall_every_ns = 0;  // 0: no stalls
  int64_t stall_ns = 0;
  double stall_spread = 0.1;
  // Host pauses of one rank at a time (Python's garbage collector): the first iteration decided
  // after each gc_every_ns (from t0) starts with one rank's host pausing gc_ns, a different rank
  // each time (SplitMix64(seed, iteration)); 0: none.
  int64_t gc_every_ns = 0;
  int64_t gc_ns = 0;
  std::vector<SlowGpu> slow;
  std::vector<DriftingGpu> drifting;
  std::vector<ThrottledGpu> throttled;
  int degrade_node = -1;  // multi-node transfers touching it get net_gbs x degrade_factor
  double degrade_factor = 1.0;
  int64_t degrade_at_ns = 0;
  int hang_rank = -1;
  int64_t hang_at_ns = kNever;
  int kill_rank = -1;
  int64_t kill_at_ns = kNever;
  std::string fabric_hang_comm;  // a CommName; empty: none
  int64_t fabric_hang_at_ns = kNever;
  int64_t clock_skew_ns = 0;  // node n's GPU clock is off by (n even ? -1 : +1) x this
};

// How a rank's part of the job ended (valid once JobModel::Next returned null for it).
enum class RankFate {
  kRunning,      // not decided yet
  kCompleted,    // ran every iteration of the run
  kStuck,        // its GPU is stuck in an op that never ends
  kHostStopped,  // hang fault: its host stopped enqueuing
  kKilled,       // kill fault
};

class JobModel {
 public:
  // output_ranks: the ranks whose ops Next returns (nullopt: every rank; empty: none, to run the
  // model for its end only). Other ranks are simulated all the same but their ops are not kept.
  explicit JobModel(JobModelConfig config,
                    std::optional<std::vector<int>> output_ranks = std::nullopt);
  ~JobModel();

  const JobModelConfig& config() const { return config_; }
  const MegatronLayout& layout() const { return layout_; }
  int world_size() const { return layout_.world_size(); }

  // The next op of `rank` (an output rank) in program order, with every field final; null when
  // the rank has no more ops (see Fate). The pointer is valid until the next Next(rank).
  const JobOp* Next(int rank);
  // Runs the model until nothing can progress, or until it has finalized max_ops ops (returns
  // false then).
  bool RunToEnd(int64_t max_ops = kNever);

  RankFate Fate(int rank) const;
  bool finished() const { return finished_; }
  // Whether the job ended in a hang (some rank's part did not complete).
  bool hung() const;
  int64_t ops_finalized() const { return ops_finalized_; }
  int64_t last_end_ns() const { return last_end_ns_; }  // latest finite op end so far
  // Iterations that belong to the run, as far as decided (all of them once finished()).
  int64_t iterations_in_run() const;

  // Transfer time of one task once its last party arrived at `at_ns`. `rank` is the task's
  // issuer; for p2p the peer is task.peer in comm.
  int64_t TransferNs(CommRef comm, int rank, const JobTask& task, int64_t at_ns) const;
  double BandwidthGbs(CommRef comm, int rank, const JobTask& task, int64_t at_ns) const;
  // Offset of `node`'s GPU clock from virtual time, and the GPU timer of `rank` on `channel`.
  int64_t ClockOffsetNs(int node) const;
  uint64_t GpuTimerNs(int rank, int64_t virtual_ns, int channel) const;
  // The compute factor of slow and throttled GPUs for compute of `rank` starting at `at_ns`.
  // `expert`: the compute is expert compute (JobOp::expert_compute), which expert-only slow GPUs
  // slow too; other compute only the others do.
  double FaultFactor(int rank, int64_t at_ns, bool expert = false) const;

 private:
  struct Rank;
  struct Rendezvous;
  // Identifies a rendezvous: a collective by (communicator, kind, seq), a p2p pair by
  // (communicator, sender, receiver, seq).
  struct RvKey {
    uint64_t a = 0;
    int64_t b = 0;
    bool operator==(const RvKey&) const = default;
  };
  struct RvKeyHash {
    size_t operator()(const RvKey& k) const { return SplitMix64(k.a ^ SplitMix64(k.b)); }
  };
  struct Decision {
    bool in_run = false;
    bool stall = false;
    int gc_rank = -1;  // the rank whose host pauses gc_ns before the iteration
  };
  struct Summary {
    int finished = 0;
    int64_t max_end = 0;
  };

  // How a task's traffic travels: across nodes (the network) or not, and through the degraded
  // node or not.
  struct Route {
    bool multi_node = false;
    bool degraded = false;
  };
  Route RouteOf(CommRef comm, int rank, const JobTask& task) const;
  bool Pump();
  void Process(int r);
  bool StartIteration(Rank& rs);
  bool Decide(int64_t k, bool fallback, Decision* d);
  void AssignSeq(Rank& rs, JobOp& op);
  int64_t EnqueueTime(const Rank& rs, const JobOp& op) const;
  // Times (job_model_times.cc): the compute before `op` (its nominal compute_ns) starting at
  // start_ns; the warm-up factor and the stall of `rank` in `iteration`.
  int64_t ComputeNs(int rank, double warmup, const JobOp& op, int64_t start_ns) const;
  double WarmupFactor(int rank, int64_t iteration) const;
  int64_t StallNs(int rank, int64_t iteration) const;
  void Register(int r, int task);
  void Resolve(const Rendezvous& rv);
  void Finalize(Rank& rs, int64_t end_ns);
  void Emit(Rank& rs, const JobOp& op);
  void IterationDone(Rank& rs);
  void ListQueuedOps(Rank& rs);
  void Wake(int r);

  const JobModelConfig config_;
  const MegatronLayout layout_;
  CommRef fabric_comm_;
  bool has_fabric_hang_ = false;
  std::vector<bool> multi_node_;        // [comm id]: spans several nodes
  std::vector<bool> touches_degraded_;  // [comm id]: a member is on the degraded node
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unordered_map<RvKey, std::unique_ptr<Rendezvous>, RvKeyHash> rendezvous_;
  std::deque<int> worklist_;
  std::vector<int> horizon_waiters_;
  std::map<int64_t, std::vector<int>> decision_waiters_;  // by the iteration they need
  std::vector<Decision> decisions_;                       // [k]
  std::map<int64_t, Summary> summaries_;                  // recent iterations only
  int64_t horizon_ = 0;                                   // ranks may start iterations <= horizon_
  int64_t next_stall_ns_ = kNever;
  int64_t next_gc_ns_ = kNever;
  int64_t ops_finalized_ = 0;
  int64_t last_end_ns_ = 0;
  bool finished_ = false;
  JobOp current_;
};

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_JOB_MODEL_H_
