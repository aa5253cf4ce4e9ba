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
  step_.arrival.resize(world_size());
  step_.end.resize(world_size());
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
  if (slow_[rank]) gap += config_.slow_ns;
  return std::max<int64_t>(gap, 0);
}

double Timeline::BandwidthGbs(CommScope scope, int64_t at_ns) const {
  const bool multi_node = scope == CommScope::kWorld && config_.nodes > 1;
  if (!multi_node) return config_.nvlink_gbs;
  // The world communicator contains every node, so it contains the degraded one if any.
  const bool degraded = config_.degrade_node >= 0 && config_.degrade_node < config_.nodes &&
                        at_ns >= config_.degrade_at_ns;
  return degraded ? config_.net_gbs * config_.degrade_factor : config_.net_gbs;
}

int64_t Timeline::TransferNs(const StepSpec& spec, int64_t at_ns) const {
  const int nranks = spec.scope == CommScope::kWorld ? world_size() : config_.ranks_per_node;
  const double bus_bytes = BusFactor(spec.op, nranks) * static_cast<double>(spec.bytes);
  // 1 GB/s moves exactly one byte per ns.
  const double ns = bus_bytes / BandwidthGbs(spec.scope, at_ns);
  return std::max<int64_t>(1, std::llround(ns));
}

int64_t Timeline::ClockOffsetNs(int node) const {
  return node % 2 == 0 ? -config_.clock_skew_ns : config_.clock_skew_ns;
}

uint64_t Timeline::GpuTimerNs(int rank, int64_t virtual_ns, int channel) const {
  return static_cast<uint64_t>(virtual_ns + ClockOffsetNs(NodeOf(rank)) + channel * kChannelSkewNs);
}

int64_t Timeline::GroupEnd(const std::vector<int>& members) const {
  int64_t last = 0;
  for (int r : members) {
    if (step_.arrival[r] == kNever) return kNever;  // the op waits for r forever
    last = std::max(last, step_.arrival[r]);
  }
  const int64_t end = last + TransferNs(*step_.spec, last);
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

  // One communicator instance per group: the world, or each node.
  const int groups = step_.spec->scope == CommScope::kWorld ? 1 : config_.nodes;
  std::vector<int> members;
  for (int g = 0; g < groups; ++g) {
    members.clear();
    for (int r = 0; r < world_size(); ++r) {
      if (groups == 1 || NodeOf(r) == g) members.push_back(r);
    }
    const int64_t end = GroupEnd(members);
    for (int r : members) step_.end[r] = end;
  }
  prev_end_ = step_.end;

  step_.in_run = step_.in_run && k < config_.max_steps && step_.first_arrival < config_.end_ns;
  return step_;
}

}  // namespace ncclwatch::simjob
