// simjob: a simulated NCCL host that drives a real profiler plugin.
//
// It stands in for NCCL plus a data-parallel training job: the parent process forks one process
// per rank (before any dlopen or thread, so children inherit nothing but memory), and every rank
// process loads the plugin exactly as NCCL does and replays NCCL's callback sequences in real time,
// with the schedule taken from the deterministic Timeline (timeline.h), or with --layout megatron
// from the closed-loop job model (job_model.h). Ranks never talk to each other: each computes the
// same global schedule from the same seed.
//
// Inside a rank process two threads call the plugin, as in NCCL: the user thread emits the API,
// Group and Coll/P2p events when the rank "arrives" at a step, and the proxy thread emits the
// per-channel KernelCh events when the simulated kernel starts and when the collective completes.
// The GPU timestamps (pTimer) are the virtual times of the model, so GPU durations are exact even
// when the host is too loaded to keep up in real time.
//
// This file is the parent: it prints the job summary and forecast, forks the ranks
// (rank_process.h; their user thread is rank_driver.h, their proxy thread proxy_thread.h), waits
// for them and prints one line per rank. Exit status 0 if every rank succeeded, 1 otherwise; bad
// flags exit 2 (options.h).
//
// Usage and the meaning of every flag: simjob --help, or README.md next to this file.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/simjob/job_common.h"
#include "tests/simjob/job_model.h"
#include "tests/simjob/options.h"
#include "tests/simjob/rank_process.h"
#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {
namespace {

struct Forecast {
  int64_t steps = 0;
  int64_t end_ns = 0;
  bool hangs = false;
};

// Runs the timeline once in the parent to announce what the job will do.
Forecast MakeForecast(const TimelineConfig& config) {
  Forecast f;
  Timeline timeline(config);
  f.end_ns = config.t0_ns;
  for (const StepTimes* st = &timeline.Advance(); st->in_run; st = &timeline.Advance()) {
    ++f.steps;
    for (int64_t e : st->end) {
      if (e == kNever) {
        f.hangs = true;
      } else {
        f.end_ns = std::max(f.end_ns, e);
      }
    }
    if (f.hangs) break;
  }
  if (f.hangs) f.end_ns = std::max(f.end_ns, config.end_ns);
  return f;
}

// "v7, no user tag" and the like: the ABI and, on v7, what --user-tag sets.
std::string AbiText(const Options& o) {
  if (o.abi < 7) return StrFormat("v%d", o.abi);
  if (o.user_tag_iteration) return "v7, user tag = iteration + 1";
  if (o.user_tag == 0) return "v7, no user tag";
  return StrFormat("v7, user tag %llu", static_cast<unsigned long long>(o.user_tag));
}

void PrintSummary(const Options& o, const TimelineConfig& config) {
  const Timeline timeline(config);
  const int world = timeline.world_size();
  std::printf("simjob: %d ranks = %d nodes x %d ranks/node, ABI %s, plugin %s\n", world, o.nodes,
              o.ranks_per_node, AbiText(o).c_str(), o.plugin.c_str());
  for (int n = 0; n < o.nodes; ++n) {
    std::printf("  node %d: ranks %d-%d, GPU clock offset %+.3f ms", n, n * o.ranks_per_node,
                (n + 1) * o.ranks_per_node - 1, timeline.ClockOffsetNs(n) / 1e6);
    if (o.has_agent_addr) {
      std::printf(", NCCLWATCH_AGENT_ADDR=%s",
                  ReplaceAll(o.agent_addr, "{node}", std::to_string(n)).c_str());
    }
    std::printf("\n");
  }
  const std::string job = JobId(o);
  int listed = 0;
  for (CommScope scope : ScopesOf(config)) {
    for (int g = 0; g < timeline.Instances(scope); ++g) {
      if (++listed > 24) continue;
      const std::string name = CommName(scope, g, o.layout_3d);
      std::printf("  comm %-7s hash 0x%016llx  nranks %zu  nnodes %d  %.1f GB/s\n", name.c_str(),
                  static_cast<unsigned long long>(CommHash(job, name)),
                  timeline.Members(scope, g).size(), timeline.NodesSpanned(scope, g),
                  timeline.BandwidthGbs(scope, g, config.t0_ns));
    }
  }
  if (listed > 24) std::printf("  ... and %d more communicators\n", listed - 24);
  std::printf("  workload per iteration:");
  for (const StepSpec& s : config.workload) {
    static const char* const kFamily[kScopes] = {"world", "node", "dp", "pp", "split"};
    const bool tp = o.layout_3d && s.scope == CommScope::kNode;
    std::printf(" %s %.3g MiB @%s;", OpName(s.op), s.bytes / 1048576.0,
                tp ? "tp" : kFamily[static_cast<int>(s.scope)]);
  }
  std::printf("\n  job id %s, seed %llu, %d channels, gap %lld us +/- %lld us\n", job.c_str(),
              static_cast<unsigned long long>(o.seed), o.channels, static_cast<long long>(o.gap_us),
              static_cast<long long>(o.jitter_us));
  std::printf("  faults:%s\n", DescribeFaults(o).c_str());
  const Forecast f = MakeForecast(config);
  const int64_t t0 = config.t0_ns;
  std::printf("  t0 %lld.%09lld (now + %lld ms); expected end t0 + %.3f s after %lld steps%s\n",
              static_cast<long long>(t0 / 1'000'000'000),
              static_cast<long long>(t0 % 1'000'000'000), static_cast<long long>(o.start_delay_ms),
              (f.end_ns - t0) / 1e9, static_cast<long long>(f.steps),
              f.hangs ? " (then hangs until --duration-s)" : "");
  std::fflush(stdout);
}

// --layout megatron: the layout, its communicators, one iteration's work and the forecast, from
// one run of the job model over the whole job.
void PrintMegatronSummary(const Options& o, const JobModelConfig& config) {
  JobModel model(config, std::vector<int>{});
  const MegatronLayout& l = model.layout();
  std::printf(
      "simjob: %d ranks = %d nodes x %d ranks/node = tp %d x pp %d x dp %d (megatron), ABI %s, "
      "plugin %s\n",
      l.world_size(), o.nodes, o.ranks_per_node, l.tp(), l.pp(), l.dp(), AbiText(o).c_str(),
      o.plugin.c_str());
  for (int n = 0; n < o.nodes; ++n) {
    std::printf("  node %d: ranks %d-%d, GPU clock offset %+.3f ms", n, n * o.ranks_per_node,
                (n + 1) * o.ranks_per_node - 1, model.ClockOffsetNs(n) / 1e6);
    if (o.has_agent_addr) {
      std::printf(", NCCLWATCH_AGENT_ADDR=%s",
                  ReplaceAll(o.agent_addr, "{node}", std::to_string(n)).c_str());
    }
    std::printf("\n");
  }
  const std::string job = JobId(o);
  const std::vector<CommRef> comms = l.AllComms();
  for (size_t i = 0; i < comms.size() && i < 24; ++i) {
    const std::vector<int>& m = l.Members(comms[i].family, comms[i].instance);
    std::string members;
    for (size_t k = 0; k < m.size() && k < 8; ++k) members += (k ? "," : "") + std::to_string(m[k]);
    if (m.size() > 8) members += ",...";
    const std::string name = l.CommName(comms[i]);
    std::printf("  comm %-7s hash 0x%016llx  nranks %zu  nnodes %d  ranks %s\n", name.c_str(),
                static_cast<unsigned long long>(CommHash(job, name)), m.size(),
                l.NodesSpanned(comms[i]), members.c_str());
  }
  if (comms.size() > 24) std::printf("  ... and %zu more communicators\n", comms.size() - 24);
  const ProgramSpec& p = config.program;
  std::printf(
      "  iteration: 1F1B, %d microbatches x %d layers/stage, %lld us fwd + %.0f us bwd per layer; "
      "TP AllReduce %.3g MiB/layer, PP Send/Recv %.3g MiB, DP ReduceScatter+AllGather %.3g MiB, "
      "emb AllReduce %.3g MiB, mp AllReduce 8 B, world AllReduce 4 B every %d\n",
      p.microbatches, p.layers, static_cast<long long>(p.layer_fwd_ns / 1000),
      p.layer_fwd_ns * p.backward_factor / 1000, p.tp_bytes / 1048576.0, p.pp_bytes / 1048576.0,
      p.dp_bytes / 1048576.0, p.emb_bytes / 1048576.0, p.world_every);
  std::string shapes;
  if (p.moe_expert_ns > 0 && p.moe_dispatcher == MoeDispatcher::kAllToAll) {
    shapes += StrFormat(
        " MoE all-to-all dispatch + combine per layer pass: one group of %d Send + %d Recv on "
        "each DP group, about %.3g MiB per peer;",
        l.dp() - 1, l.dp() - 1, p.moe_bytes / 1048576.0 / l.dp());
  }
  if (p.fsdp) {
    const uint64_t layer = p.fsdp_layer_bytes > 0 ? p.fsdp_layer_bytes : p.dp_bytes / p.layers;
    shapes += StrFormat(
        " FSDP: DP AllGather %.3g MiB per layer pass (prefetched), DP ReduceScatter per backward "
        "layer, no end-of-iteration DP sync;",
        layer / 1048576.0);
  }
  if (p.virtual_stages > 1) {
    shapes += StrFormat(" interleaved 1F1B: %d chunks of %d layer(s) per rank, pp ring wraps;",
                        p.virtual_stages, p.layers / p.virtual_stages);
  }
  if (p.cp_ring) {
    shapes += StrFormat(
        " context-parallel ring over each TP group: %d Send/Recv steps of %.3g MiB per layer "
        "pass, no TP AllReduce;",
        l.tp() - 1, (p.cp_bytes > 0 ? p.cp_bytes : p.tp_bytes) / 1048576.0);
  }
  if (!shapes.empty()) std::printf("  shapes:%s\n", shapes.c_str());
  std::string factors;
  for (double f : p.stage_factors) factors += StrFormat("%s%.3g", factors.empty() ? "" : ",", f);
  std::printf("  job id %s, seed %llu, %d channels, host ahead %d, warm-up %d iterations%s%s\n",
              job.c_str(), static_cast<unsigned long long>(o.seed), o.channels, config.host_ahead,
              config.warmup_iterations, factors.empty() ? "" : ", stage factors ", factors.c_str());
  std::printf("  faults:%s\n", DescribeFaults(o).c_str());
  // The whole job, unless that is more than the parent should compute up front.
  const bool complete = model.RunToEnd(/*max_ops=*/20'000'000);
  const int64_t t0 = config.t0_ns;
  const int64_t end =
      model.hung() ? std::max(model.last_end_ns(), config.end_ns) : model.last_end_ns();
  std::printf("  t0 %lld.%09lld (now + %lld ms); %s end t0 + %.3f s after %lld iterations%s\n",
              static_cast<long long>(t0 / 1'000'000'000),
              static_cast<long long>(t0 % 1'000'000'000), static_cast<long long>(o.start_delay_ms),
              complete ? "expected" : "forecast stopped at", (end - t0) / 1e9,
              static_cast<long long>(model.iterations_in_run()),
              model.hung() ? " (hangs, then idles until --duration-s)" : "");
  std::fflush(stdout);
}

struct Child {
  int rank;
  pid_t pid;
  int report_fd;
};

// Reports one finished rank; returns whether it counts as a failure.
bool ReportChild(const Options& o, const Child& child, int status) {
  char line[256] = "";
  const ssize_t n = read(child.report_fd, line, sizeof(line) - 1);
  line[n > 0 ? n : 0] = '\0';
  close(child.report_fd);
  std::printf("rank %d node %d pid %d: ", child.rank, child.rank / o.ranks_per_node,
              static_cast<int>(child.pid));
  if (WIFSIGNALED(status)) {
    std::printf("killed by signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
    return true;
  }
  const int code = WEXITSTATUS(status);
  if (n <= 0 && code == 0 && child.rank == o.kill_rank) {
    std::printf("killed by --kill-rank (no finalize) exit=0\n");
    return false;
  }
  std::printf("%s exit=%d\n", n > 0 ? line : "(no report)", code);
  return code != 0 || n <= 0;
}

int RunParent(const Options& o) {
  const int64_t t0 = NowNs() + o.start_delay_ms * 1'000'000;
  const TimelineConfig config = MakeTimelineConfig(o, t0);
  const JobModelConfig model_config =
      o.layout_megatron ? MakeJobModelConfig(o, t0) : JobModelConfig{};
  if (o.layout_megatron) {
    PrintMegatronSummary(o, model_config);
  } else {
    PrintSummary(o, config);
  }
  std::fflush(stderr);

  std::vector<Child> children;
  const int world = o.nodes * o.ranks_per_node;
  const pid_t parent = getpid();
  for (int rank = 0; rank < world; ++rank) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      std::perror("simjob: pipe2");
      return 1;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("simjob: fork");
      return 1;
    }
    if (pid == 0) {
      // A rank must not outlive the job: if the parent is killed, the kernel ends the rank too.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);  // the parent died before prctl took effect
      close(fds[0]);
      for (const Child& c : children) close(c.report_fd);
      const int code = RunRank(o, config, model_config, rank, fds[1]);
      std::fflush(nullptr);
      _exit(code);  // skip the parent's atexit handlers and stdio buffers
    }
    close(fds[1]);
    children.push_back({rank, pid, fds[0]});
  }

  int failed = 0;
  for (const Child& child : children) {
    int status = 0;
    while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (ReportChild(o, child, status)) ++failed;
  }
  if (failed > 0) {
    std::printf("simjob: FAILED: %d of %d ranks failed (see messages above)\n", failed, world);
  } else {
    std::printf("simjob: done, all %d ranks exited cleanly\n", world);
  }
  std::fflush(stdout);
  return failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace ncclwatch::simjob

int main(int argc, char** argv) {
  using namespace ncclwatch::simjob;
  const Options options = ParseArgs(argc, argv);
  if (options.help) {
    PrintHelp();
    return 0;
  }
  Validate(options);
  return RunParent(options);
}
