// simjob's command line: one table of flags (defaults and meanings printed by --help), parsed once;
// the mapping from flags to the time models.
#ifndef NCCLWATCH_TESTS_SIMJOB_OPTIONS_H_
#define NCCLWATCH_TESTS_SIMJOB_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tests/simjob/job_model.h"
#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {

// Every field is one flag; see kFlags in options.cc for the meaning.
struct Options {
  std::string plugin;
  int nodes = 2;
  int ranks_per_node = 2;
  int abi = 7;
  bool user_tag_iteration = false;  // --user-tag iteration
  uint64_t user_tag = 0;            // --user-tag N (0: none)
  double duration_s = 10;
  int64_t iterations = 0;
  uint64_t seed = 1;
  int64_t gap_us = 5000;
  int64_t jitter_us = 200;
  std::vector<int> slow_ranks;  // --slow-rank, repeatable or a list
  int slow_node = -1;
  int64_t slow_us = 2000;
  bool slow_before_node = false;  // --slow-before node
  double net_gbs = 25;
  double nvlink_gbs = 300;
  int degrade_node = -1;
  double degrade_factor = 1.0;
  double degrade_after_s = 0;
  double clock_skew_ms = 0;
  int channels = 4;
  int hang_rank = -1;
  double hang_after_s = 0;
  int kill_rank = -1;
  double kill_after_s = 0;
  bool has_agent_addr = false;
  std::string agent_addr;
  std::string job_id;  // empty: not given
  std::vector<std::string> env;
  bool node_comm = false;
  bool gpu_uuids = false;        // --gpu-uuids
  bool layout_3d = false;        // --layout 3d
  bool layout_megatron = false;  // --layout megatron
  int pp_stages = 2;             // --pp-stages or --pp
  // --layout megatron (megatron_config.cc):
  int tp = 0;  // 0: --ranks-per-node
  int dp = 0;  // 0: nodes x ranks-per-node / (tp x pp)
  int microbatches = 4;
  int layers = 2;
  int64_t layer_us = 1000;
  std::vector<double> stage_factors;  // empty: all 1
  int world_every = 50;
  int host_ahead = 4;
  int warmup_iterations = 3;
  double compute_jitter = 0.02;
  double stall_every_s = 0;  // 0: no stalls
  double stall_ms = 200;
  double gc_every_s = 0;  // 0: no one-rank host pauses
  double gc_ms = 150;
  double moe_expert_us = 0;  // 0: dense
  double moe_hot_factor = 2.0;
  bool moe_alltoall = false;  // --moe-dispatcher alltoall
  bool fsdp = false;
  double fsdp_layer_mb = 0;  // 0: the DP gradient size / --layers
  int virtual_stages = 1;
  bool cp_ring = false;
  int64_t cp_bytes = 0;          // 0: the TP AllReduce size
  std::vector<int> bogus_ranks;  // --bogus-rank: their GPU timestamps sometimes lie
  int bogus_every = 100;
  std::vector<int> lose_ranks;  // --lose-rank: some of their profiler events never arrive
  int lose_every = 100;
  std::vector<int> drift_ranks;
  double drift_per_s = 0.01;
  double drift_after_s = 0;
  double slow_factor = 2.0;
  double slow_after_s = 0;
  bool slow_expert_only = false;  // --slow-scope=expert
  std::vector<int> throttle_ranks;
  double throttle_factor = 2.0;
  double throttle_on_s = 2;
  double throttle_off_s = 2;
  std::string fabric_hang_comm;
  double fabric_hang_after_s = 0;
  double split_after_s = -1;  // < 0: no split
  double msg_scale = 1.0;
  int64_t start_delay_ms = 300;
  bool verbose = false;
  bool help = false;
  std::vector<std::string> given;  // the flags on the command line, without "--"
};

inline constexpr int kMaxRanks = 4096;

// Parses argv. On an unknown flag or a bad value prints a one-line error to stderr and exits 2.
Options ParseArgs(int argc, char** argv);
// Prints "simjob: error: <message>" and a hint to stderr and exits 2.
[[noreturn]] void UsageError(const std::string& message);
// Whether `flag` (without "--") was on the command line.
bool Given(const Options& o, const char* flag);
// Checks cross-flag constraints (ranks in range, ...); exits 2 with a message if violated.
void Validate(const Options& o);
// Prints the usage line and the flag table to stdout.
void PrintHelp();

// The fake UUID of the GPU that `rank` (on `node`) uses with --gpu-uuids:
// "GPU-00000000-0000-0000-0000-<node, 6 digits><rank, 6 digits>".
std::string FakeGpuUuid(int node, int rank);

// The user tag (profiler ABI v7) of every call in training iteration `iteration` (from 0), as
// --user-tag asks: 0 (untagged), iteration + 1, or the constant.
uint64_t UserTag(const Options& o, int64_t iteration);

// The job id the communicator hashes are derived from: --job-id, or "simjob".
std::string JobId(const Options& o);
// " slow rank 3 +2000 us/step; ..." or " none".
std::string DescribeFaults(const Options& o);
// The time model of this job (world and 3d layouts), starting at t0_ns.
TimelineConfig MakeTimelineConfig(const Options& o, int64_t t0_ns);

// --layout megatron (megatron_config.cc): the flags' cross-checks (exits 2 like Validate), the
// faults in words, and the job model, starting at t0_ns.
void ValidateMegatron(const Options& o);
std::string DescribeMegatronFaults(const Options& o);
JobModelConfig MakeJobModelConfig(const Options& o, int64_t t0_ns);

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_OPTIONS_H_
