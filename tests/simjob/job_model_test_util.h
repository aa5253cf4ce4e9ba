// Helpers shared by the job model's unit tests (job_model_test.cc, job_model_hang_test.cc).
#ifndef NCCLWATCH_TESTS_SIMJOB_JOB_MODEL_TEST_UTIL_H_
#define NCCLWATCH_TESTS_SIMJOB_JOB_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "tests/simjob/job_model.h"

namespace ncclwatch::simjob::testing {

inline constexpr int64_t kT0 = 1'700'000'000'000'000'000;  // a realistic CLOCK_REALTIME value
inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kS = 1'000'000'000;

// The default job: 4 nodes x 2 GPUs, tp 2, pp 2, dp 2, M = 4, L = 2, about 35 ms per iteration.
inline JobModelConfig BaseConfig() {
  JobModelConfig c;
  c.t0_ns = kT0;
  c.warmup_iterations = 0;
  c.program.world_every = 5;
  return c;
}

using RankOps = std::vector<std::vector<JobOp>>;

// Every op of every rank, consumed round-robin like independent rank processes would.
inline RankOps RunAll(JobModel* model_ptr) {
  JobModel& model = *model_ptr;
  RankOps ops(model.world_size());
  for (bool any = true; any;) {
    any = false;
    for (int r = 0; r < model.world_size(); ++r) {
      if (const JobOp* op = model.Next(r)) {
        ops[r].push_back(*op);
        any = true;
      }
    }
  }
  return ops;
}

inline RankOps RunAll(const JobModelConfig& config) {
  JobModel model(config);
  return RunAll(&model);
}

// Per rank: the compute its own GPU ran ("own time": start minus the end of the rank's previous
// op) and how long its kernels waited, summed over iterations [from, to).
struct RankTimes {
  int64_t own_ns = 0;
  int64_t kernel_ns = 0;
};
inline RankTimes Times(const std::vector<JobOp>& ops, int64_t t0, int64_t from, int64_t to) {
  RankTimes t;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].iteration < from || ops[i].iteration >= to) continue;
    const int64_t prev_end = i == 0 ? t0 : ops[i - 1].gpu_end_ns;
    t.own_ns += ops[i].gpu_start_ns - prev_end;
    t.kernel_ns += ops[i].gpu_end_ns - ops[i].gpu_start_ns;
  }
  return t;
}

}  // namespace ncclwatch::simjob::testing

#endif  // NCCLWATCH_TESTS_SIMJOB_JOB_MODEL_TEST_UTIL_H_
