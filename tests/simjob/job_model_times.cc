// How long things take in the job model: compute (jitter, warm-up, faults), stalls, transfers,
// and the GPU clocks. The equations are in job_model.h.
#include <algorithm>
#include <cmath>

#include "tests/simjob/job_model.h"

namespace ncclwatch::simjob {
namespace {

// A uniform double in [0, 1) from (seed, salt, a, b).
double Uniform(uint64_t seed, uint64_t salt, uint64_t a, uint64_t b) {
  uint64_t h = SplitMix64(seed ^ salt);
  h = SplitMix64(h ^ a);
  h = SplitMix64(h ^ b);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

constexpr uint64_t kJitterSalt = 0;
constexpr uint64_t kWarmupSalt = 0x7761726d7570ull;
constexpr uint64_t kStallSalt = 0x7374616c6cull;

OpKind BusKind(JobOpKind kind) {
  switch (kind) {
    case JobOpKind::kAllReduce:
      return OpKind::kAllReduce;
    case JobOpKind::kReduceScatter:
      return OpKind::kReduceScatter;
    case JobOpKind::kAllGather:
      return OpKind::kAllGather;
    case JobOpKind::kSend:
    case JobOpKind::kRecv:
      return OpKind::kSendRecv;
  }
  return OpKind::kSendRecv;
}

}  // namespace

int64_t JobModel::StallNs(int rank, int64_t iteration) const {
  const double u = 2 * Uniform(config_.seed, kStallSalt, rank, iteration) - 1;
  return std::llround(config_.stall_ns * (1 + config_.stall_spread * u));
}

double JobModel::FaultFactor(int rank, int64_t at_ns, bool expert) const {
  double f = 1.0;
  for (const SlowGpu& s : config_.slow) {
    if (s.rank == rank && at_ns >= s.at_ns && (expert || !s.expert_only)) f *= s.factor;
  }
  for (const DriftingGpu& d : config_.drifting) {
    if (d.rank == rank && at_ns >= d.at_ns) f *= 1 + d.per_s * (at_ns - d.at_ns) * 1e-9;
  }
  for (const ThrottledGpu& t : config_.throttled) {
    const int64_t period = t.on_ns + t.off_ns;
    if (t.rank != rank || at_ns < t.at_ns || period <= 0) continue;
    if ((at_ns - t.at_ns) % period < t.on_ns) f *= t.factor;
  }
  return f;
}

double JobModel::WarmupFactor(int rank, int64_t iteration) const {
  if (iteration >= config_.warmup_iterations) return 1.0;
  const double w = config_.warmup_iterations;
  const double u = Uniform(config_.seed, kWarmupSalt, rank, iteration);
  return 1.0 + config_.warmup_extra * (w - iteration) / w * (0.5 + u);
}

int64_t JobModel::ComputeNs(int rank, double warmup, const JobOp& op, int64_t start_ns) const {
  if (op.compute_ns <= 0) return 0;
  const double u = 2 * Uniform(config_.seed, kJitterSalt, rank, op.index) - 1;
  const double f =
      warmup * FaultFactor(rank, start_ns, op.expert_compute) * (1 + config_.compute_jitter * u);
  return std::max<int64_t>(0, std::llround(op.compute_ns * f));
}

JobModel::Route JobModel::RouteOf(CommRef comm, int rank, const JobTask& task) const {
  const int id = layout_.CommId(comm);
  if (!IsP2p(task.kind)) return {multi_node_[id], touches_degraded_[id]};
  const int a = layout_.NodeOf(rank);
  const int b = layout_.NodeOf(layout_.Members(comm.family, comm.instance)[task.peer]);
  return {a != b, a == config_.degrade_node || b == config_.degrade_node};
}

double JobModel::BandwidthGbs(CommRef comm, int rank, const JobTask& task, int64_t at_ns) const {
  const Route route = RouteOf(comm, rank, task);
  if (!route.multi_node) return config_.nvlink_gbs;
  const bool degraded = route.degraded && at_ns >= config_.degrade_at_ns;
  return degraded ? config_.net_gbs * config_.degrade_factor : config_.net_gbs;
}

int64_t JobModel::TransferNs(CommRef comm, int rank, const JobTask& task, int64_t at_ns) const {
  const int n = static_cast<int>(layout_.Members(comm.family, comm.instance).size());
  const double bus_bytes = BusFactor(BusKind(task.kind), n) * static_cast<double>(task.bytes);
  const int64_t latency =
      RouteOf(comm, rank, task).multi_node ? config_.net_latency_ns : config_.nvlink_latency_ns;
  // 1 GB/s moves one byte per ns.
  return std::max<int64_t>(
      1, latency + std::llround(bus_bytes / BandwidthGbs(comm, rank, task, at_ns)));
}

int64_t JobModel::ClockOffsetNs(int node) const {
  return node % 2 == 0 ? -config_.clock_skew_ns : config_.clock_skew_ns;
}

uint64_t JobModel::GpuTimerNs(int rank, int64_t virtual_ns, int channel) const {
  return static_cast<uint64_t>(virtual_ns + ClockOffsetNs(layout_.NodeOf(rank)) +
                               channel * kChannelSkewNs);
}

}  // namespace ncclwatch::simjob
