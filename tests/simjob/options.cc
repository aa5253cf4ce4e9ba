// The flag table and the mapping from flags to the time model of the world and 3d layouts
// (megatron_config.cc maps them to the megatron job model).
#include "tests/simjob/options.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/simjob/job_common.h"

namespace ncclwatch::simjob {
namespace {

template <typename T>
bool ParseInt(const char* text, int64_t lo, int64_t hi, T* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<T>(v);
  return true;
}

bool ParseDouble(const char* text, double lo, double hi, double* out) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= lo && v <= hi)) return false;
  *out = v;
  return true;
}

// A comma-separated list of ranks, appended to *out (a rank of -1 adds nothing).
bool ParseRankList(const char* text, std::vector<int>* out) {
  std::string item;
  for (const char* p = text;; ++p) {
    if (*p != ',' && *p != '\0') {
      item += *p;
      continue;
    }
    int r = -1;
    if (!ParseInt(item.c_str(), -1, kMaxRanks, &r)) return false;
    if (r >= 0) out->push_back(r);
    item.clear();
    if (*p == '\0') return true;
  }
}

// A comma-separated list of positive factors.
bool ParseFactorList(const char* text, std::vector<double>* out) {
  out->clear();
  std::string item;
  for (const char* p = text;; ++p) {
    if (*p != ',' && *p != '\0') {
      item += *p;
      continue;
    }
    double f = 0;
    if (!ParseDouble(item.c_str(), 1e-3, 1e3, &f)) return false;
    out->push_back(f);
    item.clear();
    if (*p == '\0') return true;
  }
}

bool Enable(bool* flag) {
  *flag = true;
  return true;
}

// The layouts a flag applies to; giving it with another layout is an error.
enum LayoutMask : unsigned { kWorldOr3d = 1, kMegatron = 2, kAnyLayout = 3 };

// One row of the flag table: parsing, --help and the layout check all come from it.
struct Flag {
  const char* name;   // without the leading "--"
  const char* value;  // placeholder shown in --help; nullptr for a switch
  const char* default_text;
  const char* help;
  bool (*set)(Options* o, const char* v);  // false: the value is invalid
  unsigned layouts = kAnyLayout;
};

const Flag* FindFlag(const std::string& name);

const Flag kFlags[] = {
    {"plugin", "PATH", "(required)", "profiler plugin .so, dlopen'ed like NCCL does",
     [](Options* o, const char* v) {
       o->plugin = v;
       return !o->plugin.empty();
     }},
    {"nodes", "M", "2", "simulated nodes",
     [](Options* o, const char* v) { return ParseInt(v, 1, kMaxRanks, &o->nodes); }},
    {"ranks-per-node", "K", "2", "ranks (processes, GPUs) per node; ranks are node-major",
     [](Options* o, const char* v) { return ParseInt(v, 1, kMaxRanks, &o->ranks_per_node); }},
    {"abi", "4|5|6|7", "7", "profiler ABI: resolves the symbol ncclProfiler_v<N>",
     [](Options* o, const char* v) { return ParseInt(v, 4, 7, &o->abi); }},
    {"user-tag", "none|iteration|N", "none",
     "v7 userTag of every call: iteration = its training iteration + 1; N: that (< 2^63)",
     [](Options* o, const char* v) {
       o->user_tag_iteration = std::strcmp(v, "iteration") == 0;
       o->user_tag = 0;
       return o->user_tag_iteration || std::strcmp(v, "none") == 0 ||
              ParseInt(v, 1, INT64_MAX, &o->user_tag);
     }},
    {"duration-s", "S", "10", "run length from t0; steps starting later are not run",
     [](Options* o, const char* v) { return ParseDouble(v, 0.001, 1e6, &o->duration_s); }},
    {"iterations", "N", "0", "stop after N workload iterations (0: only --duration-s)",
     [](Options* o, const char* v) { return ParseInt(v, 0, int64_t{1} << 40, &o->iterations); }},
    {"seed", "N", "1", "seed of the deterministic jitter",
     [](Options* o, const char* v) { return ParseInt(v, 0, INT64_MAX, &o->seed); }},
    {"gap-us", "US", "5000", "world/3d: base host gap before every step (compute time)",
     [](Options* o, const char* v) { return ParseInt(v, 0, int64_t{1} << 40, &o->gap_us); },
     kWorldOr3d},
    {"jitter-us", "US", "200", "world/3d: gap jitter, uniform in +/- this, per (rank, step)",
     [](Options* o, const char* v) { return ParseInt(v, 0, int64_t{1} << 40, &o->jitter_us); },
     kWorldOr3d},
    {"slow-rank", "R[,R...]", "(none)",
     "slow ranks (repeatable): --slow-us late every step; megatron: --slow-factor x compute",
     [](Options* o, const char* v) { return ParseRankList(v, &o->slow_ranks); }},
    {"slow-node", "N", "-1", "node whose ranks all arrive --slow-us late (-1: none)",
     [](Options* o, const char* v) { return ParseInt(v, -1, kMaxRanks, &o->slow_node); }},
    {"slow-us", "US", "2000", "world/3d: extra gap of the slow rank/node",
     [](Options* o, const char* v) { return ParseInt(v, 0, int64_t{1} << 40, &o->slow_us); },
     kWorldOr3d},
    {"slow-before", "world|node", "world",
     "world/3d: the slow extra before every step, or only before node-local (NVLink) steps",
     [](Options* o, const char* v) {
       o->slow_before_node = std::strcmp(v, "node") == 0;
       return o->slow_before_node || std::strcmp(v, "world") == 0;
     },
     kWorldOr3d},
    {"slow-factor", "F", "2.0", "megatron: slow ranks/node compute F x as long",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-3, 1e3, &o->slow_factor); },
     kMegatron},
    {"slow-after-s", "S", "0", "megatron: slow from t0 + S (0: from the start)",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->slow_after_s); }, kMegatron},
    {"slow-scope", "all|expert", "all",
     "megatron: what the slow ranks/node compute slower: everything, or only their "
     "mixture-of-experts expert compute (needs --moe-expert-us)",
     [](Options* o, const char* v) {
       o->slow_expert_only = std::strcmp(v, "expert") == 0;
       return o->slow_expert_only || std::strcmp(v, "all") == 0;
     },
     kMegatron},
    {"throttle-rank", "R[,R...]", "(none)",
     "megatron: ranks throttled in bursts (repeatable): --throttle-factor x compute",
     [](Options* o, const char* v) { return ParseRankList(v, &o->throttle_ranks); }, kMegatron},
    {"throttle-factor", "F", "2.0", "megatron: compute factor while throttled",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-3, 1e3, &o->throttle_factor); },
     kMegatron},
    {"throttle-on-s", "S", "2", "megatron: throttled for S, from t0 on ...",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-3, 1e6, &o->throttle_on_s); },
     kMegatron},
    {"throttle-off-s", "S", "2", "megatron: ... then normal for S, repeating",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->throttle_off_s); },
     kMegatron},
    {"net-gbs", "GB/S", "25", "bandwidth of communicators spanning several nodes",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-6, 1e9, &o->net_gbs); }},
    {"nvlink-gbs", "GB/S", "300", "bandwidth of single-node communicators",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-6, 1e9, &o->nvlink_gbs); }},
    {"degrade-node", "N", "-1", "node with a degraded NIC (-1: none)",
     [](Options* o, const char* v) { return ParseInt(v, -1, kMaxRanks, &o->degrade_node); }},
    {"degrade-factor", "F", "1.0", "multi-node communicators containing --degrade-node get F x bw",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-6, 1.0, &o->degrade_factor); }},
    {"degrade-after-s", "S", "0", "the NIC degrades at t0 + S (0: from the start)",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->degrade_after_s); }},
    {"clock-skew-ms", "MS", "0", "GPU clock of node n is off by (n even ? -MS : +MS)",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->clock_skew_ms); }},
    {"channels", "C", "4", "channels per collective/p2p (KernelCh events per op)",
     [](Options* o, const char* v) { return ParseInt(v, 1, 64, &o->channels); }},
    {"hang-rank", "R", "-1",
     "rank that stops arriving at steps after --hang-after-s (megatron: stops enqueuing)",
     [](Options* o, const char* v) { return ParseInt(v, -1, kMaxRanks, &o->hang_rank); }},
    {"hang-after-s", "S", "0", "hang time, seconds after t0",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->hang_after_s); }},
    {"kill-rank", "R", "-1", "rank whose process _exit(0)s without finalize at --kill-after-s",
     [](Options* o, const char* v) { return ParseInt(v, -1, kMaxRanks, &o->kill_rank); }},
    {"kill-after-s", "S", "0", "kill time, seconds after t0",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->kill_after_s); }},
    {"agent-addr", "TEMPLATE", "(unset)",
     "sets NCCLWATCH_AGENT_ADDR per rank, {node} -> node index",
     [](Options* o, const char* v) {
       o->has_agent_addr = true;
       o->agent_addr = v;
       return true;
     }},
    {"job-id", "ID", "(unset)", "sets NCCLWATCH_JOB_ID; comm hashes use it (else \"simjob\")",
     [](Options* o, const char* v) {
       o->job_id = v;
       return !o->job_id.empty();
     }},
    {"env", "K=V", "(none)", "extra environment (repeatable); {node} {rank} {local_rank} expanded",
     [](Options* o, const char* v) {
       const char* eq = std::strchr(v, '=');
       if (eq == nullptr || eq == v) return false;
       o->env.emplace_back(v);
       return true;
     }},
    {"node-comm", nullptr, "off", "add a per-node communicator with an AllReduce 16 MiB step",
     [](Options* o, const char*) { return Enable(&o->node_comm); }, kWorldOr3d},
    {"gpu-uuids", nullptr, "off",
     "NVIDIA_VISIBLE_DEVICES per rank: its node's fake GPU UUIDs, as the device plugin sets it",
     [](Options* o, const char*) { return Enable(&o->gpu_uuids); }},
    {"layout", "world|3d|megatron", "world",
     "world: one world communicator; 3d: TP in nodes, PP/DP across; megatron: a 1F1B job",
     [](Options* o, const char* v) {
       o->layout_3d = std::strcmp(v, "3d") == 0;
       o->layout_megatron = std::strcmp(v, "megatron") == 0;
       return o->layout_3d || o->layout_megatron || std::strcmp(v, "world") == 0;
     }},
    {"pp-stages", "P", "2", "3d, megatron: pipeline stages (3d: nodes a multiple, >= 2 x P)",
     [](Options* o, const char* v) { return ParseInt(v, 1, kMaxRanks, &o->pp_stages); }},
    {"pp", "P", "2", "megatron: pipeline stages (the same as --pp-stages)",
     [](Options* o, const char* v) { return ParseInt(v, 1, kMaxRanks, &o->pp_stages); }, kMegatron},
    {"tp", "N", "(K)", "megatron: tensor-parallel size, divides --ranks-per-node (default K)",
     [](Options* o, const char* v) { return ParseInt(v, 1, kMaxRanks, &o->tp); }, kMegatron},
    {"dp", "N", "(derived)", "megatron: data-parallel size; tp x pp x dp = nodes x K",
     [](Options* o, const char* v) { return ParseInt(v, 1, kMaxRanks, &o->dp); }, kMegatron},
    {"microbatches", "M", "4", "megatron: microbatches per iteration (1F1B)",
     [](Options* o, const char* v) { return ParseInt(v, 1, 4096, &o->microbatches); }, kMegatron},
    {"layers", "L", "2", "megatron: layers per stage, each compute + a TP AllReduce",
     [](Options* o, const char* v) { return ParseInt(v, 1, 4096, &o->layers); }, kMegatron},
    {"layer-us", "US", "1000", "megatron: forward compute per layer and microbatch (backward 2x)",
     [](Options* o, const char* v) { return ParseInt(v, 1, int64_t{1} << 30, &o->layer_us); },
     kMegatron},
    {"stage-factors", "A,B,...", "(all 1)",
     "megatron: per-stage compute (and gradient size) factors, one per stage",
     [](Options* o, const char* v) { return ParseFactorList(v, &o->stage_factors); }, kMegatron},
    {"world-every", "N", "50", "megatron: a 4-byte world AllReduce every N iterations (0: never)",
     [](Options* o, const char* v) { return ParseInt(v, 0, int64_t{1} << 30, &o->world_every); },
     kMegatron},
    {"host-ahead", "N", "4", "megatron: ops the host enqueues ahead of the oldest unfinished one",
     [](Options* o, const char* v) { return ParseInt(v, 0, 4096, &o->host_ahead); }, kMegatron},
    {"warmup-iterations", "N", "3", "megatron: first N iterations slower and uneven",
     [](Options* o, const char* v) { return ParseInt(v, 0, 1 << 30, &o->warmup_iterations); },
     kMegatron},
    {"compute-jitter", "F", "0.02", "megatron: compute jitter, uniform in +/- F x compute",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 0.5, &o->compute_jitter); },
     kMegatron},
    {"stall-every-s", "S", "(none)", "megatron: a job-wide stall every S seconds ...",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-3, 1e6, &o->stall_every_s); },
     kMegatron},
    {"stall-ms", "MS", "200", "megatron: ... of MS +/- 10% per rank, at an iteration boundary",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->stall_ms); }, kMegatron},
    {"gc-every-s", "S", "(none)",
     "megatron: every S seconds one rank's host pauses (garbage collection), a different rank "
     "each time ...",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-3, 1e6, &o->gc_every_s); },
     kMegatron},
    {"gc-ms", "MS", "150", "megatron: ... for MS, at an iteration boundary",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->gc_ms); }, kMegatron},
    {"moe-expert-us", "US", "0",
     "megatron: mixture of experts, AllGather/ReduceScatter dispatcher over the DP group: each "
     "layer's expert compute (0: dense) ...",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e7, &o->moe_expert_us); },
     kMegatron},
    {"moe-hot-factor", "F", "2.0",
     "megatron: ... times F on the layer's hot expert rank, drawn per (iteration, layer, group)",
     [](Options* o, const char* v) { return ParseDouble(v, 1, 100, &o->moe_hot_factor); },
     kMegatron},
    {"moe-dispatcher", "allgather|alltoall", "allgather",
     "megatron: MoE token dispatcher: alltoall = per layer pass ONE group of a Send and a Recv "
     "with every other DP member to dispatch, another to combine; bytes per peer follow the "
     "routing, uniform in [0.5, 1.5) x 4 MiB / dp (needs --moe-expert-us)",
     [](Options* o, const char* v) {
       o->moe_alltoall = std::strcmp(v, "alltoall") == 0;
       return o->moe_alltoall || std::strcmp(v, "allgather") == 0;
     },
     kMegatron},
    {"fsdp", nullptr, "off",
     "megatron: FSDP/ZeRO-3: per layer pass a DP AllGather of its parameters (prefetched one "
     "layer ahead), per backward layer a DP ReduceScatter of its gradients; no end-of-iteration "
     "DP ReduceScatter/AllGather (needs --dp >= 2)",
     [](Options* o, const char*) { return Enable(&o->fsdp); }, kMegatron},
    {"fsdp-layer-mb", "MIB", "(derived)",
     "megatron: --fsdp: one layer's parameters in MiB, x the stage factor (default: 48 MiB x "
     "--msg-scale / --layers)",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-3, 1e5, &o->fsdp_layer_mb); },
     kMegatron},
    {"virtual-stages", "V", "1",
     "megatron: interleaved 1F1B: V (1-64) model chunks per rank, neighbour exchanges batched "
     "per round, stage P-1 feeding stage 0 (needs --pp >= 2, --microbatches a multiple of --pp, "
     "--layers a multiple of V)",
     [](Options* o, const char* v) { return ParseInt(v, 1, 64, &o->virtual_stages); }, kMegatron},
    {"cp-ring", nullptr, "off",
     "megatron: context parallel ring attention over the TP group instead of its AllReduce: "
     "tp-1 steps per layer pass, each ONE group {Send to tp_i+1, Recv from tp_i-1} (needs --tp "
     ">= 2)",
     [](Options* o, const char*) { return Enable(&o->cp_ring); }, kMegatron},
    {"cp-bytes", "N", "(TP size)",
     "megatron: --cp-ring: bytes of each ring step's Send/Recv (default: the 4 MiB x --msg-scale "
     "TP AllReduce size)",
     [](Options* o, const char* v) { return ParseInt(v, 16, int64_t{1} << 40, &o->cp_bytes); },
     kMegatron},
    {"bogus-rank", "R[,R...]", "(none)",
     "megatron: ranks whose profiler telemetry lies (repeatable): one op in --bogus-every, at "
     "random, reports KernelCh stops 5 s after the truth",
     [](Options* o, const char* v) { return ParseRankList(v, &o->bogus_ranks); }, kMegatron},
    {"bogus-every", "N", "100", "megatron: ... one op in N of those ranks",
     [](Options* o, const char* v) { return ParseInt(v, 1, 1 << 30, &o->bogus_every); }, kMegatron},
    {"lose-rank", "R[,R...]", "(none)",
     "megatron: ranks some of whose profiler events never arrive (repeatable): one op in "
     "--lose-every, at random, either has no events at all (a collective: a gap in its "
     "seqNumbers) or never gets its last channel's stop (it never completes in the profiler)",
     [](Options* o, const char* v) { return ParseRankList(v, &o->lose_ranks); }, kMegatron},
    {"lose-every", "N", "100", "megatron: ... one op in N of those ranks",
     [](Options* o, const char* v) { return ParseInt(v, 1, 1 << 30, &o->lose_every); }, kMegatron},
    {"drift-rank", "R[,R...]", "(none)",
     "megatron: ranks whose GPU drifts slower (repeatable): compute x (1 + --drift-per-s x t)",
     [](Options* o, const char* v) { return ParseRankList(v, &o->drift_ranks); }, kMegatron},
    {"drift-per-s", "F", "0.01", "megatron: compute time added per second of drift (0.01: 1%/s)",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 10, &o->drift_per_s); }, kMegatron},
    {"drift-after-s", "S", "0", "megatron: the drift starts at t0 + S",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->drift_after_s); },
     kMegatron},
    {"fabric-hang-comm", "NAME", "(none)",
     "megatron: communicator (tp0, dp3, pp1, mp0, emb1, world) whose ops never end ...",
     [](Options* o, const char* v) {
       o->fabric_hang_comm = v;
       return !o->fabric_hang_comm.empty();
     },
     kMegatron},
    {"fabric-hang-after-s", "S", "0", "megatron: ... from t0 + S on",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->fabric_hang_after_s); },
     kMegatron},
    {"split-after-s", "S", "(none)",
     "world steps from t0 + S run on two split communicators (local rank parity)",
     [](Options* o, const char* v) { return ParseDouble(v, 0, 1e6, &o->split_after_s); },
     kWorldOr3d},
    {"msg-scale", "F", "1", "multiply every message size by F (at least 4 KiB)",
     [](Options* o, const char* v) { return ParseDouble(v, 1e-6, 64, &o->msg_scale); }},
    {"start-delay-ms", "MS", "300", "t0 = now + this, so that all ranks start together",
     [](Options* o, const char* v) { return ParseInt(v, 0, 3'600'000, &o->start_delay_ms); }},
    {"verbose", nullptr, "off", "also print the plugin's INFO/TRACE log lines",
     [](Options* o, const char*) { return Enable(&o->verbose); }},
    {"help", nullptr, "", "print this table and exit",
     [](Options* o, const char*) { return Enable(&o->help); }},
};

const Flag* FindFlag(const std::string& name) {
  for (const Flag& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

}  // namespace

void UsageError(const std::string& message) {
  std::fprintf(stderr, "simjob: error: %s\nRun 'simjob --help' for the list of options.\n",
               message.c_str());
  std::exit(2);
}

bool Given(const Options& o, const char* flag) {
  return std::find(o.given.begin(), o.given.end(), flag) != o.given.end();
}

void PrintHelp() {
  std::printf(
      "Usage: simjob --plugin PATH --nodes M --ranks-per-node K [options]\n\n"
      "Simulates an NCCL training job (one process per rank) driving a real profiler plugin.\n\n"
      "  %-30s %-11s %s\n",
      "option", "default", "meaning");
  for (const Flag& f : kFlags) {
    std::string left = std::string("--") + f.name;
    if (f.value != nullptr) left += std::string(" ") + f.value;
    std::printf("  %-30s %-11s %s\n", left.c_str(), f.default_text, f.help);
  }
  std::fflush(stdout);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) UsageError("unexpected argument '" + arg + "'");
    std::string name = arg.substr(2);
    const char* value = nullptr;
    std::string inline_value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
      value = inline_value.c_str();
    }
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) UsageError("unknown option '--" + name + "'");
    if (flag->value == nullptr && value != nullptr) UsageError("--" + name + " takes no value");
    if (flag->value != nullptr && value == nullptr) {
      if (i + 1 >= argc) UsageError("--" + name + " needs a value (" + flag->value + ")");
      value = argv[++i];
    }
    o.given.push_back(name);
    if (!flag->set(&o, value)) {
      UsageError("invalid value '" + std::string(value) + "' for --" + name + " (expected " +
                 flag->value + ")");
    }
  }
  return o;
}

void Validate(const Options& o) {
  const int world = o.nodes * o.ranks_per_node;
  if (o.plugin.empty()) UsageError("--plugin is required");
  if (world < 2 || world > kMaxRanks) {
    UsageError("nodes x ranks-per-node must be in [2, " + std::to_string(kMaxRanks) + "]");
  }
  auto check_rank = [world](int r, const char* flag) {
    if (r >= world) UsageError(std::string(flag) + " must be < " + std::to_string(world));
  };
  auto check_node = [&o](int n, const char* flag) {
    if (n >= o.nodes) UsageError(std::string(flag) + " must be < " + std::to_string(o.nodes));
  };
  for (int r : o.slow_ranks) check_rank(r, "--slow-rank");
  check_rank(o.hang_rank, "--hang-rank");
  check_rank(o.kill_rank, "--kill-rank");
  check_node(o.slow_node, "--slow-node");
  check_node(o.degrade_node, "--degrade-node");
  if (o.slow_before_node && !o.node_comm && !o.layout_3d) {
    UsageError("--slow-before node needs node-local steps: --node-comm or --layout 3d");
  }
  if (o.hang_rank >= 0 && o.kill_rank >= 0) {
    UsageError("--hang-rank and --kill-rank cannot be combined");
  }
  if ((o.user_tag_iteration || o.user_tag != 0) && o.abi < 7) {
    UsageError("--user-tag needs --abi 7 (older tables have no user tag)");
  }
  const unsigned layout = o.layout_megatron ? kMegatron : kWorldOr3d;
  for (const std::string& name : o.given) {
    const unsigned applies = FindFlag(name)->layouts;
    if ((applies & layout) != 0) continue;
    UsageError("--" + name + " applies to --layout " +
               (applies == kMegatron ? "megatron" : "world|3d") + " only");
  }
  if (o.layout_megatron) return ValidateMegatron(o);
  if (o.layout_3d) {
    if (o.pp_stages < 2) UsageError("--layout 3d needs --pp-stages >= 2");
    if (o.nodes % o.pp_stages != 0 || o.nodes < 2 * o.pp_stages) {
      UsageError("--layout 3d needs --nodes to be a multiple of --pp-stages and at least twice it");
    }
    if (o.node_comm) UsageError("--node-comm is implied by --layout 3d (the TP communicators)");
    if (o.split_after_s >= 0) UsageError("--split-after-s applies to --layout world only");
  }
  if (o.split_after_s >= 0 && o.ranks_per_node < 2) {
    UsageError("--split-after-s needs --ranks-per-node >= 2 (the halves are by local rank parity)");
  }
}

uint64_t UserTag(const Options& o, int64_t iteration) {
  return o.user_tag_iteration ? static_cast<uint64_t>(iteration) + 1 : o.user_tag;
}

std::string JobId(const Options& o) { return o.job_id.empty() ? "simjob" : o.job_id; }

std::string FakeGpuUuid(int node, int rank) {
  return StrFormat("GPU-00000000-0000-0000-0000-%06d%06d", node, rank);
}

std::string DescribeFaults(const Options& o) {
  std::string s;
  if (o.layout_megatron) return DescribeMegatronFaults(o);
  const auto slow_us = static_cast<long long>(o.slow_us);
  const char* before = o.slow_before_node ? "node-local step" : "step";
  for (int r : o.slow_ranks) s += StrFormat(" slow rank %d +%lld us/%s;", r, slow_us, before);
  if (o.slow_node >= 0) {
    s += StrFormat(" slow node %d +%lld us/%s;", o.slow_node, slow_us, before);
  }
  if (o.degrade_node >= 0 && o.degrade_factor != 1.0) {
    s += StrFormat(" node %d network x%.3f from t0+%.3f s;", o.degrade_node, o.degrade_factor,
                   o.degrade_after_s);
  }
  if (o.clock_skew_ms != 0) s += StrFormat(" GPU clock skew +/-%.3f ms;", o.clock_skew_ms);
  if (o.hang_rank >= 0) {
    s += StrFormat(" rank %d hangs at t0+%.3f s;", o.hang_rank, o.hang_after_s);
  }
  if (o.kill_rank >= 0) {
    s += StrFormat(" rank %d killed at t0+%.3f s;", o.kill_rank, o.kill_after_s);
  }
  if (o.split_after_s >= 0) {
    s += StrFormat(" world split in two at t0+%.3f s (not a fault);", o.split_after_s);
  }
  return s.empty() ? " none" : s;
}

TimelineConfig MakeTimelineConfig(const Options& o, int64_t t0_ns) {
  TimelineConfig c;
  c.nodes = o.nodes;
  c.ranks_per_node = o.ranks_per_node;
  c.seed = o.seed;
  c.t0_ns = t0_ns;
  c.gap_ns = o.gap_us * 1000;
  c.jitter_ns = o.jitter_us * 1000;
  c.slow_ranks = o.slow_ranks;
  for (int l = 0; o.slow_node >= 0 && l < o.ranks_per_node; ++l) {
    c.slow_ranks.push_back(o.slow_node * o.ranks_per_node + l);
  }
  c.slow_ns = o.slow_us * 1000;
  c.slow_before_node = o.slow_before_node;
  c.net_gbs = o.net_gbs;
  c.nvlink_gbs = o.nvlink_gbs;
  c.degrade_node = o.degrade_node;
  c.degrade_factor = o.degrade_factor;
  c.degrade_at_ns = t0_ns + SecondsToNs(o.degrade_after_s);
  c.clock_skew_ns = std::llround(o.clock_skew_ms * 1e6);
  if (o.hang_rank >= 0) {
    c.fault = {FaultKind::kHang, o.hang_rank, t0_ns + SecondsToNs(o.hang_after_s)};
  }
  if (o.kill_rank >= 0) {
    c.fault = {FaultKind::kKill, o.kill_rank, t0_ns + SecondsToNs(o.kill_after_s)};
  }
  c.workload = o.layout_3d ? ThreeDWorkload() : DefaultWorkload(o.node_comm);
  ScaleWorkload(o.msg_scale, &c.workload);
  if (o.layout_3d) c.pp_stages = o.pp_stages;
  if (o.split_after_s >= 0) c.split_at_ns = t0_ns + SecondsToNs(o.split_after_s);
  c.end_ns = t0_ns + SecondsToNs(o.duration_s);
  if (o.iterations > 0) c.max_steps = o.iterations * static_cast<int64_t>(c.workload.size());
  return c;
}

}  // namespace ncclwatch::simjob
