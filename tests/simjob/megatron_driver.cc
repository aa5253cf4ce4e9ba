// The user thread of a simjob rank in --layout megatron; the contract is in megatron_driver.h.
#include "tests/simjob/megatron_driver.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <utility>
#include <vector>

#include "plugin/abi.h"
#include "tests/simjob/job_common.h"
#include "tests/simjob/nccl_events.h"
#include "tests/simjob/proxy_thread.h"
#include "tests/simjob/rank_process.h"

namespace ncclwatch::simjob {
namespace {

class MegatronDriver {
 public:
  MegatronDriver(const Options& options, const JobModelConfig& config, int rank, ProfilerHost* host)
      : options_(options),
        model_(config, std::vector<int>{rank}),
        rank_(rank),
        host_(host),
        events_(host, rank, options.channels),
        comm_index_(model_.layout().NumCommIds(), -1) {
    if (config.kill_rank == rank) kill_at_ns_ = config.kill_at_ns;
  }

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
      const int index = static_cast<int>(comms_.size());
      comm_index_[layout.CommId(c)] = index;
      comms_.push_back(std::move(comm));
      events_.Init(&comms_.back(), index);
    }
  }

  void Run() {
    ProxyThread proxy(host_);
    while (const JobOp* op = model_.Next(rank_)) {
      SleepUntilOrDie(op->host_enqueue_ns);
      report_.max_lag_ns = std::max(report_.max_lag_ns, NowNs() - op->host_enqueue_ns);
      Launch(*op, &proxy);
      ++report_.steps;
    }
    if (model_.Fate(rank_) != RankFate::kCompleted) {
      // A hung job idles until the duration ends, then everybody tears down; a rank to be killed
      // dies at its kill time, even if that is after the end.
      const int64_t end_ns = model_.config().end_ns;
      SleepUntilOrDie(kill_at_ns_ == kNever ? end_ns : std::max(end_ns, kill_at_ns_));
    }
    proxy.Finish();
    report_.kernel_ch_started = proxy.channels_started();
    report_.kernel_ch_stopped = proxy.channels_stopped();
    report_.kernel_phases = proxy.phases_started();
  }

  void FinalizeCommunicators() {
    for (NcclComm& comm : comms_) events_.Finalize(&comm);
    report_.events = host_->events_started();
    report_.null_handles = host_->null_handles();
  }

  const RankReport& report() const { return report_; }

 private:
  // Sleeps until `deadline_ns`, unless this rank is to be killed before then.
  void SleepUntilOrDie(int64_t deadline_ns) {
    if (kill_at_ns_ <= deadline_ns) {
      SleepUntil(kill_at_ns_);
      RankLog(abi::kLogInfo, 0, __FILE__, __LINE__, "killed (--kill-rank): _exit(0)");
      _exit(0);  // abrupt: no finalize, no dlclose, no atexit handlers
    }
    SleepUntil(deadline_ns);
  }

  void Launch(const JobOp& op, ProxyThread* proxy) {
    NcclComm& comm = comms_[comm_index_[model_.layout().CommId(op.comm)]];
    std::vector<NcclTask> tasks;
    for (int t = 0; t < op.n_tasks; ++t) {
      const JobTask& task = op.tasks[t];
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
    const NcclLaunch launch = events_.Launch(&comm, tasks);
    if (!launch.kernel_ch) return;
    KernelWork work;
    work.context = launch.context;
    work.parents = launch.parents;
    work.start_ns = op.gpu_start_ns;
    work.stop_ns = op.gpu_end_ns;
    SetChannelTimers(
        options_.channels, launch.kernel_phase, op.all_arrived_ns,
        [this](int64_t t, int c) { return model_.GpuTimerNs(rank_, t, c); }, &work);
    proxy->Push(std::move(work));
  }

  const Options& options_;
  JobModel model_;
  const int rank_;
  ProfilerHost* const host_;
  NcclEvents events_;
  std::deque<NcclComm> comms_;   // in creation order; a deque keeps references stable
  std::vector<int> comm_index_;  // [comm id] -> index in comms_, -1 if not ours
  int64_t kill_at_ns_ = kNever;
  bool seq_warned_ = false;
  RankReport report_;
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
