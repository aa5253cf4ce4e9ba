// The user thread of one simjob rank process in --layout megatron. It computes the closed-loop job
// model (job_model.h) for the whole job, keeping only its own rank's ops, and replays them in real
// time: it creates the rank's communicators at start-up (as ncclCommInitRank, through the
// plugin's init); at each op's host enqueue time it emits NCCL's user-thread events for the op's
// group launch (nccl_events.h: GroupApi, CollApi/P2pApi, Group, KernelLaunch, Coll/P2p) and hands
// the kernel to the ProxyThread, whose KernelCh events carry the model's GPU start and end (GPU
// timers include the node's clock offset). At the end it finalizes the communicators.
//
// A hang: the op that never ends keeps its channels open, the ops the host queued behind it are
// launched but never start, and the rank idles until --duration-s before finalizing. A hung rank
// (--hang-rank) stops launching and idles likewise; a killed rank (--kill-rank) _exit(0)s at the
// kill time. The report's steps are the ops launched; max_lag is how far the user thread ever ran
// behind the model's enqueue times.
#ifndef NCCLWATCH_TESTS_SIMJOB_MEGATRON_DRIVER_H_
#define NCCLWATCH_TESTS_SIMJOB_MEGATRON_DRIVER_H_

#include "tests/simjob/job_model.h"
#include "tests/simjob/options.h"
#include "tests/simjob/profiler_host.h"
#include "tests/simjob/rank_driver.h"

namespace ncclwatch::simjob {

// Runs the whole job of `rank` through `host` on the calling thread (plus one proxy thread), as
// DriveRank does for the other layouts. Does not return for a rank killed by --kill-rank. Call
// once per process; `host` must stay loaded until it returns.
RankReport DriveMegatronRank(const Options& options, const JobModelConfig& config, int rank,
                             ProfilerHost* host);

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_MEGATRON_DRIVER_H_
