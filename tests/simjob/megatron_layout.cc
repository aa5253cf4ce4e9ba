// The Megatron layout and the per-iteration program of a rank; the contract is in
// megatron_layout.h.
#include "tests/simjob/megatron_layout.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {

const char* FamilyName(CommFamily family) {
  switch (family) {
    case CommFamily::kTp:
      return "tp";
    case CommFamily::kDp:
      return "dp";
    case CommFamily::kPp:
      return "pp";
    case CommFamily::kMp:
      return "mp";
    case CommFamily::kEmb:
      return "emb";
    case CommFamily::kWorld:
      return "world";
  }
  return "invalid";
}

const char* JobOpKindName(JobOpKind kind) {
  switch (kind) {
    case JobOpKind::kAllReduce:
      return "AllReduce";
    case JobOpKind::kReduceScatter:
      return "ReduceScatter";
    case JobOpKind::kAllGather:
      return "AllGather";
    case JobOpKind::kSend:
      return "Send";
    case JobOpKind::kRecv:
      return "Recv";
  }
  return "Invalid";
}

double StageFactor(const ProgramSpec& spec, int stage) {
  if (stage < 0 || stage >= static_cast<int>(spec.stage_factors.size())) return 1.0;
  return spec.stage_factors[stage];
}

MegatronLayout::MegatronLayout(int tp, int pp, int dp, int gpus_per_node)
    : tp_(tp), pp_(pp), dp_(dp), gpus_per_node_(gpus_per_node) {
  for (int f = 0; f < kCommFamilies; ++f) {
    const auto family = static_cast<CommFamily>(f);
    members_[f].resize(Instances(family));
    offset_[f + 1] = offset_[f] + Instances(family);
  }
  // Visiting ranks in ascending order gives every instance its members in the documented order:
  // by tp_i in tp, dp_i in dp, stage in pp and emb, ascending rank in mp and world.
  for (int r = 0; r < world_size(); ++r) {
    for (int f = 0; f < kCommFamilies; ++f) {
      const int g = InstanceOf(static_cast<CommFamily>(f), r);
      if (g >= 0) members_[f][g].push_back(r);
    }
  }
}

bool MegatronLayout::Exists(CommFamily family) const {
  switch (family) {
    case CommFamily::kTp:
      return tp_ > 1;
    case CommFamily::kDp:
      return dp_ > 1;
    case CommFamily::kPp:
    case CommFamily::kEmb:
      return pp_ > 1;
    case CommFamily::kMp:
      return tp_ * pp_ > 1;
    case CommFamily::kWorld:
      return world_size() > 1;
  }
  return false;
}

int MegatronLayout::Instances(CommFamily family) const {
  switch (family) {
    case CommFamily::kTp:
      return dp_ * pp_;
    case CommFamily::kDp:
      return tp_ * pp_;
    case CommFamily::kPp:
    case CommFamily::kEmb:
      return tp_ * dp_;
    case CommFamily::kMp:
      return dp_;
    case CommFamily::kWorld:
      return 1;
  }
  return 0;
}

int MegatronLayout::InstanceOf(CommFamily family, int rank) const {
  const int t = TpIndex(rank);
  const int d = DpIndex(rank);
  const int s = Stage(rank);
  switch (family) {
    case CommFamily::kTp:
      return d + dp_ * s;
    case CommFamily::kDp:
      return t + tp_ * s;
    case CommFamily::kPp:
      return t + tp_ * d;
    case CommFamily::kEmb:
      return s == 0 || s == pp_ - 1 ? t + tp_ * d : -1;
    case CommFamily::kMp:
      return d;
    case CommFamily::kWorld:
      return 0;
  }
  return -1;
}

const std::vector<int>& MegatronLayout::Members(CommFamily family, int instance) const {
  return members_[static_cast<int>(family)][instance];
}

int MegatronLayout::CommRank(CommFamily family, int rank) const {
  const int g = InstanceOf(family, rank);
  if (g < 0) return -1;
  const std::vector<int>& m = Members(family, g);
  return static_cast<int>(std::find(m.begin(), m.end(), rank) - m.begin());
}

int MegatronLayout::NodesSpanned(CommRef comm) const {
  const std::vector<int>& m = Members(comm.family, comm.instance);
  std::vector<int> nodes;
  for (int r : m) nodes.push_back(NodeOf(r));
  std::sort(nodes.begin(), nodes.end());
  return static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

std::string MegatronLayout::CommName(CommRef comm) const {
  if (comm.family == CommFamily::kWorld) return "world";
  return FamilyName(comm.family) + std::to_string(comm.instance);
}

bool MegatronLayout::FindComm(std::string_view name, CommRef* comm) const {
  for (int f = 0; f < kCommFamilies; ++f) {
    const auto family = static_cast<CommFamily>(f);
    const std::string_view prefix = FamilyName(family);
    if (!Exists(family) || name.substr(0, prefix.size()) != prefix) continue;
    if (family == CommFamily::kWorld) {
      if (name != prefix) continue;
      *comm = {family, 0};
      return true;
    }
    const std::string_view digits = name.substr(prefix.size());
    int instance = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), instance);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) continue;
    if (instance < 0 || instance >= Instances(family)) continue;
    *comm = {family, instance};
    return true;
  }
  return false;
}

std::vector<CommRef> MegatronLayout::CommsOf(int rank) const {
  static constexpr CommFamily kOrder[] = {CommFamily::kWorld, CommFamily::kTp, CommFamily::kDp,
                                          CommFamily::kPp,    CommFamily::kMp, CommFamily::kEmb};
  std::vector<CommRef> comms;
  for (CommFamily f : kOrder) {
    const int g = InstanceOf(f, rank);
    if (Exists(f) && g >= 0) comms.push_back({f, g});
  }
  return comms;
}

std::vector<CommRef> MegatronLayout::AllComms() const {
  std::vector<CommRef> comms;
  for (int f = 0; f < kCommFamilies; ++f) {
    const auto family = static_cast<CommFamily>(f);
    for (int g = 0; Exists(family) && g < Instances(family); ++g) comms.push_back({family, g});
  }
  return comms;
}

uint64_t MoeA2aBytes(const ProgramSpec& spec, int dp, int group, int64_t iteration, int64_t pass,
                     int from, int to) {
  constexpr uint64_t kSalt = 0x6d6f652d613261ull;  // "moe-a2a"
  uint64_t h = SplitMix64(spec.moe_seed ^ kSalt);
  h = SplitMix64(h ^ static_cast<uint64_t>(iteration));
  h = SplitMix64(h ^ static_cast<uint64_t>(pass) ^ (static_cast<uint64_t>(group) << 40));
  h = SplitMix64(h ^ (static_cast<uint64_t>(from) << 20) ^ static_cast<uint64_t>(to));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  const double bytes = (0.5 + u) * static_cast<double>(spec.moe_bytes) / dp;
  return std::max<uint64_t>(16, static_cast<uint64_t>(bytes) / 16 * 16);
}

namespace {

// Writes one rank's program: compute accumulates until the next op takes it.
class ProgramWriter {
 public:
  ProgramWriter(const MegatronLayout& layout, const ProgramSpec& spec, int rank, int64_t iteration,
                std::vector<JobOp>* ops, int64_t* carry_ns)
      : layout_(layout),
        spec_(spec),
        rank_(rank),
        iteration_(iteration),
        stage_(layout.Stage(rank)),
        factor_(StageFactor(spec, stage_)),
        ops_(ops),
        carry_ns_(carry_ns) {}

  void Compute(int64_t nominal_ns) { *carry_ns_ += std::llround(nominal_ns * factor_); }

  void Collective(CommFamily family, JobOpKind kind, uint64_t bytes) {
    if (!layout_.Exists(family) || layout_.InstanceOf(family, rank_) < 0) return;
    Add(family).AddTask({kind, -1, bytes, -1});
  }

  // One group of p2p tasks on the pipeline communicator; peers are stages (= pp comm ranks).
  void P2p(JobOpKind kind, int peer_stage) { P2p(kind, peer_stage, kind, -1); }
  void P2p(JobOpKind kind0, int peer0, JobOpKind kind1, int peer1) {
    JobOp& op = Add(CommFamily::kPp);
    op.AddTask({kind0, peer0, spec_.pp_bytes, -1});
    if (peer1 >= 0) op.AddTask({kind1, peer1, spec_.pp_bytes, -1});
  }

  // `n` layers of forward or backward compute, each followed by the TP AllReduce (and, with MoE,
  // the expert-parallel dispatch, expert compute and combine). With FSDP each layer's parameters
  // are AllGathered first and a backward layer's gradients ReduceScattered after it; with
  // context parallelism ring attention replaces the TP AllReduce.
  void Layers(bool backward, int n) {
    const double f = backward ? spec_.backward_factor : 1.0;
    const int64_t layer_ns = std::llround(spec_.layer_fwd_ns * f);
    for (int l = 0; l < n; ++l) {
      // FSDP prefetch: the AllGather of layer l+1 goes before layer l's compute. Real FSDP runs it
      // on a second stream while layer l computes; the model has one stream per rank, so the
      // gather waits for the DP group (as the real one does, and the next layer then waits for
      // it) but its transfer is not hidden behind layer l's compute: the GPU's own time before
      // it is at most the compute it overlaps in real life, and the iteration is longer by the
      // transfers. That keeps the ops and their order, and who waits for whom, as in real life.
      if (spec_.fsdp) {
        if (l == 0) FsdpGather();
        if (l + 1 < n) FsdpGather();
      }
      if (spec_.cp_ring && layout_.Exists(CommFamily::kTp)) {
        RingAttention(layer_ns);
      } else {
        Compute(layer_ns);
        Collective(CommFamily::kTp, JobOpKind::kAllReduce, spec_.tp_bytes);
      }
      if (spec_.moe_expert_ns > 0 && layout_.Exists(CommFamily::kDp)) {
        const int64_t expert_ns =
            std::llround(spec_.moe_expert_ns * f * (IsHot() ? spec_.moe_hot_factor : 1.0));
        if (spec_.moe_dispatcher == MoeDispatcher::kAllToAll) {
          AllToAll(/*combine=*/false);
          Compute(expert_ns);
          AllToAll(/*combine=*/true);
        } else {
          Collective(CommFamily::kDp, JobOpKind::kAllGather, spec_.moe_bytes);
          Compute(expert_ns);
          Collective(CommFamily::kDp, JobOpKind::kReduceScatter, spec_.moe_bytes);
        }
        ops_->back().expert_compute = true;  // the combine: its compute was the experts'
      }
      if (spec_.fsdp && backward) {
        Collective(CommFamily::kDp, JobOpKind::kReduceScatter, FsdpLayerBytes());
      }
      ++moe_layer_;
    }
  }

  // Whether the routing makes this rank its group's hot expert for the current layer: one rank
  // of the group, drawn from (routing seed, iteration, layer pass, group); every member of the
  // group draws the same.
  bool IsHot() const {
    const uint64_t group = static_cast<uint64_t>(layout_.InstanceOf(CommFamily::kDp, rank_));
    uint64_t h = SplitMix64(spec_.moe_seed ^ SplitMix64(static_cast<uint64_t>(iteration_)));
    h = SplitMix64(h ^ static_cast<uint64_t>(moe_layer_) ^ (group << 40));
    return static_cast<int>(h % static_cast<uint64_t>(layout_.dp())) == layout_.DpIndex(rank_);
  }

  // MoE all-to-all on the DP group: one group with a Send to and a Recv from every other member
  // (ascending comm rank), sized by the routing; the combine returns what the dispatch brought.
  void AllToAll(bool combine) {
    JobOp& op = Add(CommFamily::kDp);
    const int me = op.comm_rank;
    const int group = op.comm.instance;
    auto bytes = [&](int from, int to) {
      return MoeA2aBytes(spec_, layout_.dp(), group, iteration_, moe_layer_, from, to);
    };
    for (int p = 0; p < layout_.dp(); ++p) {
      if (p == me) continue;
      op.AddTask({JobOpKind::kSend, p, combine ? bytes(p, me) : bytes(me, p), -1});
      op.AddTask({JobOpKind::kRecv, p, combine ? bytes(me, p) : bytes(p, me), -1});
    }
  }

  // Ring attention over the TP group for one layer: tp - 1 steps of {Send to the next member,
  // Recv from the previous one}, 1/tp of the layer's compute before each; the last share is
  // left for whatever comes next.
  void RingAttention(int64_t layer_ns) {
    const int n = layout_.tp();
    const int me = layout_.TpIndex(rank_);  // = the tp comm rank
    const uint64_t bytes = spec_.cp_bytes > 0 ? spec_.cp_bytes : spec_.tp_bytes;
    for (int i = 0; i < n; ++i) {
      Compute(layer_ns * (i + 1) / n - layer_ns * i / n);
      if (i == n - 1) break;
      JobOp& op = Add(CommFamily::kTp);
      op.AddTask({JobOpKind::kSend, (me + 1) % n, bytes, -1});
      op.AddTask({JobOpKind::kRecv, (me + n - 1) % n, bytes, -1});
    }
  }

  uint64_t FsdpLayerBytes() const {
    const uint64_t layer =
        spec_.fsdp_layer_bytes > 0 ? spec_.fsdp_layer_bytes : spec_.dp_bytes / spec_.layers;
    return std::max<uint64_t>(16, static_cast<uint64_t>(std::llround(layer * factor_)));
  }
  void FsdpGather() { Collective(CommFamily::kDp, JobOpKind::kAllGather, FsdpLayerBytes()); }

  void Write() {
    if (spec_.virtual_stages > 1 && layout_.pp() > 1) {
      WriteInterleaved();
    } else {
      WriteOneFOneB();
    }
    WriteTail();
  }

  void WriteOneFOneB() {
    const int P = layout_.pp();
    const int M = spec_.microbatches;
    const int L = spec_.layers;
    const bool first = stage_ == 0;
    const bool last = stage_ == P - 1;
    const int prev = stage_ - 1;
    const int next = stage_ + 1;
    const int warmup = std::min(P - stage_ - 1, M);
    const int steady = M - warmup;
    for (int i = 0; i < warmup; ++i) {
      if (!first) P2p(JobOpKind::kRecv, prev);
      Layers(false, L);
      if (!last) P2p(JobOpKind::kSend, next);
    }
    if (steady > 0 && !first) P2p(JobOpKind::kRecv, prev);
    for (int i = 0; i < steady; ++i) {
      Layers(false, L);
      if (!last) P2p(JobOpKind::kSend, next, JobOpKind::kRecv, next);
      Layers(true, L);
      if (first) continue;
      if (i == steady - 1) {
        P2p(JobOpKind::kSend, prev);
      } else {
        P2p(JobOpKind::kSend, prev, JobOpKind::kRecv, prev);
      }
    }
    for (int i = 0; i < warmup; ++i) {
      if (!last) P2p(JobOpKind::kRecv, next);
      Layers(true, L);
      if (!first) P2p(JobOpKind::kSend, prev);
    }
  }

  // Interleaved 1F1B in lock-step rounds (megatron_layout.h). Forward k of every rank is chunk
  // (k mod VP) / P of microbatch (k / VP) P + k mod P, backward k the same microbatch of chunk
  // V - 1 - (k mod VP) / P; forward k of stage s runs in round k + s, backward k in round
  // k + VP - 1 + P - 1 - s. Every dependency lies in an earlier round (or, for the last virtual
  // stage, earlier in the same round: its forward, then its backward).
  void WriteInterleaved() {
    const int P = layout_.pp();
    const int V = spec_.virtual_stages;
    const int64_t n = static_cast<int64_t>(V) * spec_.microbatches;  // chunk passes each way
    const int chunk_layers = spec_.layers / V;
    const int next = (stage_ + 1) % P;
    const int prev = (stage_ + P - 1) % P;
    // The chunk whose forward (backward) stage `s` runs in round r, or -1 if none.
    auto forward_chunk = [&](int s, int64_t r) -> int {
      const int64_t k = r - s;
      return k < 0 || k >= n ? -1 : static_cast<int>(k % (V * P) / P);
    };
    auto backward_chunk = [&](int s, int64_t r) -> int {
      const int64_t k = r - (V * P - 1) - (P - 1 - s);
      return k < 0 || k >= n ? -1 : V - 1 - static_cast<int>(k % (V * P) / P);
    };
    // Whether that pass has a neighbour to send to: not the last virtual stage's forward, not the
    // first one's backward.
    auto sends_forward = [&](int s, int64_t r) {
      const int c = forward_chunk(s, r);
      return c >= 0 && !(s == P - 1 && c == V - 1);
    };
    auto sends_backward = [&](int s, int64_t r) {
      const int c = backward_chunk(s, r);
      return c >= 0 && !(s == 0 && c == 0);
    };
    const int64_t rounds = n + V * P + P - 2;
    for (int64_t r = 0; r < rounds; ++r) {
      if (forward_chunk(stage_, r) >= 0) Layers(false, chunk_layers);
      if (backward_chunk(stage_, r) >= 0) Layers(true, chunk_layers);
      const bool has[] = {sends_forward(stage_, r), sends_forward(prev, r),
                          sends_backward(stage_, r), sends_backward(next, r)};
      if (!has[0] && !has[1] && !has[2] && !has[3]) continue;
      JobOp& op = Add(CommFamily::kPp);
      if (has[0]) op.AddTask({JobOpKind::kSend, next, spec_.pp_bytes, -1});
      if (has[1]) op.AddTask({JobOpKind::kRecv, prev, spec_.pp_bytes, -1});
      if (has[2]) op.AddTask({JobOpKind::kSend, prev, spec_.pp_bytes, -1});
      if (has[3]) op.AddTask({JobOpKind::kRecv, next, spec_.pp_bytes, -1});
    }
  }

  void WriteTail() {
    // Gradient and parameter sizes follow the stage's weight (its share of the model). FSDP has
    // reduced and gathered them layer by layer already.
    const auto dp_bytes = static_cast<uint64_t>(std::llround(spec_.dp_bytes * factor_));
    if (!spec_.fsdp) Collective(CommFamily::kDp, JobOpKind::kReduceScatter, dp_bytes);
    Collective(CommFamily::kEmb, JobOpKind::kAllReduce, spec_.emb_bytes);
    Collective(CommFamily::kMp, JobOpKind::kAllReduce, spec_.mp_bytes);
    Compute(spec_.optimizer_ns);
    if (!spec_.fsdp) Collective(CommFamily::kDp, JobOpKind::kAllGather, dp_bytes);
    if (spec_.world_every > 0 && (iteration_ + 1) % spec_.world_every == 0) {
      Collective(CommFamily::kWorld, JobOpKind::kAllReduce, spec_.world_bytes);
    }
  }

 private:
  JobOp& Add(CommFamily family) {
    JobOp& op = ops_->emplace_back();
    op.iteration = iteration_;
    op.comm = {family, layout_.InstanceOf(family, rank_)};
    op.comm_rank = layout_.CommRank(family, rank_);
    op.compute_ns = *carry_ns_;
    *carry_ns_ = 0;
    return op;
  }

  const MegatronLayout& layout_;
  const ProgramSpec& spec_;
  const int rank_;
  const int64_t iteration_;
  const int stage_;
  const double factor_;
  std::vector<JobOp>* const ops_;
  int64_t* const carry_ns_;
  int64_t moe_layer_ = 0;  // layer passes so far this iteration (the routing's key)
};

}  // namespace

void BuildIteration(const MegatronLayout& layout, const ProgramSpec& spec, int rank,
                    int64_t iteration, std::vector<JobOp>* ops, int64_t* carry_ns) {
  ProgramWriter(layout, spec, rank, iteration, ops, carry_ns).Write();
}

}  // namespace ncclwatch::simjob
