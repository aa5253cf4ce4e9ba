// simjob: a simulated NCCL host that drives a real profiler plugin.
//
// It stands in for NCCL plus a data-parallel training job: the parent process forks one process
// per rank (before any dlopen or thread, so children inherit nothing but memory), and every rank
// process loads the plugin exactly as NCCL does and replays NCCL's callback sequences in real time,
// with the schedule taken from the deterministic Timeline (timeline.h). Ranks never talk to each
// other: each computes the same global schedule from the same seed.
//
// Inside a rank process two threads call the plugin, as in NCCL: the user thread emits the API,
// Group and Coll/P2p events when the rank "arrives" at a step, and the proxy thread emits the
// per-channel KernelCh events when the simulated kernel starts and when the collective completes.
// The GPU timestamps (pTimer) are the virtual times of the model, so GPU durations are exact even
// when the host is too loaded to keep up in real time.
//
// Usage and the meaning of every flag: simjob --help, or README.md next to this file.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "plugin/abi.h"
#include "tests/simjob/options.h"
#include "tests/simjob/profiler_host.h"
#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {
namespace {

// ---- time --------------------------------------------------------------------------------------

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Sleeps until an absolute CLOCK_REALTIME deadline (returns at once if it has passed).
void SleepUntil(int64_t deadline_ns) {
  const timespec ts = {static_cast<time_t>(deadline_ns / 1'000'000'000),
                       static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

// The communicator names (and so hashes) all ranks agree on: "world", "node<n>" (--node-comm) or
// "tp<n>" (3D layout), "dp<i>", "pp<i>", "split<i>".
std::string CommName(CommScope scope, int instance, bool layout_3d) {
  switch (scope) {
    case CommScope::kWorld:
      return "world";
    case CommScope::kNode:
      return (layout_3d ? "tp" : "node") + std::to_string(instance);
    case CommScope::kDp:
      return "dp" + std::to_string(instance);
    case CommScope::kPp:
      return "pp" + std::to_string(instance);
    case CommScope::kSplit:
      return "split" + std::to_string(instance);
  }
  return "invalid";
}

// The families a job's communicators come from, in creation order: those of the workload, then
// the split halves (created mid-run) if the job splits.
std::vector<CommScope> ScopesOf(const TimelineConfig& config) {
  std::vector<CommScope> scopes;
  for (const StepSpec& s : config.workload) {
    if (std::find(scopes.begin(), scopes.end(), s.scope) == scopes.end()) {
      scopes.push_back(s.scope);
    }
  }
  if (config.split_at_ns != kNever) scopes.push_back(CommScope::kSplit);
  return scopes;
}

// ---- logging (the logfn handed to the plugin; also used for simjob's own rank messages) -------

int g_rank = -1;         // set once in the rank process before any thread starts
bool g_verbose = false;  // likewise

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

// ---- proxy thread ------------------------------------------------------------------------------

// The kernel of one group launch: every task of it runs on every channel from the rank's arrival to
// the op's completion.
struct KernelWork {
  void* context = nullptr;
  std::vector<void*> parents;          // Coll/P2p handles, one per task (may be null)
  int64_t start_ns = 0;                // real time the kernel starts: the rank's arrival
  int64_t stop_ns = kNever;            // real time the op completes, kNever if it never does
  std::vector<uint64_t> start_timers;  // per channel GPU timer at start
  std::vector<uint64_t> stop_timers;   // per channel GPU timer at stop (empty if never)
};

// Plays NCCL's proxy progress thread: emits KernelCh start, KernelChStop and stop.
class ProxyThread {
 public:
  explicit ProxyThread(ProfilerHost* host) : host_(host), thread_([this] { Run(); }) {}
  ~ProxyThread() { Finish(); }

  void Push(KernelWork work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(work));
    }
    cv_.notify_all();
  }

  // No more work will come: completes every queued op that completes, abandons the one that never
  // does (a hung collective), and joins the thread.
  void Finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  uint64_t channels_started() const { return started_.load(std::memory_order_relaxed); }
  uint64_t channels_stopped() const { return stopped_.load(std::memory_order_relaxed); }

 private:
  void Run() {
    for (;;) {
      KernelWork work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      SleepUntil(work.start_ns);
      std::vector<void*> handles = StartChannels(work);
      if (work.stop_ns == kNever) {
        // The collective never completes: its channels stay open until the job ends.
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return done_; });
        continue;
      }
      SleepUntil(work.stop_ns);
      StopChannels(work, handles);
    }
  }

  std::vector<void*> StartChannels(const KernelWork& work) {
    std::vector<void*> handles;
    for (void* parent : work.parents) {
      for (size_t c = 0; c < work.start_timers.size(); ++c) {
        abi::EventDescrV6 d;
        std::memset(&d, 0, sizeof(d));
        d.type = abi::kKernelCh;
        d.parent_obj = parent;
        d.rank = 0;  // NCCL leaves rank 0 for KernelCh
        d.kernel_ch.channel_id = static_cast<uint8_t>(c);
        d.kernel_ch.p_timer = work.start_timers[c];
        handles.push_back(host_->Start(work.context, d));
        started_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return handles;
  }

  void StopChannels(const KernelWork& work, const std::vector<void*>& handles) {
    const size_t channels = work.stop_timers.size();
    for (size_t i = 0; i < handles.size(); ++i) {
      abi::StateArgs args;
      args.kernel_ch.p_timer = work.stop_timers[i % channels];
      // KernelChStop and stop come back to back, as in NCCL.
      host_->Record(handles[i], abi::kKernelChStop, &args);
      host_->Stop(handles[i]);
      stopped_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  ProfilerHost* const host_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KernelWork> queue_;  // guarded by mu_
  bool done_ = false;             // guarded by mu_
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> stopped_{0};
  std::thread thread_;  // last: starts after every other member is initialized
};

// ---- rank process ------------------------------------------------------------------------------

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

struct RankReport {
  int64_t steps = 0;
  uint64_t events = 0;
  uint64_t null_handles = 0;
  uint64_t kernel_ch_started = 0;
  uint64_t kernel_ch_stopped = 0;
  int64_t max_lag_ns = 0;  // how far behind the schedule the user thread ever ran
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
    comm.rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) -
                                 members.begin());
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

// The whole life of one rank process. Returns its exit status; writes its report line to
// report_fd.
int RunRank(const Options& o, const TimelineConfig& config, int rank, int report_fd) {
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
  RankReport report;
  {
    RankDriver driver(o, config, rank, host.get());
    driver.InitCommunicators();
    driver.Run();
    driver.FinalizeCommunicators();
    report = driver.report();
  }
  host.reset();  // dlclose, after the last finalize, as NCCL does
  char line[256];
  const int n = std::snprintf(
      line, sizeof(line),
      "steps=%lld max_lag_us=%lld events=%llu null_handles=%llu kernel_ch=%llu/%llu",
      static_cast<long long>(report.steps), static_cast<long long>(report.max_lag_ns / 1000),
      static_cast<unsigned long long>(report.events),
      static_cast<unsigned long long>(report.null_handles),
      static_cast<unsigned long long>(report.kernel_ch_started),
      static_cast<unsigned long long>(report.kernel_ch_stopped));
  if (write(report_fd, line, n) != n) return 1;
  return 0;
}

// ---- parent ------------------------------------------------------------------------------------

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

void PrintSummary(const Options& o, const TimelineConfig& config) {
  const Timeline timeline(config);
  const int world = timeline.world_size();
  std::printf("simjob: %d ranks = %d nodes x %d ranks/node, ABI v%d, plugin %s\n", world, o.nodes,
              o.ranks_per_node, o.abi, o.plugin.c_str());
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
  PrintSummary(o, config);
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
      const int code = RunRank(o, config, rank, fds[1]);
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
