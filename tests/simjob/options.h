// simjob's command line: one table of flags (defaults and meanings printed by --help), parsed once.
#ifndef NCCLWATCH_TESTS_SIMJOB_OPTIONS_H_
#define NCCLWATCH_TESTS_SIMJOB_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {

// Every field is one flag; see kFlags in options.cc for the meaning.
struct Options {
  std::string plugin;
  int nodes = 2;
  int ranks_per_node = 2;
  int abi = 5;
  double duration_s = 10;
  int64_t iterations = 0;
  uint64_t seed = 1;
  int64_t gap_us = 5000;
  int64_t jitter_us = 200;
  int slow_rank = -1;
  int slow_node = -1;
  int64_t slow_us = 2000;
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
  bool gpu_uuids = false;  // --gpu-uuids
  bool layout_3d = false;  // --layout 3d
  int pp_stages = 2;
  double split_after_s = -1;  // < 0: no split
  double msg_scale = 1.0;
  int64_t start_delay_ms = 300;
  bool verbose = false;
  bool help = false;
};

inline constexpr int kMaxRanks = 4096;

// Parses argv. On an unknown flag or a bad value prints a one-line error to stderr and exits 2.
Options ParseArgs(int argc, char** argv);
// Checks cross-flag constraints (ranks in range, ...); exits 2 with a message if violated.
void Validate(const Options& o);
// Prints the usage line and the flag table to stdout.
void PrintHelp();

// The fake UUID of the GPU that `rank` (on `node`) uses with --gpu-uuids:
// "GPU-00000000-0000-0000-0000-<node, 6 digits><rank, 6 digits>".
std::string FakeGpuUuid(int node, int rank);

// The job id the communicator hashes are derived from: --job-id, or "simjob".
std::string JobId(const Options& o);
// " slow rank 3 +2000 us/step; ..." or " none".
std::string DescribeFaults(const Options& o);
// The time model of this job, starting at t0_ns.
TimelineConfig MakeTimelineConfig(const Options& o, int64_t t0_ns);

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_OPTIONS_H_
