// The user thread of a simjob rank: communicators, the per-step event sequences of NCCL's user
// thread, faults. The contract is in rank_driver.h; the event order follows
// docs/nccl-profiler-abi.md §7 and tests/simjob/README.md ("Event sequences").
#include "tests/simjob/rank_driver.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "plugin/abi.h"
#include "tests/simjob/job_common.h"
#include "tests/simjob/proxy_thread.h"
#include "tests/simjob/rank_process.h"

namespace ncclwatch::simjob {
namespace {

// One NCCL task as the profiler sees it.
struct Task {
  bool p2p;
  const char* func;
  size_t api_count;      // the user's count argument
  size_t count;          // NCCL's task count (bytes for AllGather)
  const char* datatype;  // the task's datatype (ncclInt8 for AllGather)
  int peer;              // p2p only
  int seq_slot;          // collectives: NCCL's seqNumber slot (docs/nccl-profiler-abi.md §9.3);
                         // -1 for p2p
};

constexpr const char* kFloat32 = "ncclFloat32";
constexpr size_t kFloat32Size = 4;
// seqNumber slots: Broadcast=0, Reduce=1, AllGather=2, ReduceScatter=3, AllReduce=4.
constexpr int kSeqAllGather = 2;
constexpr int kSeqReduceScatter = 3;
constexpr int kSeqAllReduce = 4;

struct Comm {
  std::string name;
  uint64_t hash = 0;
  int rank = 0;
  int nranks = 0;
  int n_nodes = 0;
  bool profiled = false;  // init succeeded
  void* context = nullptr;
  uint64_t seq[5] = {};
  void* stream = nullptr;  // fake cudaStream_t
};

// The process-global activation mask NCCL hands to every init (docs/nccl-profiler-abi.md §3.3).
int g_activation_mask = 0;

class RankDriver {
 public:
  RankDriver(const Options& options, const TimelineConfig& config, int rank, ProfilerHost* host)
      : options_(options), timeline_(config), rank_(rank), host_(host) {
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
    proxy_ = nullptr;
  }

  void FinalizeCommunicators() {
    for (Comm& comm : comms_) {
      // NCCL calls finalize only for communicators whose context is non-null
      // (docs/nccl-profiler-abi.md §3.6).
      if (comm.profiled && comm.context != nullptr) host_->Finalize(comm.context);
    }
    report_.events = host_->events_started();
    report_.null_handles = host_->null_handles();
  }

  const RankReport& report() const { return report_; }

 private:
  Comm& AddComm(CommScope scope) {
    const int instance = timeline_.InstanceOf(scope, rank_);
    const std::vector<int>& members = timeline_.Members(scope, instance);
    Comm comm;
    comm.name = CommName(scope, instance, options_.layout_3d);
    comm.hash = CommHash(JobId(options_), comm.name);
    comm.rank =
        static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    comm.nranks = static_cast<int>(members.size());
    comm.n_nodes = timeline_.NodesSpanned(scope, instance);
    comm.stream = reinterpret_cast<void*>(0x5ee0'0000 + 0x100 * comms_.size());
    comm_index_[static_cast<int>(scope)] = static_cast<int>(comms_.size());
    comms_.push_back(std::move(comm));
    Comm& c = comms_.back();
    const abi::Result r = host_->Init(&c.context, c.hash, &g_activation_mask, c.name.c_str(),
                                      c.n_nodes, c.nranks, c.rank, &RankLog);
    c.profiled = r == abi::kSuccess;
    if (!c.profiled) {
      RankLog(abi::kLogWarn, 0, __FILE__, __LINE__,
              "profiler init failed for comm %s (result %d): continuing without profiler",
              c.name.c_str(), static_cast<int>(r));
    }
    return c;
  }

  Comm& CommFor(CommScope scope) {
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

  std::vector<Task> BuildTasks(const StepSpec& spec, const Comm& comm) const {
    const size_t n = comm.nranks;
    switch (spec.op) {
      case OpKind::kAllReduce: {
        const size_t count = spec.bytes / kFloat32Size;
        return {{false, "AllReduce", count, count, kFloat32, 0, kSeqAllReduce}};
      }
      case OpKind::kAllGather: {
        // NCCL reports AllGather in bytes of ncclInt8 (docs/nccl-profiler-abi.md §4.3).
        const size_t per_rank = spec.bytes / n;
        return {
            {false, "AllGather", per_rank / kFloat32Size, per_rank, "ncclInt8", 0, kSeqAllGather}};
      }
      case OpKind::kReduceScatter: {
        const size_t recv_count = spec.bytes / n / kFloat32Size;
        return {{false, "ReduceScatter", recv_count, recv_count, kFloat32, 0, kSeqReduceScatter}};
      }
      case OpKind::kSendRecv: {
        const size_t count = spec.bytes / kFloat32Size;
        const int next = (comm.rank + 1) % comm.nranks;
        const int prev = (comm.rank + comm.nranks - 1) % comm.nranks;
        return {{true, "Send", count, count, kFloat32, next, -1},
                {true, "Recv", count, count, kFloat32, prev, -1}};
      }
    }
    return {};
  }

  // Whether NCCL would call the plugin for `type` under `mask`; v4 has no API-level events.
  bool Wants(uint64_t type, int mask) const {
    if (host_->abi_version() < 5 && type >= abi::kGroupApi) return false;
    return EventEnabled(type, mask);
  }

  void* StartApiEvent(const Comm& comm, const Task& task, void* group_api, int mask) {
    const uint64_t type = task.p2p ? abi::kP2pApi : abi::kCollApi;
    if (!Wants(type, mask)) return nullptr;
    abi::EventDescrV6 d = Descr(type, group_api, 0);
    if (task.p2p) {
      d.p2p_api = {task.func, task.api_count, kFloat32, comm.stream, false};
    } else {
      d.coll_api = {task.func, task.api_count, kFloat32, 0, comm.stream, false};
    }
    return host_->Start(comm.context, d);
  }

  void* StartTaskEvent(Comm& comm, const Task& task, void* parent, void* group, int mask) {
    const uint64_t type = task.p2p ? abi::kP2p : abi::kColl;
    if (!Wants(type, mask)) return nullptr;
    abi::EventDescrV6 d = Descr(type, parent, comm.rank);
    const auto channels = static_cast<uint8_t>(options_.channels);
    const uintptr_t buffer = 0x7f00'0000'0000 + 0x1'0000'0000 * static_cast<uintptr_t>(rank_);
    if (task.p2p) {
      d.p2p = {.func = task.func,
               .buff = reinterpret_cast<void*>(buffer),
               .datatype = task.datatype,
               .count = task.count,
               .peer = task.peer,
               .n_channels = channels,
               .parent_group = group};
    } else {
      d.coll = {.seq_number = comm.seq[task.seq_slot],
                .func = task.func,
                .send_buff = reinterpret_cast<const void*>(buffer),
                .recv_buff = reinterpret_cast<void*>(buffer + 0x8000'0000),
                .count = task.count,
                .root = 0,
                .datatype = task.datatype,
                .n_channels = channels,
                .n_warps = 16,
                .algo = "RING",
                .proto = "SIMPLE",
                .parent_group = group};
    }
    return host_->Start(comm.context, d);
  }

  static abi::EventDescrV6 Descr(uint64_t type, void* parent, int rank) {
    abi::EventDescrV6 d;
    std::memset(&d, 0, sizeof(d));  // NCCL's descriptors carry no stale bytes either
    d.type = type;
    d.parent_obj = parent;
    d.rank = rank;
    return d;
  }

  // Emits the user-thread side of one group launch (docs/nccl-profiler-abi.md §7.4) and returns the
  // task handles (the KernelCh parents).
  std::vector<void*> EmitGroup(Comm& comm, const std::vector<Task>& tasks, int mask) {
    const int depth = tasks.size() > 1 ? 2 : 1;  // >1 task: the user called ncclGroupStart
    void* group_api = nullptr;
    if (Wants(abi::kGroupApi, mask)) {
      abi::EventDescrV6 d = Descr(abi::kGroupApi, nullptr, 0);
      d.group_api = {false, depth};
      group_api = host_->Start(comm.context, d);
      host_->Record(group_api, abi::kGroupStartApiStop, nullptr);  // NCCL passes no args
    }
    std::vector<void*> api_handles;
    for (const Task& task : tasks) {
      void* h = StartApiEvent(comm, task, group_api, mask);
      host_->Stop(h);
      api_handles.push_back(h);
    }
    host_->Record(group_api, abi::kGroupEndApiStart, nullptr);

    void* group = nullptr;
    if (Wants(abi::kGroup, mask)) {
      group = host_->Start(comm.context, Descr(abi::kGroup, nullptr, 0));
    }
    if (Wants(abi::kKernelLaunch, mask)) {
      abi::EventDescrV6 d = Descr(abi::kKernelLaunch, group_api, 0);
      d.kernel_launch.stream = comm.stream;
      host_->Stop(host_->Start(comm.context, d));
    }
    std::vector<void*> task_handles;
    for (size_t i = 0; i < tasks.size(); ++i) {
      // v5+: the parent is the API event and the Group moves to parentGroup; v4: the Group.
      void* parent = host_->abi_version() >= 5 ? api_handles[i] : group;
      void* h = StartTaskEvent(comm, tasks[i], parent, group, mask);
      host_->Stop(h);  // Coll/P2p stop at enqueue, long before the kernel ends
      task_handles.push_back(h);
      if (tasks[i].seq_slot >= 0) ++comm.seq[tasks[i].seq_slot];  // counted with or without events
    }
    host_->Stop(group);
    host_->Stop(group_api);
    return task_handles;
  }

  void RunStep(const StepTimes& st) {
    Comm& comm = CommFor(st.scope);
    const std::vector<Task> tasks = BuildTasks(*st.spec, comm);
    if (!comm.profiled) {
      for (const Task& t : tasks) {
        if (t.seq_slot >= 0) ++comm.seq[t.seq_slot];
      }
      return;
    }
    // NCCL samples the mask once per API call; the plugin may change it at any time.
    const int mask = std::atomic_ref<int>(g_activation_mask).load(std::memory_order_relaxed);
    KernelWork work;
    work.context = comm.context;
    work.parents = EmitGroup(comm, tasks, mask);
    if (!Wants(abi::kKernelCh, mask)) return;
    work.start_ns = st.arrival[rank_];
    work.stop_ns = st.end[rank_];
    for (int c = 0; c < options_.channels; ++c) {
      work.start_timers.push_back(timeline_.GpuTimerNs(rank_, work.start_ns, c));
      if (work.stop_ns != kNever) {
        work.stop_timers.push_back(timeline_.GpuTimerNs(rank_, work.stop_ns, c));
      }
    }
    proxy_->Push(std::move(work));
  }

  const Options& options_;
  Timeline timeline_;
  const int rank_;
  ProfilerHost* const host_;
  int64_t kill_at_ns_ = kNever;
  std::deque<Comm> comms_;  // in creation order; a deque keeps references stable
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
