#include "plugin/plugin_config.h"

#include "absl/strings/str_format.h"

namespace ncclwatch::plugin {

void RegisterPluginConfig(ConfigTable& t, PluginConfig& c) {
  t.AddBool("", "NCCLWATCH_ENABLE", &c.enable,
            "0 turns the plugin off: it then asks NCCL for no events at all.");
  t.AddString("", "NCCLWATCH_AGENT_ADDR", &c.agent_addr,
              "gRPC address of the node agent (unix:///path or host:port).");
  t.AddInt("", "NCCLWATCH_FLUSH_INTERVAL_MS", &c.flush_interval_ms,
           "How often each communicator's summary is sent, in milliseconds (10..60000).");
  t.AddString("", "NCCLWATCH_JOB_ID", &c.job_id,
              "Job identifier; empty means SLURM_JOB_ID, else TORCHELASTIC_RUN_ID, else "
              "comm-<hash of the first communicator>.");
  t.AddInt("", "NCCLWATCH_OP_POOL_SIZE", &c.op_pool_size,
           "Operations that can be in flight at once per process; more are dropped and counted.");
  t.AddInt("", "NCCLWATCH_RING_SIZE", &c.ring_size,
           "Completed operations buffered per communicator between two drains (every 50 ms).");
  t.AddInt("", "NCCLWATCH_SAMPLE_STRIDE", &c.sample_stride,
           "Send a per-collective record for every collective whose seqNumber is a multiple of "
           "this (a power of two; raised automatically to stay under NCCLWATCH_MAX_SAMPLES).");
  t.AddInt("", "NCCLWATCH_MAX_SAMPLES", &c.max_samples,
           "Most sampled collectives in one report (per communicator and interval).");
  t.AddInt("", "NCCLWATCH_MAX_IN_FLIGHT", &c.max_in_flight,
           "Most in-flight operations listed in one report (oldest first).");
  t.AddInt("", "NCCLWATCH_MAX_QUEUED_REPORTS", &c.max_queued_reports,
           "Reports kept while the agent is unreachable; the oldest is dropped beyond this.");
  t.AddString("", "NCCLWATCH_DUMP_DIR", &c.dump_dir,
              "Offline mode: also write NCCL Inspector-compatible files here (JSON Lines per "
              "operation, a .prom textfile per process); empty: off.");
  t.AddInt("", "NCCLWATCH_FINALIZE_TIMEOUT_MS", &c.finalize_timeout_ms,
           "Longest time communicator finalize waits to hand the last report to the agent.");
}

absl::Status LoadPluginConfig(PluginConfig& config, const ConfigTable::EnvLookup& env) {
  ConfigTable table("libnccl-profiler-ncclwatch.so", "");
  RegisterPluginConfig(table, config);
  absl::Status status = table.ParseEnv(env);
  if (!status.ok()) return status;
  auto check = [](int64_t v, int64_t lo, int64_t hi, const char* name) -> absl::Status {
    if (v < lo || v > hi) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s=%d is out of range [%d, %d]", name, v, lo, hi));
    }
    return absl::OkStatus();
  };
  for (auto s : {check(config.flush_interval_ms, 10, 60000, "NCCLWATCH_FLUSH_INTERVAL_MS"),
                 check(config.op_pool_size, 64, 1 << 22, "NCCLWATCH_OP_POOL_SIZE"),
                 check(config.ring_size, 64, 1 << 22, "NCCLWATCH_RING_SIZE"),
                 check(config.sample_stride, 1, 1 << 20, "NCCLWATCH_SAMPLE_STRIDE"),
                 check(config.max_samples, 0, 1 << 20, "NCCLWATCH_MAX_SAMPLES"),
                 check(config.max_in_flight, 0, 1 << 16, "NCCLWATCH_MAX_IN_FLIGHT"),
                 check(config.max_queued_reports, 1, 1 << 20, "NCCLWATCH_MAX_QUEUED_REPORTS"),
                 check(config.finalize_timeout_ms, 0, 600000, "NCCLWATCH_FINALIZE_TIMEOUT_MS")}) {
    if (!s.ok()) return s;
  }
  if ((config.sample_stride & (config.sample_stride - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("NCCLWATCH_SAMPLE_STRIDE=%d is not a power of two", config.sample_stride));
  }
  return absl::OkStatus();
}

}  // namespace ncclwatch::plugin
