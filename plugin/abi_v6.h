// Profiler ABI v6 (NCCL 2.29 and 2.30, docs/nccl-profiler-abi.md §1): v5's function table, plus
// copy-engine collectives and their sync and batch children (§5.3, §6.1). Our own declarations,
// like abi_common.h.
#ifndef NCCLWATCH_PLUGIN_ABI_V6_H_
#define NCCLWATCH_PLUGIN_ABI_V6_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi_v5.h"

namespace ncclwatch::abi {

struct CeCollDescr {
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
};

struct CeSyncDescr {
  bool is_complete;
  int n_ranks;
};

struct CeBatchDescr {
  int num_ops;
  size_t total_bytes;
  bool use_intra_sync;
};

struct EventDescrV6 {
  uint64_t type;
  void* parent_obj;
  int rank;
  union {
    GroupApiDescr group_api;
    CollApiDescr coll_api;
    P2pApiDescr p2p_api;
    KernelLaunchDescr kernel_launch;
    CollDescrV5 coll;
    P2pDescrV5 p2p;
    ProxyOpDescr proxy_op;
    ProxyStepDescr proxy_step;
    KernelChDescr kernel_ch;
    NetPluginDescr net_plugin;
    CeCollDescr ce_coll;
    CeSyncDescr ce_sync;
    CeBatchDescr ce_batch;
  };
};

// The exported data symbol ncclProfiler_v6.
struct ProfilerV6 {
  const char* name;
  Result (*init)(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                 int n_nodes, int nranks, int rank, Logger logfn);
  Result (*start_event)(void* context, void** handle, EventDescrV6* descr);
  Result (*stop_event)(void* handle);
  Result (*record_event_state)(void* handle, EventState state, StateArgs* args);
  Result (*finalize)(void* context);
};

// ---- layout pins (x86-64 LP64, §5) -------------------------------------------------------------

static_assert(sizeof(ProfilerV6) == 48);
static_assert(sizeof(EventDescrV6) == 112);
static_assert(offsetof(EventDescrV6, coll.parent_group) == 104);
static_assert(offsetof(EventDescrV6, kernel_ch.p_timer) == 32);
static_assert(offsetof(EventDescrV6, ce_coll.sync_strategy) == 80);
static_assert(offsetof(EventDescrV6, ce_coll.intra_batch_sync) == 88);
static_assert(offsetof(EventDescrV6, ce_coll.batch_size) == 92);
static_assert(offsetof(EventDescrV6, ce_coll.num_batches) == 96);
static_assert(offsetof(EventDescrV6, ce_coll.ce_seq_num) == 100);
static_assert(offsetof(EventDescrV6, ce_coll.stream) == 104);
static_assert(offsetof(EventDescrV6, ce_batch.total_bytes) == 32);

}  // namespace ncclwatch::abi

#endif  // NCCLWATCH_PLUGIN_ABI_V6_H_
