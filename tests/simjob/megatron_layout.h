// The layout of a Megatron-style 3D-parallel job and the program of NCCL operations one rank issues
// per training iteration: which communicators exist, who is in them, and in which order a rank
// calls which collective or point-to-point operation (/work/shared/TRAINING-PATTERNS.md describes
// the real jobs this follows). Times are not decided here; job_model.h runs these programs.
//
// Layout: nodes x gpus_per_node = tp x pp x dp ranks, in Megatron's order (tensor parallel fastest,
// then data parallel, then pipeline stage):
//   rank = tp_i + tp * (dp_i + dp * stage),   node = rank / gpus_per_node.
// With gpus_per_node a multiple of tp, TP groups stay inside a node; DP and PP cross nodes.
//
// Communicator families (each instance has ordered members; a member's index is its comm rank):
//   tp<i>   i = dp_i + dp * stage     the TP group of one (stage, replica)
//   dp<i>   i = tp_i + tp * stage     the same (stage, tp_i) in every replica
//   pp<i>   i = tp_i + tp * dp_i      every stage of one (replica, tp_i); comm rank = stage
//   mp<i>   i = dp_i                  all tp x pp ranks of one replica (grad norm, loss)
//   emb<i>  i = tp_i + tp * dp_i      first and last stage of one (replica, tp_i) (tied embeddings)
//   world                             every rank
// A family exists only if its instances have at least two members (tp > 1, dp > 1, pp > 1, ...).
//
// One iteration of a rank at `stage` (P stages, M microbatches, L layers per stage) is Megatron's
// 1F1B schedule with batched point-to-point exchanges (one NCCL group holding a Send and a Recv
// with the same neighbour, as batch_isend_irecv does; two separate blocking Send and Recv on one
// stream would deadlock 1F1B):
//   warm-up   W = min(P - stage - 1, M) times: [Recv from stage-1] F [Send to stage+1]
//   steady    M - W times: F, {Send, Recv} with stage+1, B, {Send, Recv} with stage-1
//             (the first forward's Recv before the loop, the last backward's Send alone)
//   cool-down W times: [Recv from stage+1] B [Send to stage-1]
//   then      DP ReduceScatter (grads), emb AllReduce (first/last stage), mp AllReduce (8 bytes),
//             optimizer compute, DP AllGather (params), every world_every iterations a world
//             AllReduce (4 bytes)
// F and B are L layers of compute, each followed by a TP AllReduce (if tp > 1); B computes
// backward_factor x as long as F. With MoE (ProgramSpec::moe_expert_ns), each layer then
// dispatches its tokens, computes its experts and combines (MoeDispatcher). Each op carries the
// nominal compute that precedes it on the GPU.
//
// Other shapes (ProgramSpec; any combination):
//   MoE all-to-all  dispatch and combine are each ONE group on the DP (= expert-parallel) group
//                   holding a Send to and a Recv from every other member; the bytes of i -> j
//                   follow the routing (MoeA2aBytes), the combine mirrors the dispatch.
//   FSDP / ZeRO-3   every layer pass AllGathers its layer's parameters over DP (prefetched one
//                   layer ahead: the AllGather of layer l+1 is issued before layer l computes),
//                   every backward layer ReduceScatters its gradients after its compute; the
//                   end-of-iteration DP ReduceScatter/AllGather are not issued.
//   interleaved     virtual_stages V > 1: each rank holds V model chunks of L / V layers (chunk c
//   1F1B            of stage s is virtual stage c * P + s) and runs Megatron's interleaved 1F1B
//                   in lock-step rounds (WriteInterleaved): in round r a rank computes at most one
//                   chunk forward, then at most one chunk backward, then issues ONE group with
//                   what it exchanges with its two pipeline neighbours in that round: Send of the
//                   forward's output to stage+1 and Recv from stage-1, Send of the backward's
//                   gradient to stage-1 and Recv from stage+1. The pp communicator wraps around:
//                   stage P-1's chunk c feeds stage 0's chunk c+1. Forward k of a rank (Megatron's
//                   order: groups of P microbatches per chunk) runs in round k + stage, backward
//                   k in round k + V * P - 1 + (P - 1 - stage): a rank warms up with
//                   (V - 1) * P + 2 * (P - 1 - stage) forwards, as Megatron's does. A message is
//                   sent and received in the same round and used in a later one (the receiver
//                   buffers it, as the real schedule's early receives do), so round r's groups
//                   only wait for each other: it never deadlocks. Needs M a multiple of P.
//   context         cp_ring: each layer's TP AllReduce is replaced by ring attention over the TP
//   parallel        group: tp - 1 steps, each ONE group {Send to tp_i + 1, Recv from tp_i - 1}
//                   (mod tp), with 1/tp of the layer's compute before each step (the last share
//                   goes before whatever follows the layer).
//
// Pure computation; an object is immutable after construction and safe to share between threads.
#ifndef NCCLWATCH_TESTS_SIMJOB_MEGATRON_LAYOUT_H_
#define NCCLWATCH_TESTS_SIMJOB_MEGATRON_LAYOUT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ncclwatch::simjob {

enum class CommFamily { kTp, kDp, kPp, kMp, kEmb, kWorld };
inline constexpr int kCommFamilies = 6;
// "tp", "dp", "pp", "mp", "emb", "world".
const char* FamilyName(CommFamily family);

struct CommRef {
  CommFamily family = CommFamily::kWorld;
  int instance = 0;
  bool operator==(const CommRef&) const = default;
};

enum class JobOpKind { kAllReduce, kReduceScatter, kAllGather, kSend, kRecv };
// NCCL's function name: "AllReduce", "ReduceScatter", "AllGather", "Send", "Recv".
const char* JobOpKindName(JobOpKind kind);
inline bool IsP2p(JobOpKind kind) { return kind == JobOpKind::kSend || kind == JobOpKind::kRecv; }

// One NCCL call inside an op.
struct JobTask {
  JobOpKind kind = JobOpKind::kAllReduce;
  int peer = -1;       // p2p: the peer's comm rank; -1 for collectives
  uint64_t bytes = 0;  // nccl-tests size: AllReduce the buffer, AllGather the total output,
                       // ReduceScatter the total input, Send/Recv the message
  // NCCL-like sequence number: collectives per (communicator, kind) from 0; p2p per
  // (communicator, peer, direction) from 0. Set by the job model.
  int64_t seq = -1;
};

// The tasks of one op (JobOp::AddTask appends): a small vector that keeps up to two inline (every
// op of the dense job) and moves to the heap beyond that (interleaved pipelines, MoE
// all-to-alls). The job model copies and rebuilds ops all the time; a std::vector (one
// allocation per op) made the 64-rank cost test of job_model_test.cc about 10-20% slower.
class TaskList {
 public:
  TaskList() = default;
  TaskList(const TaskList&) = default;
  TaskList& operator=(const TaskList&) = default;
  // A moved-from list is empty.
  TaskList(TaskList&& other) noexcept
      : inline_(other.inline_),
        heap_(std::move(other.heap_)),
        size_(std::exchange(other.size_, 0)) {}
  TaskList& operator=(TaskList&& other) noexcept {
    inline_ = other.inline_;
    heap_ = std::move(other.heap_);
    other.heap_.clear();
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  JobTask* begin() { return size_ <= kInline ? inline_.data() : heap_.data(); }
  JobTask* end() { return begin() + size_; }
  const JobTask* begin() const { return size_ <= kInline ? inline_.data() : heap_.data(); }
  const JobTask* end() const { return begin() + size_; }
  JobTask& operator[](size_t i) { return begin()[i]; }
  const JobTask& operator[](size_t i) const { return begin()[i]; }

 private:
  friend struct JobOp;  // keeps its n_tasks equal to size()
  void push_back(const JobTask& task) {
    if (size_ < kInline) {
      inline_[size_++] = task;
      return;
    }
    if (size_ == kInline) heap_.assign(inline_.begin(), inline_.end());
    heap_.push_back(task);
    ++size_;
  }

  static constexpr size_t kInline = 2;
  std::array<JobTask, kInline> inline_;
  std::vector<JobTask> heap_;  // every task once size_ > kInline
  size_t size_ = 0;
};

// One group launch (one GPU kernel) of one rank: a collective, or a group of p2p tasks (one or two
// on the pipeline; up to four with interleaving; 2 x (dp - 1) for an MoE all-to-all).
struct JobOp {
  int64_t index = -1;      // per rank, program order from 0 across iterations
  int64_t iteration = -1;  // training iteration
  CommRef comm;
  int comm_rank = -1;  // this rank's index in the communicator
  // tasks[0, n_tasks), at least one; AddTask appends. n_tasks is always tasks.size() (readers
  // outside simjob index by it: tests/loadgen).
  int n_tasks = 0;
  TaskList tasks;
  void AddTask(const JobTask& task) {
    tasks.push_back(task);
    n_tasks = static_cast<int>(tasks.size());
  }
  // Program: the nominal compute before this op on this rank's GPU (stage factor applied).
  // Model output: the compute the GPU actually ran before it (jitter, warm-up, faults, stalls).
  int64_t compute_ns = 0;
  // Program: the compute before this op is a mixture-of-experts layer's expert compute (the
  // combine follows it), which --slow-scope=expert slows alone.
  bool expert_compute = false;
  // Model output (job_model.h), absolute virtual ns; kNever when it never happens.
  int64_t host_enqueue_ns = 0;
  int64_t gpu_start_ns = 0;
  int64_t gpu_end_ns = 0;
  // When the last party of every task had arrived (the kernel stops waiting for its peers and
  // moves data); kNever if some party never arrives.
  int64_t all_arrived_ns = 0;
};

// How MoE layers move tokens to their experts and back over the expert-parallel (DP) group.
enum class MoeDispatcher {
  kAllGather,  // Megatron's AllGather/ReduceScatter dispatcher: a DP AllGather, a ReduceScatter
  kAllToAll,   // an all-to-all: one group of a Send and a Recv with every other member, twice
};

// What one iteration consists of (sizes in bytes, times in ns).
struct ProgramSpec {
  int microbatches = 4;
  int layers = 2;                     // per pipeline stage
  int64_t layer_fwd_ns = 1'000'000;   // forward compute of one layer for one microbatch
  double backward_factor = 2.0;       // backward = this x forward
  int64_t optimizer_ns = 2'000'000;   // optimizer step
  std::vector<double> stage_factors;  // per stage compute (and gradient size) factor; empty: 1
  uint64_t tp_bytes = 4ull << 20;     // TP AllReduce per layer (activations)
  uint64_t pp_bytes = 2ull << 20;     // activations / gradients between stages
  uint64_t dp_bytes = 48ull << 20;    // gradients (ReduceScatter) = parameters (AllGather)
  uint64_t emb_bytes = 16ull << 20;   // tied-embedding gradients
  uint64_t mp_bytes = 8;              // grad norm
  uint64_t world_bytes = 4;           // the rare world AllReduce
  int world_every = 50;               // 0: never
  // Mixture of experts (0: dense). Each layer's MLP is experts spread over the data-parallel
  // group of its stage and TP position (expert parallelism carved from data parallelism). The
  // dispatcher moves the tokens (moe_bytes per rank) there and back: Megatron's AllGather/
  // ReduceScatter one (AllGather the tokens, compute the local experts, ReduceScatter the
  // outputs) or an all-to-all (see above) -- forward and backward. Token routing makes one rank
  // of the group the hot one, a different one for every (iteration, microbatch, layer): its
  // expert compute takes moe_hot_factor x moe_expert_ns, the others' moe_expert_ns.
  int64_t moe_expert_ns = 0;
  double moe_hot_factor = 2.0;
  uint64_t moe_bytes = 4ull << 20;
  uint64_t moe_seed = 1;  // the routing
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllGather;
  // FSDP / ZeRO-3 (see above): the parameters of one layer (x the stage factor); 0: dp_bytes /
  // layers.
  bool fsdp = false;
  uint64_t fsdp_layer_bytes = 0;
  // Interleaved 1F1B: model chunks per rank (1: plain 1F1B). Needs pp >= 2, microbatches a
  // multiple of pp and layers a multiple of it (the caller validates).
  int virtual_stages = 1;
  // Context parallel ring attention over the TP group instead of the TP AllReduce; each step's
  // Send/Recv message (0: tp_bytes).
  bool cp_ring = false;
  uint64_t cp_bytes = 0;
};

class MegatronLayout {
 public:
  // tp x pp x dp ranks on nodes of gpus_per_node GPUs (the caller validates the product).
  MegatronLayout(int tp, int pp, int dp, int gpus_per_node);

  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int dp() const { return dp_; }
  int world_size() const { return tp_ * pp_ * dp_; }
  int gpus_per_node() const { return gpus_per_node_; }
  int nodes() const { return (world_size() + gpus_per_node_ - 1) / gpus_per_node_; }

  int TpIndex(int rank) const { return rank % tp_; }
  int DpIndex(int rank) const { return rank / tp_ % dp_; }
  int Stage(int rank) const { return rank / (tp_ * dp_); }
  int RankAt(int tp_i, int dp_i, int stage) const { return tp_i + tp_ * (dp_i + dp_ * stage); }
  int NodeOf(int rank) const { return rank / gpus_per_node_; }

  // Whether the family's instances have at least two members (else nothing runs on it).
  bool Exists(CommFamily family) const;
  int Instances(CommFamily family) const;
  // The instance of `family` that `rank` belongs to; -1 if none (emb: middle stages).
  int InstanceOf(CommFamily family, int rank) const;
  const std::vector<int>& Members(CommFamily family, int instance) const;
  // `rank`'s index among the members of its instance of `family` (-1 if none).
  int CommRank(CommFamily family, int rank) const;
  int NodesSpanned(CommRef comm) const;
  // "tp0", "dp3", "pp1", "mp0", "emb1", "world".
  std::string CommName(CommRef comm) const;
  // Parses a CommName of an existing communicator; false if there is no such communicator.
  bool FindComm(std::string_view name, CommRef* comm) const;
  // The existing communicators `rank` belongs to, in the order it creates them: world, tp, dp, pp,
  // mp, emb.
  std::vector<CommRef> CommsOf(int rank) const;
  // Every existing communicator, in that family order.
  std::vector<CommRef> AllComms() const;
  // A dense id over all instances of all families, in [0, NumCommIds()).
  int CommId(CommRef comm) const { return offset_[static_cast<int>(comm.family)] + comm.instance; }
  int NumCommIds() const { return offset_[kCommFamilies]; }

 private:
  int tp_, pp_, dp_, gpus_per_node_;
  std::vector<std::vector<int>> members_[kCommFamilies];  // [family][instance]
  int offset_[kCommFamilies + 1] = {};
};

// Appends to *ops the program of `rank` for training iteration `iteration` (fields index, seq
// and the times are left for the job model). Compute left after the last op (none with the
// default program) is added to *carry_ns; compute already in *carry_ns goes before the first op.
void BuildIteration(const MegatronLayout& layout, const ProgramSpec& spec, int rank,
                    int64_t iteration, std::vector<JobOp>* ops, int64_t* carry_ns);

// The stage factor of `stage` (1 if spec.stage_factors is empty).
double StageFactor(const ProgramSpec& spec, int stage);

// MoE all-to-all: the bytes that DP comm rank `from` sends to `to` (!= from) in the dispatch of
// layer pass `pass` (the layer passes of an iteration counted from 0 in program order) of the DP
// group `group` in `iteration`: uniform in [0.5, 1.5) x moe_bytes / dp, a multiple of 16 bytes,
// drawn from (moe_seed, iteration, pass, group, from, to). The combine sends back what came in:
// its `to` -> `from` message is this size.
uint64_t MoeA2aBytes(const ProgramSpec& spec, int dp, int group, int64_t iteration, int64_t pass,
                     int from, int to);

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_MEGATRON_LAYOUT_H_
