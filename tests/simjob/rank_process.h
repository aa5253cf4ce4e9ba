// One simjob rank process, from fork to exit: its torchrun-like environment, the plugin loaded as
// NCCL loads it, the job driven by RankDriver (megatron_driver.h with --layout
// megatron), the dlclose after the last finalize, and one report
// line for the parent. Also the log function handed to the plugin, which simjob's own rank
// messages use too.
#ifndef NCCLWATCH_TESTS_SIMJOB_RANK_PROCESS_H_
#define NCCLWATCH_TESTS_SIMJOB_RANK_PROCESS_H_

#include "plugin/abi.h"
#include "tests/simjob/job_model.h"
#include "tests/simjob/options.h"
#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {

// The whole life of one rank process. Sets the rank's environment (RANK, LOCAL_RANK, ...,
// NCCLWATCH_*, every --env) in this process, so call it only in the forked child. Returns its exit
// status: 1 if the plugin cannot be loaded or the report cannot be written, else 0. Writes its
// report line ("steps=... max_lag_us=... proxy_lag_us=... events=... null_handles=...
// kernel_ch=S/T kernel_phase=N", no newline) to report_fd. Does not return for a rank killed by
// --kill-rank (_exit(0)). `config` is the job's time model in the world and 3d layouts,
// `model_config` in --layout megatron (megatron_driver.h); the other one is not used.
int RunRank(const Options& o, const TimelineConfig& config, const JobModelConfig& model_config,
            int rank, int report_fd);

// The logfn handed to the plugin (abi::Logger). Writes "[simjob rank R] <message>\n" to stderr in
// one write; levels above WARN only with --verbose. Before RunRank sets them, R is -1 and verbose
// is off.
void RankLog(abi::LogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
             ...);

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_RANK_PROCESS_H_
