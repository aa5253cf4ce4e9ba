#include "plugin/plugin_config.h"

#include "absl/strings/str_format.h"

namespace ncclwatch::plugin {

void RegisterPluginConfig(ConfigTable& t, PluginConfig& c) {
  t.AddBool("", "NCCLWATCH_ENABLE", &c.enable,
            "0 turns the plugin off: it then asks NCCL for no events at all.");
  t.AddString("", "NCCLWATCH_AGENT_ADDR", &c.agent_addr,
              "gRPC address of the node agent (unix:///path or host:port).");
  t.AddInt("", "NCCLWATCH_FLUSH_INTERVAL_MS", &c.flush_interval_ms,
           "How often each communicator's summary is sent, in milliseconds (10..60000).",
           Range::Between(10, 60000));
  t.AddString("", "NCCLWATCH_JOB_ID", &c.job_id,
              "Job identifier; empty means SLURM_JOB_ID, else TORCHELASTIC_RUN_ID, else "
              "comm-<hash of the first communicator>.");
  t.AddInt("", "NCCLWATCH_OP_POOL_SIZE", &c.op_pool_size,
           "Operations that can be in flight at once per process; more are dropped and counted.",
           Range::Between(64, 1 << 18, " (2.6 KiB of address space per slot)"));
  t.AddInt("", "NCCLWATCH_RING_SIZE", &c.ring_size,
           "Completed operations buffered per communicator between two drains (every 50 ms).",
           Range::Between(64, 1 << 18, " (112 bytes per entry, per communicator)"));
  t.AddInt("", "NCCLWATCH_SAMPLE_STRIDE", &c.sample_stride,
           "Send a per-collective record for every collective whose seqNumber is a multiple of "
           "this (a power of two; raised automatically to stay under NCCLWATCH_MAX_SAMPLES).",
           Range::Between(1, 1 << 20));
  t.AddInt("", "NCCLWATCH_MAX_SAMPLES", &c.max_samples,
           "Most sampled collectives in one report (per communicator and interval).",
           Range::Between(0, 1 << 16));
  t.AddInt("", "NCCLWATCH_MAX_IN_FLIGHT", &c.max_in_flight,
           "Most in-flight operations listed in one report (oldest first).",
           Range::Between(0, 4096));
  t.AddInt("", "NCCLWATCH_MAX_QUEUED_REPORTS", &c.max_queued_reports,
           "Reports kept while the agent is unreachable; the oldest is dropped beyond this.",
           Range::Between(1, 1 << 16));
  t.AddString("", "NCCLWATCH_DUMP_DIR", &c.dump_dir,
              "Offline mode: also write NCCL Inspector-compatible files here (JSON Lines per "
              "operation, a .prom textfile per process); empty: off.");
  t.AddInt("", "NCCLWATCH_FINALIZE_TIMEOUT_MS", &c.finalize_timeout_ms,
           "Longest time communicator finalize waits to hand the last report to the agent.",
           Range::Between(0, 60000, " (finalize and exit wait this long at most)"));
  t.AddBool("", "NCCLWATCH_KERNEL_PHASE", &c.kernel_phase,
            "1 asks NCCL >= 2.31 for KernelPhase events: each kernel's wait for its peers, "
            "measured on the GPU. Off by default: NCCL 2.31.2 pays for it in GPU time "
            "(README, 'KernelPhase').");
}

absl::Status LoadPluginConfig(PluginConfig& config, const ConfigTable::EnvLookup& env,
                              std::vector<std::string>* warnings) {
  ConfigTable table("libnccl-profiler-ncclwatch.so", "");
  RegisterPluginConfig(table, config);
  // Out of range is not an error here (the plugin never stops a job): the nearest bound is used.
  // The upper bounds keep memory and init time per process sane: the pool is reserved, not
  // touched, but each ring and queued report is real memory (README, configuration).
  std::vector<std::string> clamped;
  absl::Status status = table.ParseEnv(env, &clamped);
  if (!status.ok()) return status;
  if (warnings != nullptr) warnings->insert(warnings->end(), clamped.begin(), clamped.end());
  if ((config.sample_stride & (config.sample_stride - 1)) != 0) {
    int64_t p = 1;
    while (p * 2 <= config.sample_stride) p *= 2;
    if (warnings != nullptr) {
      warnings->push_back(absl::StrFormat(
          "NCCLWATCH_SAMPLE_STRIDE=%d is not a power of two; using %d", config.sample_stride, p));
    }
    config.sample_stride = p;
  }
  // A bare socket path is what people write; gRPC would read it as a DNS name.
  if (!config.agent_addr.empty() && config.agent_addr[0] == '/') {
    config.agent_addr = "unix://" + config.agent_addr;
  }
  return absl::OkStatus();
}

}  // namespace ncclwatch::plugin
