// --layout megatron's flags: their cross-checks (Validate has already checked that every flag
// given applies to this layout), the faults in words, and the job model they
// describe (job_model.h). The flag table itself is options.cc's; the contract is in options.h.
#include <algorithm>
#include <cmath>
#include <string>

#include "tests/simjob/job_common.h"
#include "tests/simjob/megatron_layout.h"
#include "tests/simjob/options.h"

namespace ncclwatch::simjob {
namespace {

struct Shape {
  int tp = 1, pp = 1, dp = 1;
};

// --tp defaults to a node's GPUs, --dp to what the world leaves.
Shape ShapeOf(const Options& o) {
  Shape s;
  s.tp = o.tp > 0 ? o.tp : o.ranks_per_node;
  s.pp = o.pp_stages;
  s.dp = o.dp > 0 ? o.dp : o.nodes * o.ranks_per_node / std::max(1, s.tp * s.pp);
  return s;
}

uint64_t Scaled(uint64_t bytes, double scale) {
  return std::max<uint64_t>(4096, std::llround(static_cast<double>(bytes) * scale));
}

}  // namespace

void ValidateMegatron(const Options& o) {
  const int world = o.nodes * o.ranks_per_node;
  const Shape s = ShapeOf(o);
  if (o.ranks_per_node % s.tp != 0) {
    UsageError("--tp must divide --ranks-per-node (tensor-parallel groups stay inside a node)");
  }
  if (s.tp * s.pp * s.dp != world) {
    UsageError(StrFormat("--tp %d x --pp %d x --dp %d must equal nodes x ranks-per-node = %d", s.tp,
                         s.pp, s.dp, world));
  }
  if (!o.stage_factors.empty() && static_cast<int>(o.stage_factors.size()) != s.pp) {
    UsageError(StrFormat("--stage-factors needs %d factors, one per stage", s.pp));
  }
  for (int r : o.throttle_ranks) {
    if (r >= world) UsageError("--throttle-rank must be < " + std::to_string(world));
  }
  for (int r : o.drift_ranks) {
    if (r >= world) UsageError("--drift-rank must be < " + std::to_string(world));
  }
  if (o.moe_expert_us > 0 && s.dp < 2) {
    UsageError(
        "--moe-expert-us needs --dp of at least 2 (the experts are spread over the DP "
        "group)");
  }
  if (o.slow_expert_only && o.moe_expert_us <= 0) {
    UsageError("--slow-scope=expert needs --moe-expert-us > 0 (a dense job has no experts)");
  }
  if (Given(o, "moe-dispatcher") && o.moe_expert_us <= 0) {
    UsageError("--moe-dispatcher needs --moe-expert-us > 0 (a dense job dispatches no tokens)");
  }
  if (o.fsdp && s.dp < 2) {
    UsageError("--fsdp needs --dp of at least 2 (parameters are sharded over the DP group)");
  }
  if (Given(o, "fsdp-layer-mb") && !o.fsdp) UsageError("--fsdp-layer-mb needs --fsdp");
  if (o.virtual_stages > 1) {
    if (s.pp < 2) {
      UsageError("--virtual-stages > 1 needs --pp of at least 2 (chunks interleave over stages)");
    }
    if (o.microbatches % s.pp != 0) {
      UsageError(StrFormat(
          "--virtual-stages > 1 needs --microbatches a multiple of --pp %d (Megatron's rule)",
          s.pp));
    }
    if (o.layers % o.virtual_stages != 0) {
      UsageError(StrFormat("--virtual-stages %d must divide --layers %d (layers per chunk)",
                           o.virtual_stages, o.layers));
    }
  }
  if (o.cp_ring && s.tp < 2) {
    UsageError("--cp-ring needs --tp of at least 2 (the ring runs over the TP group)");
  }
  if (Given(o, "cp-bytes") && !o.cp_ring) UsageError("--cp-bytes needs --cp-ring");
  for (int r : o.bogus_ranks) {
    if (r >= world) UsageError("--bogus-rank must be < " + std::to_string(world));
  }
  for (int r : o.lose_ranks) {
    if (r >= world) UsageError("--lose-rank must be < " + std::to_string(world));
  }
  if (Given(o, "fabric-hang-after-s") && o.fabric_hang_comm.empty()) {
    UsageError("--fabric-hang-after-s needs --fabric-hang-comm");
  }
  if (!o.fabric_hang_comm.empty()) {
    const MegatronLayout layout(s.tp, s.pp, s.dp, o.ranks_per_node);
    CommRef comm;
    if (!layout.FindComm(o.fabric_hang_comm, &comm)) {
      UsageError("--fabric-hang-comm: this layout has no communicator '" + o.fabric_hang_comm +
                 "' (names: tp<i>, dp<i>, pp<i>, mp<i>, emb<i>, world; see the summary)");
    }
  }
}

std::string DescribeMegatronFaults(const Options& o) {
  std::string s;
  for (int r : o.slow_ranks) {
    s +=
        StrFormat(" slow rank %d: %s x%.2f from t0+%.3f s;", r,
                  o.slow_expert_only ? "expert compute" : "compute", o.slow_factor, o.slow_after_s);
  }
  if (o.slow_node >= 0) {
    s += StrFormat(" slow node %d: compute x%.2f from t0+%.3f s;", o.slow_node, o.slow_factor,
                   o.slow_after_s);
  }
  for (int r : o.throttle_ranks) {
    s += StrFormat(" rank %d throttled x%.2f, %.3f s on / %.3f s off;", r, o.throttle_factor,
                   o.throttle_on_s, o.throttle_off_s);
  }
  if (o.degrade_node >= 0 && o.degrade_factor != 1.0) {
    s += StrFormat(" node %d network x%.3f from t0+%.3f s;", o.degrade_node, o.degrade_factor,
                   o.degrade_after_s);
  }
  if (o.clock_skew_ms != 0) s += StrFormat(" GPU clock skew +/-%.3f ms;", o.clock_skew_ms);
  if (o.hang_rank >= 0) {
    s += StrFormat(" rank %d stops enqueuing at t0+%.3f s;", o.hang_rank, o.hang_after_s);
  }
  if (o.kill_rank >= 0) {
    s += StrFormat(" rank %d killed at t0+%.3f s;", o.kill_rank, o.kill_after_s);
  }
  if (!o.fabric_hang_comm.empty()) {
    s += StrFormat(" communicator %s hangs from t0+%.3f s;", o.fabric_hang_comm.c_str(),
                   o.fabric_hang_after_s);
  }
  if (o.stall_every_s > 0) {
    s += StrFormat(" job-wide stalls of %.0f ms every %.3f s (not a fault);", o.stall_ms,
                   o.stall_every_s);
  }
  for (int r : o.drift_ranks) {
    s += StrFormat(" rank %d drifts slower by %.1f%%/s from t0+%.3f s;", r, o.drift_per_s * 100,
                   o.drift_after_s);
  }
  if (o.moe_expert_us > 0) {
    s += StrFormat(
        " mixture of experts%s: %.0f us of expert compute per layer, x%.2f on the "
        "layer's hot rank, which moves with the routing (not a fault);",
        o.moe_alltoall ? " (all-to-all dispatcher)" : "", o.moe_expert_us, o.moe_hot_factor);
  }
  for (int r : o.bogus_ranks) {
    s += StrFormat(" rank %d: one op in %d reports a 5 s kernel (telemetry that lies);", r,
                   o.bogus_every);
  }
  for (int r : o.lose_ranks) {
    s += StrFormat(" rank %d: one op in %d loses its profiler events (lost telemetry);", r,
                   o.lose_every);
  }
  if (o.gc_every_s > 0) {
    s += StrFormat(
        " one rank's host pauses %.0f ms every %.3f s, a different one each time (not "
        "a fault);",
        o.gc_ms, o.gc_every_s);
  }
  return s.empty() ? " none" : s;
}

JobModelConfig MakeJobModelConfig(const Options& o, int64_t t0_ns) {
  const Shape shape = ShapeOf(o);
  JobModelConfig c;
  c.tp = shape.tp;
  c.pp = shape.pp;
  c.dp = shape.dp;
  c.gpus_per_node = o.ranks_per_node;
  ProgramSpec& p = c.program;
  p.microbatches = o.microbatches;
  p.layers = o.layers;
  p.layer_fwd_ns = o.layer_us * 1000;
  p.optimizer_ns = p.layers * p.layer_fwd_ns;
  p.stage_factors = o.stage_factors;
  p.world_every = o.world_every;
  p.moe_expert_ns = std::llround(o.moe_expert_us * 1000);
  p.moe_hot_factor = o.moe_hot_factor;
  p.moe_seed = o.seed;
  if (o.moe_alltoall) p.moe_dispatcher = MoeDispatcher::kAllToAll;
  p.fsdp = o.fsdp;
  if (o.fsdp_layer_mb > 0) p.fsdp_layer_bytes = std::llround(o.fsdp_layer_mb * 1048576.0);
  p.virtual_stages = o.virtual_stages;
  p.cp_ring = o.cp_ring;
  p.cp_bytes = static_cast<uint64_t>(o.cp_bytes);
  p.tp_bytes = Scaled(p.tp_bytes, o.msg_scale);
  p.pp_bytes = Scaled(p.pp_bytes, o.msg_scale);
  p.dp_bytes = Scaled(p.dp_bytes, o.msg_scale);
  p.emb_bytes = Scaled(p.emb_bytes, o.msg_scale);
  c.seed = o.seed;
  c.t0_ns = t0_ns;
  c.end_ns = t0_ns + SecondsToNs(o.duration_s);
  if (o.iterations > 0) c.max_iterations = o.iterations;
  c.compute_jitter = o.compute_jitter;
  c.warmup_iterations = o.warmup_iterations;
  c.host_ahead = o.host_ahead;
  c.net_gbs = o.net_gbs;
  c.nvlink_gbs = o.nvlink_gbs;
  if (o.stall_every_s > 0) {
    c.stall_every_ns = SecondsToNs(o.stall_every_s);
    c.stall_ns = std::llround(o.stall_ms * 1e6);
  }
  const int64_t slow_at = t0_ns + SecondsToNs(o.slow_after_s);
  for (int r : o.slow_ranks) c.slow.push_back({r, o.slow_factor, slow_at, o.slow_expert_only});
  for (int l = 0; o.slow_node >= 0 && l < o.ranks_per_node; ++l) {
    c.slow.push_back(
        {o.slow_node * o.ranks_per_node + l, o.slow_factor, slow_at, o.slow_expert_only});
  }
  for (int r : o.drift_ranks) {
    c.drifting.push_back({r, o.drift_per_s, t0_ns + SecondsToNs(o.drift_after_s)});
  }
  if (o.gc_every_s > 0) {
    c.gc_every_ns = SecondsToNs(o.gc_every_s);
    c.gc_ns = std::llround(o.gc_ms * 1e6);
  }
  for (int r : o.throttle_ranks) {
    c.throttled.push_back(
        {r, o.throttle_factor, SecondsToNs(o.throttle_on_s), SecondsToNs(o.throttle_off_s), t0_ns});
  }
  c.degrade_node = o.degrade_node;
  c.degrade_factor = o.degrade_factor;
  c.degrade_at_ns = t0_ns + SecondsToNs(o.degrade_after_s);
  if (o.hang_rank >= 0) {
    c.hang_rank = o.hang_rank;
    c.hang_at_ns = t0_ns + SecondsToNs(o.hang_after_s);
  }
  if (o.kill_rank >= 0) {
    c.kill_rank = o.kill_rank;
    c.kill_at_ns = t0_ns + SecondsToNs(o.kill_after_s);
  }
  if (!o.fabric_hang_comm.empty()) {
    c.fabric_hang_comm = o.fabric_hang_comm;
    c.fabric_hang_at_ns = t0_ns + SecondsToNs(o.fabric_hang_after_s);
  }
  c.clock_skew_ns = std::llround(o.clock_skew_ms * 1e6);
  return c;
}

}  // namespace ncclwatch::simjob
