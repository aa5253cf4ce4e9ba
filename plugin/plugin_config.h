// The plugin's configuration: environment variables only (it has no command line). Every entry,
// with its default, is listed by ncclwatch::plugin::PluginConfigHelp() and in the README.
#ifndef NCCLWATCH_PLUGIN_PLUGIN_CONFIG_H_
#define NCCLWATCH_PLUGIN_PLUGIN_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/config.h"

namespace ncclwatch::plugin {

struct PluginConfig {
  bool enable = true;
  std::string agent_addr = "unix:///run/ncclwatch/agent.sock";
  int64_t flush_interval_ms = 1000;
  std::string job_id;  // empty: SLURM_JOB_ID, TORCHELASTIC_RUN_ID, else from the first commHash
  int64_t op_pool_size = 2048;
  int64_t ring_size = 4096;
  int64_t sample_stride = 1;
  int64_t max_samples = 256;
  int64_t max_in_flight = 8;
  int64_t max_queued_reports = 1024;
  int64_t finalize_timeout_ms = 2000;
  std::string dump_dir;       // offline mode: NCCL Inspector-compatible files here
  bool kernel_phase = false;  // ask NCCL >= 2.31 (profiler ABI v7) for KernelPhase events
};

// Registers every variable of `config` in `table`.
void RegisterPluginConfig(ConfigTable& table, PluginConfig& config);

// Reads the environment into `config`. A value that does not parse is an InvalidArgument naming
// the variable (the plugin then stays off). A number outside its range is brought to the nearest
// bound, with one line per variable in `*warnings` (when not null) saying what was used and why:
// a typo must not cost the job gigabytes or minutes at init.
absl::Status LoadPluginConfig(PluginConfig& config,
                              const ConfigTable::EnvLookup& env = ConfigTable::DefaultEnv(),
                              std::vector<std::string>* warnings = nullptr);

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_PLUGIN_CONFIG_H_
