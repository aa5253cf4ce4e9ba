// Profiler ABI v7 (NCCL 2.31): v6 plus a per-call user tag on the API and task descriptors, the
// symmetric-kernel variant of a collective, and KernelPhase events (docs/nccl-profiler-abi.md §12,
// re-declared here in our own names like abi_common.h). The layout is pinned by the static_asserts
// at the bottom, against the x86-64 offsets that §12 lists.
#ifndef NCCLWATCH_PLUGIN_ABI_V7_H_
#define NCCLWATCH_PLUGIN_ABI_V7_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi_v6.h"

namespace ncclwatch::abi {

// A KernelCh child (v7): one phase of the kernel on one channel. NCCL asks for it only under
// this activation bit, which also turns KernelCh on.
inline constexpr uint64_t kKernelPhase = uint64_t{1} << 15;
// recordEventState of a KernelPhase event: the phase ended; the GPU timestamp is in
// StateArgs::kernel_ch.p_timer (the v7 state-args union is v6's).
inline constexpr EventState kKernelPhaseStop = static_cast<EventState>(31);

// phase_id values.
enum KernelPhaseId : uint8_t {
  kPhaseInitialSync = 0,  // the channel waits for its peers before moving data
  kPhaseCompute = 1,
  kPhaseFinalSync = 2,
};

// User tags with the top bit set are NCCL's own.
inline constexpr uint64_t kUserTagReservedBit = uint64_t{1} << 63;

struct CollApiDescrV7 {
  const char* func;
  size_t count;
  const char* datatype;
  int root;
  void* stream;
  bool graph_captured;
  uint64_t user_tag;  // 0: untagged
};

struct P2pApiDescrV7 {
  const char* func;
  size_t count;
  const char* datatype;
  void* stream;
  bool graph_captured;
  uint64_t user_tag;
};

struct CollDescrV7 {
  uint64_t seq_number;
  const char* func;
  const void* send_buff;
  void* recv_buff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t n_channels;
  uint8_t n_warps;
  const char* algo;   // symmetric kernels: carries the kernel-variant suffix
  const char* proto;  // symmetric kernels: ""
  void* parent_group;
  const char* kernel_variant;  // symmetric kernels' name, else NULL
  bool is_sym_coll;
  uint64_t user_tag;
};

struct P2pDescrV7 {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t n_channels;  // channels actually used (2.31)
  void* parent_group;
  uint64_t user_tag;
};

struct CeCollDescrV7 {
  uint64_t seq_number;
  const char* func;
  const void* send_buff;
  void* recv_buff;
  size_t count;
  int root;
  const char* datatype;
  const char* sync_strategy;
  bool intra_batch_sync;
  uint32_t batch_size;
  uint32_t num_batches;
  uint32_t ce_seq_num;
  void* stream;
  uint64_t user_tag;
};

struct KernelPhaseDescr {
  uint8_t channel_id;
  uint8_t phase_id;  // KernelPhaseId
  const char* phase_name;
  uint64_t p_timer;  // GPU %globaltimer at the start of the phase
};

struct EventDescrV7 {
  uint64_t type;
  void* parent_obj;
  int rank;
  union {
    GroupApiDescr group_api;
    CollApiDescrV7 coll_api;
    P2pApiDescrV7 p2p_api;
    KernelLaunchDescr kernel_launch;
    CollDescrV7 coll;
    P2pDescrV7 p2p;
    ProxyOpDescr proxy_op;
    ProxyStepDescr proxy_step;
    KernelChDescr kernel_ch;
    NetPluginDescr net_plugin;
    CeCollDescrV7 ce_coll;
    CeSyncDescr ce_sync;
    CeBatchDescr ce_batch;
    KernelPhaseDescr kernel_phase;
  };
};

// The function table has v6's shape (the exported data symbol ncclProfiler_v7).
struct ProfilerV7 {
  const char* name;
  Result (*init)(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                 int n_nodes, int nranks, int rank, Logger logfn);
  Result (*start_event)(void* context, void** handle, EventDescrV7* descr);
  Result (*stop_event)(void* handle);
  Result (*record_event_state)(void* handle, EventState state, StateArgs* args);
  Result (*finalize)(void* context);
};

// ---- layout pins (x86-64 LP64, §12) ------------------------------------------------------------

static_assert(sizeof(EventDescrV7) == 136);
static_assert(sizeof(ProfilerV7) == 48);
static_assert(offsetof(EventDescrV7, type) == 0);
static_assert(offsetof(EventDescrV7, parent_obj) == 8);
static_assert(offsetof(EventDescrV7, rank) == 16);
static_assert(offsetof(EventDescrV7, coll_api.graph_captured) == 64);
static_assert(offsetof(EventDescrV7, coll_api.user_tag) == 72);
static_assert(offsetof(EventDescrV7, p2p_api.graph_captured) == 56);
static_assert(offsetof(EventDescrV7, p2p_api.user_tag) == 64);
static_assert(offsetof(EventDescrV7, coll.seq_number) == 24);
static_assert(offsetof(EventDescrV7, coll.n_channels) == 80);
static_assert(offsetof(EventDescrV7, coll.algo) == 88);
static_assert(offsetof(EventDescrV7, coll.proto) == 96);
static_assert(offsetof(EventDescrV7, coll.parent_group) == 104);
static_assert(offsetof(EventDescrV7, coll.kernel_variant) == 112);
static_assert(offsetof(EventDescrV7, coll.is_sym_coll) == 120);
static_assert(offsetof(EventDescrV7, coll.user_tag) == 128);
static_assert(offsetof(EventDescrV7, p2p.peer) == 56);
static_assert(offsetof(EventDescrV7, p2p.n_channels) == 60);
static_assert(offsetof(EventDescrV7, p2p.parent_group) == 64);
static_assert(offsetof(EventDescrV7, p2p.user_tag) == 72);
static_assert(offsetof(EventDescrV7, kernel_ch.channel_id) == 24);
static_assert(offsetof(EventDescrV7, kernel_ch.p_timer) == 32);
static_assert(offsetof(EventDescrV7, ce_coll.sync_strategy) == 80);
static_assert(offsetof(EventDescrV7, ce_coll.stream) == 104);
static_assert(offsetof(EventDescrV7, ce_coll.user_tag) == 112);
static_assert(offsetof(EventDescrV7, kernel_phase.channel_id) == 24);
static_assert(offsetof(EventDescrV7, kernel_phase.phase_id) == 25);
static_assert(offsetof(EventDescrV7, kernel_phase.phase_name) == 32);
static_assert(offsetof(EventDescrV7, kernel_phase.p_timer) == 40);

}  // namespace ncclwatch::abi

#endif  // NCCLWATCH_PLUGIN_ABI_V7_H_
