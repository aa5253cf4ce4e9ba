// One simjob rank process: environment, plugin load, the job, the report line, and the plugin's
// log function. The contract is in rank_process.h.
#include "tests/simjob/rank_process.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tests/simjob/job_common.h"
#include "tests/simjob/megatron_driver.h"
#include "tests/simjob/profiler_host.h"
#include "tests/simjob/rank_driver.h"

namespace ncclwatch::simjob {
namespace {

int g_rank = -1;         // set once in the rank process before any thread starts
bool g_verbose = false;  // likewise

void SetRankEnvironment(const Options& o, int rank) {
  const int node = rank / o.ranks_per_node;
  const int local = rank % o.ranks_per_node;
  auto expand = [&](const std::string& s) {
    std::string v = ReplaceAll(s, "{node}", std::to_string(node));
    v = ReplaceAll(v, "{local_rank}", std::to_string(local));
    return ReplaceAll(v, "{rank}", std::to_string(rank));
  };
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(o.nodes * o.ranks_per_node).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(o.ranks_per_node).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(node).c_str(), 1);  // torchrun's name for the node index
  if (o.has_agent_addr) setenv("NCCLWATCH_AGENT_ADDR", expand(o.agent_addr).c_str(), 1);
  if (!o.job_id.empty()) setenv("NCCLWATCH_JOB_ID", o.job_id.c_str(), 1);
  if (o.gpu_uuids) {
    // Like NVIDIA's device plugin giving one pod the node's GPUs: every rank of the node sees the
    // whole list, and its CUDA device (the plugin falls back to LOCAL_RANK without CUDA) picks its
    // own entry. --env can still override it.
    std::string devices;
    for (int l = 0; l < o.ranks_per_node; ++l) {
      if (l > 0) devices += ',';
      devices += FakeGpuUuid(node, node * o.ranks_per_node + l);
    }
    setenv("NVIDIA_VISIBLE_DEVICES", devices.c_str(), 1);
    unsetenv("CUDA_VISIBLE_DEVICES");  // the host's value would reorder or hide the list
  }
  for (const std::string& kv : o.env) {
    const size_t eq = kv.find('=');
    setenv(kv.substr(0, eq).c_str(), expand(kv.substr(eq + 1)).c_str(), 1);
  }
}

}  // namespace

void RankLog(abi::LogLevel level, unsigned long /*flags*/, const char* /*file*/, int /*line*/,
             const char* fmt, ...) {
  if (level > abi::kLogWarn && !g_verbose) return;
  char buf[1024];
  int n = std::snprintf(buf, sizeof(buf), "[simjob rank %d] ", g_rank);
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
  va_end(ap);
  n = static_cast<int>(std::strlen(buf));
  if (n == 0 || buf[n - 1] != '\n') buf[n++] = '\n';
  // One write, so that lines of concurrent ranks do not interleave. If stderr is gone there is
  // nobody left to tell.
  if (write(STDERR_FILENO, buf, n) < 0) return;
}

int RunRank(const Options& o, const TimelineConfig& config, const JobModelConfig& model_config,
            int rank, int report_fd) {
  g_rank = rank;
  g_verbose = o.verbose;
  SetRankEnvironment(o, rank);
  std::string error;
  std::unique_ptr<ProfilerHost> host = ProfilerHost::Load(o.plugin, o.abi, &error);
  if (host == nullptr) {
    RankLog(abi::kLogWarn, 0, __FILE__, __LINE__, "cannot load plugin %s: %s", o.plugin.c_str(),
            error.c_str());
    return 1;
  }
  const RankReport report = o.layout_megatron ? DriveMegatronRank(o, model_config, rank, host.get())
                                              : DriveRank(o, config, rank, host.get());
  host.reset();  // dlclose, after the last finalize, as NCCL does
  char line[256];
  const int n = std::snprintf(
      line, sizeof(line),
      "steps=%lld max_lag_us=%lld proxy_lag_us=%lld events=%llu null_handles=%llu "
      "kernel_ch=%llu/%llu kernel_phase=%llu",
      static_cast<long long>(report.steps), static_cast<long long>(report.max_lag_ns / 1000),
      static_cast<long long>(report.proxy_lag_ns / 1000),
      static_cast<unsigned long long>(report.events),
      static_cast<unsigned long long>(report.null_handles),
      static_cast<unsigned long long>(report.kernel_ch_started),
      static_cast<unsigned long long>(report.kernel_ch_stopped),
      static_cast<unsigned long long>(report.kernel_phases));
  if (write(report_fd, line, n) != n) return 1;
  return 0;
}

}  // namespace ncclwatch::simjob
