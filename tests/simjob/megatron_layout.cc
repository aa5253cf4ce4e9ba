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
    JobOp& op = Add(family);
    op.tasks[0] = {kind, -1, bytes, -1};
  }

  // One group of p2p tasks on the pipeline communicator; peers are stages (= pp comm ranks).
  void P2p(JobOpKind kind, int peer_stage) { P2p(kind, peer_stage, kind, -1); }
  void P2p(JobOpKind kind0, int peer0, JobOpKind kind1, int peer1) {
    JobOp& op = Add(CommFamily::kPp);
    op.tasks[0] = {kind0, peer0, spec_.pp_bytes, -1};
    if (peer1 >= 0) {
      op.n_tasks = 2;
      op.tasks[1] = {kind1, peer1, spec_.pp_bytes, -1};
    }
  }

  // L layers of forward or backward compute, each followed by the TP AllReduce (and, with MoE,
  // the expert-parallel dispatch, expert compute and combine).
  void Layers(bool backward) {
    const double f = backward ? spec_.backward_factor : 1.0;
    const int64_t layer_ns = std::llround(spec_.layer_fwd_ns * f);
    for (int l = 0; l < spec_.layers; ++l) {
      Compute(layer_ns);
      Collective(CommFamily::kTp, JobOpKind::kAllReduce, spec_.tp_bytes);
      if (spec_.moe_expert_ns > 0 && layout_.Exists(CommFamily::kDp)) {
        Collective(CommFamily::kDp, JobOpKind::kAllGather, spec_.moe_bytes);
        Compute(std::llround(spec_.moe_expert_ns * f * (IsHot() ? spec_.moe_hot_factor : 1.0)));
        Collective(CommFamily::kDp, JobOpKind::kReduceScatter, spec_.moe_bytes);
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

  void Write() {
    const int P = layout_.pp();
    const int M = spec_.microbatches;
    const bool first = stage_ == 0;
    const bool last = stage_ == P - 1;
    const int prev = stage_ - 1;
    const int next = stage_ + 1;
    const int warmup = std::min(P - stage_ - 1, M);
    const int steady = M - warmup;
    for (int i = 0; i < warmup; ++i) {
      if (!first) P2p(JobOpKind::kRecv, prev);
      Layers(false);
      if (!last) P2p(JobOpKind::kSend, next);
    }
    if (steady > 0 && !first) P2p(JobOpKind::kRecv, prev);
    for (int i = 0; i < steady; ++i) {
      Layers(false);
      if (!last) P2p(JobOpKind::kSend, next, JobOpKind::kRecv, next);
      Layers(true);
      if (first) continue;
      if (i == steady - 1) {
        P2p(JobOpKind::kSend, prev);
      } else {
        P2p(JobOpKind::kSend, prev, JobOpKind::kRecv, prev);
      }
    }
    for (int i = 0; i < warmup; ++i) {
      if (!last) P2p(JobOpKind::kRecv, next);
      Layers(true);
      if (!first) P2p(JobOpKind::kSend, prev);
    }
    // Gradient and parameter sizes follow the stage's weight (its share of the model).
    const auto dp_bytes = static_cast<uint64_t>(std::llround(spec_.dp_bytes * factor_));
    Collective(CommFamily::kDp, JobOpKind::kReduceScatter, dp_bytes);
    Collective(CommFamily::kEmb, JobOpKind::kAllReduce, spec_.emb_bytes);
    Collective(CommFamily::kMp, JobOpKind::kAllReduce, spec_.mp_bytes);
    Compute(spec_.optimizer_ns);
    Collective(CommFamily::kDp, JobOpKind::kAllGather, dp_bytes);
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
