// The user thread of one simjob rank process in the world and 3d layouts (--layout megatron:
// megatron_driver.h): it creates the rank's communicators through the plugin, replays every step of
// the Timeline at the rank's arrival times with NCCL's user-thread event sequence (nccl_events.h:
// GroupApi, CollApi/P2pApi, Group, KernelLaunch, Coll/P2p; docs/nccl-profiler-abi.md §7.4), hands
// each kernel to a ProxyThread for its KernelCh events, and finalizes the communicators at the
// end. Events are emitted only as the activation mask and the ABI version allow (§6.2; v4 has no
// API-level events); communicators whose init failed get no events.
//
// Faults (timeline.h): a hung rank stops arriving and idles until the job's end; --kill-rank makes
// the process _exit(0) at the kill time, with no finalize.
#ifndef NCCLWATCH_TESTS_SIMJOB_RANK_DRIVER_H_
#define NCCLWATCH_TESTS_SIMJOB_RANK_DRIVER_H_

#include <cstdint>

#include "tests/simjob/options.h"
#include "tests/simjob/profiler_host.h"
#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {

// What one rank did, for its report line.
struct RankReport {
  int64_t steps = 0;
  uint64_t events = 0;
  uint64_t null_handles = 0;
  uint64_t kernel_ch_started = 0;
  uint64_t kernel_ch_stopped = 0;
  uint64_t kernel_phases = 0;  // KernelPhase events started (v7)
  int64_t max_lag_ns = 0;      // how far behind the schedule the user thread ever ran
  int64_t proxy_lag_ns = 0;    // how far behind it the proxy thread ever delivered an event
};

// Runs the whole job of `rank` through `host` on the calling thread (plus one proxy thread):
// init of every communicator, every step in real time, finalize. Returns when the job is over;
// does not return for a rank killed by --kill-rank. Call once per process: NCCL's activation mask
// is a process global. `host` must stay loaded until it returns.
RankReport DriveRank(const Options& options, const TimelineConfig& config, int rank,
                     ProfilerHost* host);

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_RANK_DRIVER_H_
