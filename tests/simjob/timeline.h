// The deterministic time model of simjob, the simulated NCCL host.
//
// Every rank process of a simulated job builds its own Timeline from the same TimelineConfig and
// therefore computes the same global schedule, so ranks need no IPC to agree on when each
// collective starts and ends. The model, per global step k (which runs workload[k % size]):
//
//   a_r(k) = prev_end_r + gap_r(k)           arrival of rank r (host enqueue = kernel start)
//   E_g(k) = max_{r in g} a_r(k) + T_g(k)    completion of the op on communicator instance g
//   prev_end_r = E_{g(r)}(k), and prev_end_r = t0 before step 0
//
// gap_r(k) is the base gap + a jitter drawn from SplitMix64(seed, r, k) + the slow-rank extra.
// T is the bus traffic divided by the communicator's bandwidth (nccl-tests conventions, see
// BusFactor). A rank's GPU kernel runs from its own arrival to E, so the slowest-arriving rank has
// the shortest kernel: that is the signature the detector has to find.
//
// Faults: a hung rank never arrives at a step whose arrival would be at or after the fault time; a
// killed rank additionally takes down the step it is in when it dies. A step that a rank never
// arrives at never completes (E = kNever), and nobody arrives at any step after one that never
// completed.
//
// Pure computation: no clocks, no threads, no I/O. Not thread-safe; one instance per thread.
#ifndef NCCLWATCH_TESTS_SIMJOB_TIMELINE_H_
#define NCCLWATCH_TESTS_SIMJOB_TIMELINE_H_

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

namespace ncclwatch::simjob {

// "Never happens": a rank that does not arrive, or an op that does not complete.
inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// GPU timer skew between consecutive channels of one kernel (channel c is c * this later).
inline constexpr int64_t kChannelSkewNs = 1000;

enum class OpKind { kAllReduce, kAllGather, kReduceScatter, kSendRecv };

// Which family of communicators a step runs on. A family partitions the world's ranks into
// instances that run the step concurrently:
//   kWorld  one instance, every rank;
//   kNode   one per node (tensor parallelism: NVLink only);
//   kDp     3D layout: one per (pipeline stage, local rank), across the nodes of that stage;
//   kPp     3D layout: one per (data-parallel replica, local rank), across its stage nodes;
//   kSplit  world steps after the split time: two halves by local rank parity (ncclCommSplit).
// In the 3D layout node n holds pipeline stage n % pp_stages of data-parallel replica
// n / pp_stages, so a DP and a PP communicator share exactly one node.
enum class CommScope { kWorld, kNode, kDp, kPp, kSplit };
inline constexpr int kScopes = 5;

// One step of the per-iteration workload.
struct StepSpec {
  OpKind op;
  CommScope scope;
  // The nccl-tests "size" of the operation, in bytes: AllReduce: the buffer; AllGather: the total
  // output (n * per-rank input); ReduceScatter: the total input (n * per-rank output); SendRecv:
  // bytes each rank sends to its ring successor.
  uint64_t bytes;
};

// AllReduce 32 MiB, AllGather 8 MiB, ReduceScatter 8 MiB, SendRecv 1 MiB on the world communicator;
// with_node_comm appends an AllReduce 16 MiB on each node's communicator.
std::vector<StepSpec> DefaultWorkload(bool with_node_comm);
// One 3D-parallel iteration: tensor-parallel AllReduce 16 MiB (kNode), pipeline Send/Recv 1 MiB
// and tied-embedding AllReduce 2 MiB (kPp), data-parallel ReduceScatter + AllGather 8 MiB (kDp).
std::vector<StepSpec> ThreeDWorkload();
// Multiplies every step's size by `scale` (at least 4 KiB per step).
void ScaleWorkload(double scale, std::vector<StepSpec>* workload);

// NCCL's function name ("AllReduce", ...); "SendRecv" for the P2P exchange.
const char* OpName(OpKind op);

// Bus traffic per byte of StepSpec::bytes on an n-rank communicator (nccl-tests PERFORMANCE.md):
// AllReduce 2(n-1)/n, AllGather and ReduceScatter (n-1)/n, SendRecv 1.
double BusFactor(OpKind op, int nranks);

// Profiler ABI v7 KernelPhase boundaries of one kernel, in the same time domain as its arguments.
// The initial sync lasts from the kernel's start until the last party of the op has arrived (the
// channel waits for its peers), clamped into [start, stop]; the final sync is the last
// kFinalSyncNs before the stop (at most half of the time after the initial sync); compute lies in
// between. With stop == kNever the op never completes: both boundaries are kNever.
inline constexpr int64_t kFinalSyncNs = 2000;
struct KernelPhaseBounds {
  int64_t sync_end = kNever;    // initial sync -> compute
  int64_t final_sync = kNever;  // compute -> final sync
};
KernelPhaseBounds PhaseBounds(int64_t start, int64_t all_arrived, int64_t stop);

// SplitMix64 finalizer: a cheap, well-mixed 64-bit hash step.
uint64_t SplitMix64(uint64_t x);

// The commHash simjob gives communicator `comm_name` of job `job_id`:
// SplitMix64(FNV-1a-64(job_id + "/" + comm_name)). All ranks agree without talking.
uint64_t CommHash(std::string_view job_id, std::string_view comm_name);

enum class FaultKind { kNone, kHang, kKill };

struct RankFault {
  FaultKind kind = FaultKind::kNone;
  int rank = -1;
  int64_t at_ns = kNever;  // absolute virtual time of the fault
};

struct TimelineConfig {
  int nodes = 2;
  int ranks_per_node = 2;  // ranks are node-major: rank = node * ranks_per_node + local
  uint64_t seed = 1;
  int64_t t0_ns = 0;  // E(-1): job start
  int64_t gap_ns = 5'000'000;
  int64_t jitter_ns = 200'000;  // jitter is uniform in [-jitter_ns, +jitter_ns]
  std::vector<int> slow_ranks;  // each gets slow_ns extra before every step
  int64_t slow_ns = 0;
  // slow_ns only before kNode steps: a node slow before its own (NVLink) collectives.
  bool slow_before_node = false;
  double net_gbs = 25.0;      // communicators spanning several nodes
  double nvlink_gbs = 300.0;  // single-node communicators
  int degrade_node = -1;      // multi-node communicators containing it get net_gbs * factor
  double degrade_factor = 1.0;
  int64_t degrade_at_ns = 0;     // absolute virtual time from which the NIC is degraded
  int64_t clock_skew_ns = 0;     // node n's GPU clock is off by (n even ? -1 : +1) * this
  int pp_stages = 0;             // 3D layout (kDp/kPp steps): pipeline stages; 0 without
  int64_t split_at_ns = kNever;  // world steps whose first arrival is at or after it use kSplit
  RankFault fault;
  std::vector<StepSpec> workload = DefaultWorkload(false);
  // The run: steps [0, max_steps) whose earliest arrival is before end_ns (see StepTimes::in_run).
  int64_t end_ns = kNever;
  int64_t max_steps = kNever;
};

// Times of one global step for every rank, in virtual (CLOCK_REALTIME-like) ns.
struct StepTimes {
  int64_t index = -1;
  const StepSpec* spec = nullptr;
  CommScope scope = CommScope::kWorld;  // spec->scope, or kSplit for world steps after the split
  std::vector<int64_t> arrival;         // per world rank; kNever if it never arrives
  std::vector<int64_t> end;             // per world rank: completion of its op; kNever if never
  // Per world rank: when the last member of its communicator instance arrived, so that the op
  // moves data from then on; kNever if some member never arrives.
  std::vector<int64_t> all_arrived;
  int64_t first_arrival = kNever;
  // Whether the step belongs to the run. The same for every rank, so all ranks execute the same
  // prefix of steps; once false it stays false.
  bool in_run = false;
};

class Timeline {
 public:
  explicit Timeline(TimelineConfig config);

  const TimelineConfig& config() const { return config_; }
  int world_size() const { return config_.nodes * config_.ranks_per_node; }
  int NodeOf(int rank) const { return rank / config_.ranks_per_node; }

  // Computes the next step (0, 1, 2, ...). The reference is valid until the next call.
  const StepTimes& Advance();

  // Base gap + jitter + slow extra of `rank` before `step`, never negative.
  int64_t GapNs(int rank, int64_t step) const;
  // Communicator instances of a family, the instance `rank` belongs to, its members (ascending
  // world ranks; a member's index is its rank in the communicator) and the nodes it spans.
  int Instances(CommScope scope) const;
  int InstanceOf(CommScope scope, int rank) const;
  const std::vector<int>& Members(CommScope scope, int instance) const;
  int NodesSpanned(CommScope scope, int instance) const;

  // Bandwidth of communicator instance `instance` of `scope` for a step starting at `at_ns`:
  // NVLink within a node; the network across nodes, degraded from degrade_at_ns on if the
  // instance spans the degraded node.
  double BandwidthGbs(CommScope scope, int instance, int64_t at_ns) const;
  // The same for the instance that contains the degraded node (instance 0 if there is none).
  double BandwidthGbs(CommScope scope, int64_t at_ns = kNever) const;
  // T: how long the op runs on `instance` once its last rank has arrived (at least 1 ns).
  int64_t TransferNs(const StepSpec& spec, CommScope scope, int instance, int64_t at_ns) const;
  int64_t TransferNs(const StepSpec& spec, int64_t at_ns = kNever) const;
  // Offset of `node`'s GPU clock from virtual time.
  int64_t ClockOffsetNs(int node) const;
  // The %globaltimer value `rank`'s GPU shows on `channel` at virtual time `virtual_ns`.
  uint64_t GpuTimerNs(int rank, int64_t virtual_ns, int channel) const;

 private:
  // Completion of the op of one communicator instance given its members' arrivals; sets their
  // all_arrived when every member arrives.
  int64_t GroupEnd(int instance, const std::vector<int>& members);
  // The instance of `scope` that contains the degraded node, or 0.
  int DegradedInstance(CommScope scope) const;

  TimelineConfig config_;
  std::vector<std::vector<int>> members_[kScopes];  // [scope][instance]: ascending world ranks
  std::vector<int64_t> prev_end_;
  std::vector<bool> slow_;
  StepTimes step_;
};

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_TIMELINE_H_
