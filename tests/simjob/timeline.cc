#include "tests/simjob/timeline.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace ncclwatch::simjob {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

}  // namespace

std::vector<StepSpec> DefaultWorkload(bool with_node_comm) {
  // One training iteration as seen by NCCL: gradient AllReduce, a ZeRO-style AllGather +
  // ReduceScatter pair, and a pipeline-style neighbour exchange. Extend here.
  std::vector<StepSpec> steps = {
      {OpKind::kAllReduce, CommScope::kWorld, 32 * kMiB},
      {OpKind::kAllGather, CommScope::kWorld, 8 * kMiB},
      {OpKind::kReduceScatter, CommScope::kWorld, 8 * kMiB},
      {OpKind::kSendRecv, CommScope::kWorld, 1 * kMiB},
  };
  if (with_node_comm) steps.push_back({OpKind::kAllReduce, CommScope::kNode, 16 * kMiB});
  return steps;
}

std::vector<StepSpec> ThreeDWorkload() {
  // Forward/backward as NCCL sees a Megatron-style job: activations between pipeline stages,
  // tensor-parallel reductions inside the node, tied embeddings between the first and last
  // stage, then the data-parallel gradient ReduceScatter and parameter AllGather.
  return {
      {OpKind::kSendRecv, CommScope::kPp, 1 * kMiB},
      {OpKind::kAllReduce, CommScope::kNode, 16 * kMiB},
      {OpKind::kAllReduce, CommScope::kPp, 2 * kMiB},
      {OpKind::kReduceScatter, CommScope::kDp, 8 * kMiB},
      {OpKind::kAllGather, CommScope::kDp, 8 * kMiB},
  };
}

void ScaleWorkload(double scale, std::vector<StepSpec>* workload) {
  for (StepSpec& s : *workload) {
    s.bytes = std::max<uint64_t>(4096, std::llround(static_cast<double>(s.bytes) * scale));
  }
}

const char* OpName(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce:
      return "AllReduce";
    case OpKind::kAllGather:
      return "AllGather";
    case OpKind::kReduceScatter:
      return "ReduceScatter";
    case OpKind::kSendRecv:
      return "SendRecv";
  }
  return "Invalid";
}

double BusFactor(OpKind op, int nranks) {
  const double n = nranks;
  switch (op) {
    case OpKind::kAllReduce:
      return 2.0 * (n - 1) / n;
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
      return (n - 1) / n;
    case OpKind::kSendRecv:
      return 1.0;
  }
  return 0.0;
}

KernelPhaseBounds PhaseBounds(int64_t start, int64_t all_arrived, int64_t stop) {
  KernelPhaseBounds b;
  if (stop == kNever) return b;
  b.sync_end = std::clamp(all_arrived, start, stop);
  b.final_sync = stop - std::min(kFinalSyncNs, (stop - b.sync_end) / 2);
  return b;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t CommHash(std::string_view job_id, std::string_view comm_name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  auto feed = [&h](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  };
  feed(job_id);
  feed("/");
  feed(comm_name);
  return SplitMix64(h);
}

Timeline::Timeline(TimelineConfig config)
    : config_(std::move(config)),
      prev_end_(world_size(), config_.t0_ns),
      slow_(world_size(), false) {
  for (int r : config_.slow_ranks) {
    if (r >= 0 && r < world_size()) slow_[r] = true;
  }
  for (int scope = 0; scope < kScopes; ++scope) {
    const auto s = static_cast<CommScope>(scope);
    members_[scope].resize(Instances(s));
    for (int r = 0; r < world_size(); ++r) {
      const int g = InstanceOf(s, r);
      if (g < static_cast<int>(members_[scope].size())) members_[scope][g].push_back(r);
    }
  }
  step_.arrival.resize(world_size());
  step_.end.resize(world_size());
  step_.all_arrived.resize(world_size());
  step_.in_run = true;  // the step before step 0 "ran", so step 0 may
}

int64_t Timeline::GapNs(int rank, int64_t step) const {
  int64_t gap = config_.gap_ns;
  if (config_.jitter_ns > 0) {
    uint64_t h = SplitMix64(config_.seed);
    h = SplitMix64(h ^ static_cast<uint64_t>(rank));
    h = SplitMix64(h ^ static_cast<uint64_t>(step));
    const uint64_t span = 2 * static_cast<uint64_t>(config_.jitter_ns) + 1;
    gap += static_cast<int64_t>(h % span) - config_.jitter_ns;
  }
  if (slow_[rank] && (!config_.slow_before_node ||
                      config_.workload[step % config_.workload.size()].scope == CommScope::kNode)) {
    gap += config_.slow_ns;
  }
  return std::max<int64_t>(gap, 0);
}

int Timeline::Instances(CommScope scope) const {
  const int k = config_.ranks_per_node;
  switch (scope) {
    case CommScope::kWorld:
      return 1;
    case CommScope::kNode:
      return config_.nodes;
    case CommScope::kDp:
      return config_.pp_stages * k;
    case CommScope::kPp:
      return config_.nodes / std::max(config_.pp_stages, 1) * k;
    case CommScope::kSplit:
      return std::min(k, 2);
  }
  return 1;
}

int Timeline::InstanceOf(CommScope scope, int rank) const {
  const int k = config_.ranks_per_node;
  const int node = NodeOf(rank);
  const int local = rank % k;
  const int stages = std::max(config_.pp_stages, 1);
  switch (scope) {
    case CommScope::kWorld:
      return 0;
    case CommScope::kNode:
      return node;
    case CommScope::kDp:
      return (node % stages) * k + local;
    case CommScope::kPp:
      return (node / stages) * k + local;
    case CommScope::kSplit:
      return local % 2;
  }
  return 0;
}

const std::vector<int>& Timeline::Members(CommScope scope, int instance) const {
  return members_[static_cast<int>(scope)][instance];
}

int Timeline::NodesSpanned(CommScope scope, int instance) const {
  int nodes = 0;
  int last_node = -1;
  for (int r : Members(scope, instance)) {  // ascending ranks: a node's ranks are adjacent
    if (NodeOf(r) != last_node) ++nodes;
    last_node = NodeOf(r);
  }
  return nodes;
}

int Timeline::DegradedInstance(CommScope scope) const {
  if (config_.degrade_node < 0 || config_.degrade_node >= config_.nodes) return 0;
  return InstanceOf(scope, config_.degrade_node * config_.ranks_per_node);
}

double Timeline::BandwidthGbs(CommScope scope, int instance, int64_t at_ns) const {
  if (NodesSpanned(scope, instance) <= 1) return config_.nvlink_gbs;
  bool spans_degraded = false;
  for (int r : Members(scope, instance)) spans_degraded |= NodeOf(r) == config_.degrade_node;
  const bool degraded = spans_degraded && at_ns >= config_.degrade_at_ns;
  return degraded ? config_.net_gbs * config_.degrade_factor : config_.net_gbs;
}

double Timeline::BandwidthGbs(CommScope scope, int64_t at_ns) const {
  return BandwidthGbs(scope, DegradedInstance(scope), at_ns);
}

int64_t Timeline::TransferNs(const StepSpec& spec, CommScope scope, int instance,
                             int64_t at_ns) const {
  const int nranks = static_cast<int>(Members(scope, instance).size());
  const double bus_bytes = BusFactor(spec.op, nranks) * static_cast<double>(spec.bytes);
  // 1 GB/s moves exactly one byte per ns.
  const double ns = bus_bytes / BandwidthGbs(scope, instance, at_ns);
  return std::max<int64_t>(1, std::llround(ns));
}

int64_t Timeline::TransferNs(const StepSpec& spec, int64_t at_ns) const {
  return TransferNs(spec, spec.scope, DegradedInstance(spec.scope), at_ns);
}

int64_t Timeline::ClockOffsetNs(int node) const {
  return node % 2 == 0 ? -config_.clock_skew_ns : config_.clock_skew_ns;
}

uint64_t Timeline::GpuTimerNs(int rank, int64_t virtual_ns, int channel) const {
  return static_cast<uint64_t>(virtual_ns + ClockOffsetNs(NodeOf(rank)) + channel * kChannelSkewNs);
}

int64_t Timeline::GroupEnd(int instance, const std::vector<int>& members) {
  int64_t last = 0;
  for (int r : members) {
    if (step_.arrival[r] == kNever) return kNever;  // the op waits for r forever
    last = std::max(last, step_.arrival[r]);
  }
  for (int r : members) step_.all_arrived[r] = last;
  const int64_t end = last + TransferNs(*step_.spec, step_.scope, instance, last);
  const RankFault& f = config_.fault;
  if (f.kind == FaultKind::kKill &&
      std::find(members.begin(), members.end(), f.rank) != members.end()) {
    // The killed rank arrived (else we returned above) but dies before the op finishes.
    if (end > f.at_ns) return kNever;
  }
  return end;
}

const StepTimes& Timeline::Advance() {
  const int64_t k = ++step_.index;
  step_.spec = &config_.workload[k % config_.workload.size()];

  step_.first_arrival = kNever;
  for (int r = 0; r < world_size(); ++r) {
    int64_t a = prev_end_[r] == kNever ? kNever : prev_end_[r] + GapNs(r, k);
    const RankFault& f = config_.fault;
    if (f.kind != FaultKind::kNone && f.rank == r && a != kNever && a >= f.at_ns) a = kNever;
    step_.arrival[r] = a;
    step_.first_arrival = std::min(step_.first_arrival, a);
  }

  // Every rank computes the same first arrival, so all agree on which side of the split a step is.
  step_.scope = step_.spec->scope;
  if (step_.scope == CommScope::kWorld && step_.first_arrival != kNever &&
      step_.first_arrival >= config_.split_at_ns) {
    step_.scope = CommScope::kSplit;
  }
  for (int g = 0; g < Instances(step_.scope); ++g) {
    const std::vector<int>& members = Members(step_.scope, g);
    for (int r : members) step_.all_arrived[r] = kNever;
    const int64_t end = GroupEnd(g, members);
    for (int r : members) step_.end[r] = end;
  }
  prev_end_ = step_.end;

  step_.in_run = step_.in_run && k < config_.max_steps && step_.first_arrival < config_.end_ns;
  return step_;
}

}  // namespace ncclwatch::simjob
