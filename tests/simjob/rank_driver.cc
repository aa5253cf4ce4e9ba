// The user thread of a simjob rank in the world and 3d layouts: communicators, the steps of the
// Timeline, faults. The contract is in rank_driver.h; the events of each launch are
// nccl_events.h's (docs/nccl-profiler-abi.md §7, tests/simjob/README.md "Event sequences").
#include "tests/simjob/rank_driver.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tests/simjob/driver_base.h"
#include "tests/simjob/job_common.h"

namespace ncclwatch::simjob {
namespace {

class RankDriver : public DriverBase {
 public:
  RankDriver(const Options& options, const TimelineConfig& config, int rank, ProfilerHost* host)
      : DriverBase(options, rank, host,
                   config.fault.kind == FaultKind::kKill && config.fault.rank == rank
                       ? config.fault.at_ns
                       : kNever),
        timeline_(config) {}

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
    // A hung job idles until the duration ends, then everybody tears down.
    if (stuck) IdleUntilTheEnd(timeline_.config().end_ns);
    Finish(proxy);
    proxy_ = nullptr;
  }

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
    comm_index_[static_cast<int>(scope)] = DriverBase::AddComm(std::move(comm));
    return comms_.back();
  }

  NcclComm& CommFor(CommScope scope) {
    const int i = comm_index_[static_cast<int>(scope)];
    return i >= 0 ? comms_[i] : AddComm(scope);
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
    Launch(
        comm, tasks, st.arrival[rank_], st.end[rank_], st.all_arrived[rank_],
        [this](int64_t t, int c) { return timeline_.GpuTimerNs(rank_, t, c); }, proxy_);
  }

  Timeline timeline_;
  int comm_index_[kScopes] = {-1, -1, -1, -1, -1};  // this rank's communicator of each family
  ProxyThread* proxy_ = nullptr;
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
