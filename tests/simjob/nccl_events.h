// What NCCL's user thread tells the profiler, shared by the drivers of every simjob layout: a
// communicator's init and finalize (docs/nccl-profiler-abi.md §3.2, §3.6), and the event
// sequence of one group launch (§7.4): GroupApi, CollApi/P2pApi, Group, KernelLaunch, Coll/P2p.
// Events are emitted only as the activation mask and the ABI version allow (§6.2; v4 has no
// API-level events; v4-v6 no KernelPhase); communicators whose init failed get no events. The
// per-channel KernelCh and KernelPhase events that follow a launch are the ProxyThread's
// (proxy_thread.h). Every API and task event carries its task's user tag (v7; older tables never
// see it).
//
// Thread safety: one NcclEvents per rank process, used by its user thread only. The activation
// mask is process-global, as in NCCL, and the plugin may change it from any thread.
#ifndef NCCLWATCH_TESTS_SIMJOB_NCCL_EVENTS_H_
#define NCCLWATCH_TESTS_SIMJOB_NCCL_EVENTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/simjob/profiler_host.h"

namespace ncclwatch::simjob {

// One NCCL task as the profiler sees it.
struct NcclTask {
  bool p2p = false;
  const char* func = "";
  size_t api_count = 0;       // the user's count argument
  size_t count = 0;           // NCCL's task count (bytes for AllGather)
  const char* datatype = "";  // the task's datatype (ncclInt8 for AllGather)
  int peer = 0;               // p2p only: the peer's comm rank
  int seq_slot = -1;          // collectives: NCCL's seqNumber slot (docs/nccl-profiler-abi.md
                              // §9.3); -1 for p2p
  uint64_t user_tag = 0;      // v7: the call's ncclCollConfig_t.userProfilerTag (0: none)
};

// The tasks NCCL makes of each call, from nccl-tests sizes in bytes (timeline.h's StepSpec): an
// AllReduce of `bytes`; an AllGather of `total_bytes` output and a ReduceScatter of `total_bytes`
// input over `nranks`; a Send or Recv of `bytes` with comm rank `peer`. Float32 data.
NcclTask AllReduceTask(uint64_t bytes);
NcclTask AllGatherTask(uint64_t total_bytes, int nranks);
NcclTask ReduceScatterTask(uint64_t total_bytes, int nranks);
NcclTask SendTask(uint64_t bytes, int peer);
NcclTask RecvTask(uint64_t bytes, int peer);

struct NcclComm {
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

// The result of one group launch: the Coll/P2p handles that parent the launch's KernelCh events
// (one per task, possibly null), and whether KernelCh and (v7) KernelPhase events are to be
// emitted at all.
struct NcclLaunch {
  void* context = nullptr;
  std::vector<void*> parents;
  bool kernel_ch = false;
  bool kernel_phase = false;
};

class NcclEvents {
 public:
  // `global_rank` places the fake buffers; `channels` is every task's channel count.
  NcclEvents(ProfilerHost* host, int global_rank, int channels);

  // ncclCommInitRank of `comm` (name, hash, rank, nranks, n_nodes set by the caller), the
  // `index`-th communicator of the process: gives it a stream and calls the plugin's init. On
  // failure logs a warning and leaves the communicator unprofiled, as NCCL continues without
  // the profiler.
  void Init(NcclComm* comm, int index);
  // One group launch of `tasks` on `comm` (more than one task: the user called ncclGroupStart).
  // Samples the activation mask once, as NCCL does per API call. Advances the seqNumbers of the
  // collectives, with or without events. `lost`: none of its events reach the profiler (lost
  // telemetry), as for an unprofiled communicator.
  NcclLaunch Launch(NcclComm* comm, const std::vector<NcclTask>& tasks, bool lost = false);
  // The plugin's finalize, for communicators whose init gave a context (§3.6).
  void Finalize(NcclComm* comm);

  // The process-global activation mask NCCL hands to every init (docs/nccl-profiler-abi.md §3.3).
  static int* activation_mask();

 private:
  bool Wants(uint64_t type, int mask) const;
  void* StartApiEvent(const NcclComm& comm, const NcclTask& task, void* group_api, int mask);
  void* StartTaskEvent(NcclComm& comm, const NcclTask& task, void* parent, void* group, int mask);

  ProfilerHost* const host_;
  const int global_rank_;
  const int channels_;
};

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_NCCL_EVENTS_H_
