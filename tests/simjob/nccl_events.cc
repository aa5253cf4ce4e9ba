// NCCL's user-thread events for communicators and group launches; the contract is in
// nccl_events.h, the event order follows docs/nccl-profiler-abi.md §7.4 and
// tests/simjob/README.md ("Event sequences").
#include "tests/simjob/nccl_events.h"

#include <atomic>
#include <cstring>

#include "plugin/abi.h"
#include "plugin/abi_v7.h"
#include "tests/simjob/rank_process.h"

namespace ncclwatch::simjob {
namespace {

constexpr const char* kFloat32 = "ncclFloat32";
constexpr size_t kFloat32Size = 4;
// seqNumber slots: Broadcast=0, Reduce=1, AllGather=2, ReduceScatter=3, AllReduce=4.
constexpr int kSeqAllGather = 2;
constexpr int kSeqReduceScatter = 3;
constexpr int kSeqAllReduce = 4;

int g_activation_mask = 0;

abi::EventDescrV7 Descr(uint64_t type, void* parent, int rank) {
  abi::EventDescrV7 d;
  std::memset(&d, 0, sizeof(d));  // NCCL's descriptors carry no stale bytes either
  d.type = type;
  d.parent_obj = parent;
  d.rank = rank;
  return d;
}

}  // namespace

NcclTask AllReduceTask(uint64_t bytes) {
  const size_t count = bytes / kFloat32Size;
  return {false, "AllReduce", count, count, kFloat32, 0, kSeqAllReduce};
}

NcclTask AllGatherTask(uint64_t total_bytes, int nranks) {
  // NCCL reports AllGather in bytes of ncclInt8 (docs/nccl-profiler-abi.md §4.3).
  const size_t per_rank = total_bytes / nranks;
  return {false, "AllGather", per_rank / kFloat32Size, per_rank, "ncclInt8", 0, kSeqAllGather};
}

NcclTask ReduceScatterTask(uint64_t total_bytes, int nranks) {
  const size_t recv_count = total_bytes / nranks / kFloat32Size;
  return {false, "ReduceScatter", recv_count, recv_count, kFloat32, 0, kSeqReduceScatter};
}

NcclTask SendTask(uint64_t bytes, int peer) {
  const size_t count = bytes / kFloat32Size;
  return {true, "Send", count, count, kFloat32, peer, -1};
}

NcclTask RecvTask(uint64_t bytes, int peer) {
  const size_t count = bytes / kFloat32Size;
  return {true, "Recv", count, count, kFloat32, peer, -1};
}

int* NcclEvents::activation_mask() { return &g_activation_mask; }

NcclEvents::NcclEvents(ProfilerHost* host, int global_rank, int channels)
    : host_(host), global_rank_(global_rank), channels_(channels) {}

void NcclEvents::Init(NcclComm* c, int index) {
  c->stream = reinterpret_cast<void*>(0x5ee0'0000 + 0x100 * static_cast<uintptr_t>(index));
  const abi::Result r = host_->Init(&c->context, c->hash, &g_activation_mask, c->name.c_str(),
                                    c->n_nodes, c->nranks, c->rank, &RankLog);
  c->profiled = r == abi::kSuccess;
  if (!c->profiled) {
    RankLog(abi::kLogWarn, 0, __FILE__, __LINE__,
            "profiler init failed for comm %s (result %d): continuing without profiler",
            c->name.c_str(), static_cast<int>(r));
  }
}

void NcclEvents::Finalize(NcclComm* comm) {
  // NCCL calls finalize only for communicators whose context is non-null
  // (docs/nccl-profiler-abi.md §3.6).
  if (comm->profiled && comm->context != nullptr) host_->Finalize(comm->context);
}

bool NcclEvents::Wants(uint64_t type, int mask) const {
  if (host_->abi_version() < 5 && type >= abi::kGroupApi) return false;
  // NCCL 2.31's v6 shim clears the v7 bit (ProfilerHost::Init does too, but the plugin may set
  // the mask again at any time).
  if (host_->abi_version() < 7) mask &= ~static_cast<int>(abi::kKernelPhase);
  return EventEnabled(type, mask);
}

void* NcclEvents::StartApiEvent(const NcclComm& comm, const NcclTask& task, void* group_api,
                                int mask) {
  const uint64_t type = task.p2p ? abi::kP2pApi : abi::kCollApi;
  if (!Wants(type, mask)) return nullptr;
  abi::EventDescrV7 d = Descr(type, group_api, 0);
  if (task.p2p) {
    d.p2p_api = {task.func, task.api_count, kFloat32, comm.stream, false, task.user_tag};
  } else {
    d.coll_api = {task.func, task.api_count, kFloat32, 0, comm.stream, false, task.user_tag};
  }
  return host_->Start(comm.context, d);
}

void* NcclEvents::StartTaskEvent(NcclComm& comm, const NcclTask& task, void* parent, void* group,
                                 int mask) {
  const uint64_t type = task.p2p ? abi::kP2p : abi::kColl;
  if (!Wants(type, mask)) return nullptr;
  abi::EventDescrV7 d = Descr(type, parent, comm.rank);
  const auto channels = static_cast<uint8_t>(channels_);
  const uintptr_t buffer = 0x7f00'0000'0000 + 0x1'0000'0000 * static_cast<uintptr_t>(global_rank_);
  if (task.p2p) {
    d.p2p = {.func = task.func,
             .buff = reinterpret_cast<void*>(buffer),
             .datatype = task.datatype,
             .count = task.count,
             .peer = task.peer,
             .n_channels = channels,
             .parent_group = group,
             .user_tag = task.user_tag};
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
              .parent_group = group,
              .kernel_variant = nullptr,  // a ring kernel, not a symmetric one
              .is_sym_coll = false,
              .user_tag = task.user_tag};
  }
  return host_->Start(comm.context, d);
}

NcclLaunch NcclEvents::Launch(NcclComm* comm_ptr, const std::vector<NcclTask>& tasks, bool lost) {
  NcclComm& comm = *comm_ptr;
  NcclLaunch launch;
  launch.context = comm.context;
  if (!comm.profiled || lost) {
    for (const NcclTask& t : tasks) {
      if (t.seq_slot >= 0) ++comm.seq[t.seq_slot];
    }
    return launch;
  }
  // NCCL samples the mask once per API call; the plugin may change it at any time.
  const int mask = std::atomic_ref<int>(g_activation_mask).load(std::memory_order_relaxed);
  const int depth = tasks.size() > 1 ? 2 : 1;  // >1 task: the user called ncclGroupStart
  void* group_api = nullptr;
  if (Wants(abi::kGroupApi, mask)) {
    abi::EventDescrV7 d = Descr(abi::kGroupApi, nullptr, 0);
    d.group_api = {false, depth};
    group_api = host_->Start(comm.context, d);
    host_->Record(group_api, abi::kGroupStartApiStop, nullptr);  // NCCL passes no args
  }
  std::vector<void*> api_handles;
  for (const NcclTask& task : tasks) {
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
    abi::EventDescrV7 d = Descr(abi::kKernelLaunch, group_api, 0);
    d.kernel_launch.stream = comm.stream;
    host_->Stop(host_->Start(comm.context, d));
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    // v5+: the parent is the API event and the Group moves to parentGroup; v4: the Group.
    void* parent = host_->abi_version() >= 5 ? api_handles[i] : group;
    void* h = StartTaskEvent(comm, tasks[i], parent, group, mask);
    host_->Stop(h);  // Coll/P2p stop at enqueue, long before the kernel ends
    launch.parents.push_back(h);
    if (tasks[i].seq_slot >= 0) ++comm.seq[tasks[i].seq_slot];  // counted with or without events
  }
  host_->Stop(group);
  host_->Stop(group_api);
  launch.kernel_ch = Wants(abi::kKernelCh, mask);
  launch.kernel_phase = Wants(abi::kKernelPhase, mask);
  return launch;
}

}  // namespace ncclwatch::simjob
