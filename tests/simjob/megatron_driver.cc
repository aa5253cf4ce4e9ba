// The user thread of a simjob rank in --layout megatron; the contract is in megatron_driver.h.
#include "tests/simjob/megatron_driver.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "plugin/abi.h"
#include "tests/simjob/driver_base.h"
#include "tests/simjob/job_common.h"

namespace ncclwatch::simjob {
namespace {

class MegatronDriver : public DriverBase {
 public:
  MegatronDriver(const Options& options, const JobModelConfig& config, int rank, ProfilerHost* host)
      : DriverBase(options, rank, host, config.kill_rank == rank ? config.kill_at_ns : kNever),
        model_(config, std::vector<int>{rank}),
        comm_index_(model_.layout().NumCommIds(), -1) {}

  // Every communicator of the rank, at start-up (megatron_layout.h's creation order).
  void InitCommunicators() {
    const MegatronLayout& layout = model_.layout();
    for (const CommRef& c : layout.CommsOf(rank_)) {
      NcclComm comm;
      comm.name = layout.CommName(c);
      comm.hash = CommHash(JobId(options_), comm.name);
      comm.rank = layout.CommRank(c.family, rank_);
      comm.nranks = static_cast<int>(layout.Members(c.family, c.instance).size());
      comm.n_nodes = layout.NodesSpanned(c);
      comm_index_[layout.CommId(c)] = AddComm(std::move(comm));
    }
  }

  void Run() {
    ProxyThread proxy(host_);
    while (const JobOp* op = model_.Next(rank_)) {
      SleepUntilOrDie(op->host_enqueue_ns);
      report_.max_lag_ns = std::max(report_.max_lag_ns, NowNs() - op->host_enqueue_ns);
      LaunchOp(*op, &proxy);
      ++report_.steps;
    }
    // A hung job idles until the duration ends, then everybody tears down.
    if (model_.Fate(rank_) != RankFate::kCompleted) IdleUntilTheEnd(model_.config().end_ns);
    Finish(proxy);
  }

 private:
  void LaunchOp(const JobOp& op, ProxyThread* proxy) {
    NcclComm& comm = comms_[comm_index_[model_.layout().CommId(op.comm)]];
    std::vector<NcclTask> tasks;
    for (const JobTask& task : op.tasks) {
      switch (task.kind) {
        case JobOpKind::kAllReduce:
          tasks.push_back(AllReduceTask(task.bytes));
          break;
        case JobOpKind::kReduceScatter:
          tasks.push_back(ReduceScatterTask(task.bytes, comm.nranks));
          break;
        case JobOpKind::kAllGather:
          tasks.push_back(AllGatherTask(task.bytes, comm.nranks));
          break;
        case JobOpKind::kSend:
          tasks.push_back(SendTask(task.bytes, task.peer));
          break;
        case JobOpKind::kRecv:
          tasks.push_back(RecvTask(task.bytes, task.peer));
          break;
      }
      tasks.back().user_tag = UserTag(options_, op.iteration);
      const int slot = tasks.back().seq_slot;
      if (slot >= 0 && comm.seq[slot] != static_cast<uint64_t>(task.seq) && !seq_warned_) {
        seq_warned_ = true;  // the model and NCCL's counting must agree; say so once
        RankLog(abi::kLogWarn, 0, __FILE__, __LINE__, "comm %s: model seq %lld, host seq %llu",
                comm.name.c_str(), static_cast<long long>(task.seq),
                static_cast<unsigned long long>(comm.seq[slot]));
      }
    }
    // --bogus-rank: this op's KernelCh stops lie, 5 s after the truth: one op in bogus_every,
    // drawn at random (a lie at a fixed place in the program would be a pattern, not noise).
    const bool lies =
        std::find(options_.bogus_ranks.begin(), options_.bogus_ranks.end(), rank_) !=
            options_.bogus_ranks.end() &&
        SplitMix64(options_.seed ^ SplitMix64(static_cast<uint64_t>(op.index) << 16 | rank_)) %
                static_cast<uint64_t>(options_.bogus_every) ==
            0;
    // --lose-rank: one op in lose_every loses profiler events, at random: a collective all of
    // them (a gap in its seqNumbers), or any op its last channel's stop. Point-to-point
    // operations always keep their start: NCCL numbers them in the plugin, and a lost start
    // would shift that numbering for the rest of the job (docs/detection.md, known limits).
    const uint64_t lose_draw =
        std::find(options_.lose_ranks.begin(), options_.lose_ranks.end(), rank_) !=
                options_.lose_ranks.end()
            ? SplitMix64(options_.seed ^ SplitMix64(static_cast<uint64_t>(op.index) << 20 ^
                                                    0x6c6f7374ull ^ static_cast<uint64_t>(rank_)))
            : 1;
    const bool lose = lose_draw % static_cast<uint64_t>(options_.lose_every) == 0;
    const bool collective = !IsP2p(op.tasks[0].kind);
    const bool lost = lose && collective && (lose_draw >> 32) % 2 == 0;
    const int64_t stop_ns = op.gpu_end_ns;
    Launch(
        comm, tasks, op.gpu_start_ns, op.gpu_end_ns, op.all_arrived_ns,
        [this, lies, stop_ns](int64_t t, int c) {
          return model_.GpuTimerNs(rank_, t, c) + (lies && t == stop_ns ? 5'000'000'000ull : 0);
        },
        proxy, lost, lose && !lost);
  }

  JobModel model_;
  std::vector<int> comm_index_;  // [comm id] -> index in comms_, -1 if not ours
  bool seq_warned_ = false;
};

}  // namespace

RankReport DriveMegatronRank(const Options& options, const JobModelConfig& config, int rank,
                             ProfilerHost* host) {
  MegatronDriver driver(options, config, rank, host);
  driver.InitCommunicators();
  driver.Run();
  driver.FinalizeCommunicators();
  return driver.report();
}

}  // namespace ncclwatch::simjob
