// The user thread of a simjob rank in the world and 3d layouts: communicators, the steps of the
// Timeline, faults. The contract is in rank_driver.h; the events of each launch are
// nccl_events.h's (docs/nccl-profiler-abi.md §7, tests/simjob/README.md "Event sequences").
#include "tests/simjob/rank_driver.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "plugin/abi.h"
#include "tests/simjob/job_common.h"
#include "tests/simjob/nccl_events.h"
#include "tests/simjob/proxy_thread.h"
#include "tests/simjob/rank_process.h"

namespace ncclwatch::simjob {
namespace {

class RankDriver {
 public:
  RankDriver(const Options& options, const TimelineConfig& config, int rank, ProfilerHost* host)
      : options_(options),
        timeline_(config),
        rank_(rank),
        host_(host),
        events_(host, rank, options.channels) {
    const RankFault& f = config.fault;
    if (f.kind == FaultKind::kKill && f.rank == rank) kill_at_ns_ = f.at_ns;
  }

  // Creates the communicators of every family the workload uses; the split halves come later,
  // when the first step after the split needs them (as ncclCommSplit would).
  void InitCommunicators() {
    for (CommScope scope : ScopesOf(timeline_.config())) {
      if (scope != CommScope::kSplit) AddComm(scope);
    }
  }

  // Runs every step of the job; returns when the job is over (or _exits for --kill-rank).
  void Run() {
    ProxyThread proxy(host_);
    proxy_ = &proxy;
    bool stuck = false;
    for (;;) {
      const StepTimes& st = timeline_.Advance();
      if (!st.in_run) break;
      if (st.arrival[rank_] == kNever) {
        stuck = true;
        break;
      }
      SleepUntilOrDie(st.arrival[rank_]);
      report_.max_lag_ns = std::max(report_.max_lag_ns, NowNs() - st.arrival[rank_]);
      RunStep(st);
      ++report_.steps;
      if (st.end[rank_] == kNever) {
        stuck = true;
        break;
      }
    }
    if (stuck) {
      // A hung job idles until the duration ends, then everybody tears down. A rank that is stuck
      // because it is being killed dies at its kill time, even if that is after the end.
      const int64_t end_ns = timeline_.config().end_ns;
      SleepUntilOrDie(kill_at_ns_ == kNever ? end_ns : std::max(end_ns, kill_at_ns_));
    }
    proxy.Finish();
    report_.kernel_ch_started = proxy.channels_started();
    report_.kernel_ch_stopped = proxy.channels_stopped();
    report_.kernel_phases = proxy.phases_started();
    proxy_ = nullptr;
  }

  void FinalizeCommunicators() {
    for (NcclComm& comm : comms_) events_.Finalize(&comm);
    report_.events = host_->events_started();
    report_.null_handles = host_->null_handles();
  }

  const RankReport& report() const { return report_; }

 private:
  NcclComm& AddComm(CommScope scope) {
    const int instance = timeline_.InstanceOf(scope, rank_);
    const std::vector<int>& members = timeline_.Members(scope, instance);
    NcclComm comm;
    comm.name = CommName(scope, instance, options_.layout_3d);
    comm.hash = CommHash(JobId(options_), comm.name);
    comm.rank =
        static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    comm.nranks = static_cast<int>(members.size());
    comm.n_nodes = timeline_.NodesSpanned(scope, instance);
    const int index = static_cast<int>(comms_.size());
    comm_index_[static_cast<int>(scope)] = index;
    comms_.push_back(std::move(comm));
    events_.Init(&comms_.back(), index);
    return comms_.back();
  }

  NcclComm& CommFor(CommScope scope) {
    const int i = comm_index_[static_cast<int>(scope)];
    return i >= 0 ? comms_[i] : AddComm(scope);
  }

  // Sleeps until `deadline_ns`, unless this rank is to be killed before then.
  void SleepUntilOrDie(int64_t deadline_ns) {
    if (kill_at_ns_ <= deadline_ns) {
      SleepUntil(kill_at_ns_);
      RankLog(abi::kLogInfo, 0, __FILE__, __LINE__, "killed (--kill-rank): _exit(0)");
      _exit(0);  // abrupt: no finalize, no dlclose, no atexit handlers
    }
    SleepUntil(deadline_ns);
  }

  std::vector<NcclTask> BuildTasks(const StepSpec& spec, const NcclComm& comm) const {
    switch (spec.op) {
      case OpKind::kAllReduce:
        return {AllReduceTask(spec.bytes)};
      case OpKind::kAllGather:
        return {AllGatherTask(spec.bytes, comm.nranks)};
      case OpKind::kReduceScatter:
        return {ReduceScatterTask(spec.bytes, comm.nranks)};
      case OpKind::kSendRecv:
        return {SendTask(spec.bytes, (comm.rank + 1) % comm.nranks),
                RecvTask(spec.bytes, (comm.rank + comm.nranks - 1) % comm.nranks)};
    }
    return {};
  }

  void RunStep(const StepTimes& st) {
    NcclComm& comm = CommFor(st.scope);
    std::vector<NcclTask> tasks = BuildTasks(*st.spec, comm);
    const auto iteration = static_cast<int64_t>(st.index / timeline_.config().workload.size());
    for (NcclTask& t : tasks) t.user_tag = UserTag(options_, iteration);
    const NcclLaunch launch = events_.Launch(&comm, tasks);
    if (!launch.kernel_ch) return;
    KernelWork work;
    work.context = launch.context;
    work.parents = launch.parents;
    work.start_ns = st.arrival[rank_];
    work.stop_ns = st.end[rank_];
    SetChannelTimers(
        options_.channels, launch.kernel_phase, st.all_arrived[rank_],
        [this](int64_t t, int c) { return timeline_.GpuTimerNs(rank_, t, c); }, &work);
    proxy_->Push(std::move(work));
  }

  const Options& options_;
  Timeline timeline_;
  const int rank_;
  ProfilerHost* const host_;
  NcclEvents events_;
  int64_t kill_at_ns_ = kNever;
  std::deque<NcclComm> comms_;  // in creation order; a deque keeps references stable
  int comm_index_[kScopes] = {-1, -1, -1, -1, -1};  // this rank's communicator of each family
  ProxyThread* proxy_ = nullptr;
  RankReport report_;
};

}  // namespace

RankReport DriveRank(const Options& options, const TimelineConfig& config, int rank,
                     ProfilerHost* host) {
  RankDriver driver(options, config, rank, host);
  driver.InitCommunicators();
  driver.Run();
  driver.FinalizeCommunicators();
  return driver.report();
}

}  // namespace ncclwatch::simjob
