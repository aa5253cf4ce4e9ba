// Profiler ABI v5 (NCCL 2.28, docs/nccl-profiler-abi.md §1): an 8-byte event type, API events
// (group, collective, point-to-point, kernel launch) above the task events, and the hash as
// `init`'s second argument (§3.1). Our own declarations, like abi_common.h.
#ifndef NCCLWATCH_PLUGIN_ABI_V5_H_
#define NCCLWATCH_PLUGIN_ABI_V5_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi_common.h"

namespace ncclwatch::abi {

struct GroupApiDescr {
  bool graph_captured;
  int group_depth;
};

struct CollApiDescr {
  const char* func;
  size_t count;
  const char* datatype;
  int root;
  void* stream;
  bool graph_captured;
};

struct P2pApiDescr {
  const char* func;
  size_t count;
  const char* datatype;
  void* stream;
  bool graph_captured;
};

struct KernelLaunchDescr {
  void* stream;
};

struct CollDescrV5 {
  uint64_t seq_number;
  const char* func;
  const void* send_buff;
  void* recv_buff;
  size_t count;  // bytes (with datatype "ncclInt8") for AllGather and Broadcast
  int root;
  const char* datatype;
  uint8_t n_channels;
  uint8_t n_warps;
  const char* algo;
  const char* proto;
  void* parent_group;
};

struct P2pDescrV5 {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t n_channels;
  void* parent_group;
};

struct EventDescrV5 {
  uint64_t type;     // exactly one EventType bit
  void* parent_obj;  // handle we returned for the parent event, or NULL
  int rank;          // 0 for API, Group, ProxyCtrl and KernelCh events
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
  };
};

// The exported data symbol ncclProfiler_v5.
struct ProfilerV5 {
  const char* name;
  Result (*init)(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                 int n_nodes, int nranks, int rank, Logger logfn);
  Result (*start_event)(void* context, void** handle, EventDescrV5* descr);
  Result (*stop_event)(void* handle);
  Result (*record_event_state)(void* handle, EventState state, StateArgs* args);
  Result (*finalize)(void* context);
};

// ---- layout pins (x86-64 LP64, §5) -------------------------------------------------------------

static_assert(sizeof(EventDescrV5) == 112);
static_assert(offsetof(EventDescrV5, type) == 0);
static_assert(offsetof(EventDescrV5, parent_obj) == 8);
static_assert(offsetof(EventDescrV5, rank) == 16);
static_assert(offsetof(EventDescrV5, group_api) == 24);
static_assert(offsetof(EventDescrV5, group_api.graph_captured) == 24);
static_assert(offsetof(EventDescrV5, group_api.group_depth) == 28);
static_assert(offsetof(EventDescrV5, coll_api.func) == 24);
static_assert(offsetof(EventDescrV5, coll_api.count) == 32);
static_assert(offsetof(EventDescrV5, coll_api.datatype) == 40);
static_assert(offsetof(EventDescrV5, coll_api.root) == 48);
static_assert(offsetof(EventDescrV5, coll_api.stream) == 56);
static_assert(offsetof(EventDescrV5, coll_api.graph_captured) == 64);
static_assert(offsetof(EventDescrV5, p2p_api.func) == 24);
static_assert(offsetof(EventDescrV5, p2p_api.count) == 32);
static_assert(offsetof(EventDescrV5, p2p_api.datatype) == 40);
static_assert(offsetof(EventDescrV5, p2p_api.stream) == 48);
static_assert(offsetof(EventDescrV5, p2p_api.graph_captured) == 56);
static_assert(offsetof(EventDescrV5, kernel_launch.stream) == 24);
static_assert(offsetof(EventDescrV5, coll.seq_number) == 24);
static_assert(offsetof(EventDescrV5, coll.func) == 32);
static_assert(offsetof(EventDescrV5, coll.send_buff) == 40);
static_assert(offsetof(EventDescrV5, coll.recv_buff) == 48);
static_assert(offsetof(EventDescrV5, coll.count) == 56);
static_assert(offsetof(EventDescrV5, coll.root) == 64);
static_assert(offsetof(EventDescrV5, coll.datatype) == 72);
static_assert(offsetof(EventDescrV5, coll.n_channels) == 80);
static_assert(offsetof(EventDescrV5, coll.n_warps) == 81);
static_assert(offsetof(EventDescrV5, coll.algo) == 88);
static_assert(offsetof(EventDescrV5, coll.proto) == 96);
static_assert(offsetof(EventDescrV5, coll.parent_group) == 104);
static_assert(offsetof(EventDescrV5, p2p.func) == 24);
static_assert(offsetof(EventDescrV5, p2p.buff) == 32);
static_assert(offsetof(EventDescrV5, p2p.datatype) == 40);
static_assert(offsetof(EventDescrV5, p2p.count) == 48);
static_assert(offsetof(EventDescrV5, p2p.peer) == 56);
static_assert(offsetof(EventDescrV5, p2p.n_channels) == 60);
static_assert(offsetof(EventDescrV5, p2p.parent_group) == 64);
static_assert(offsetof(EventDescrV5, proxy_op.pid) == 24);
static_assert(offsetof(EventDescrV5, proxy_op.channel_id) == 28);
static_assert(offsetof(EventDescrV5, proxy_op.peer) == 32);
static_assert(offsetof(EventDescrV5, proxy_op.n_steps) == 36);
static_assert(offsetof(EventDescrV5, proxy_op.chunk_size) == 40);
static_assert(offsetof(EventDescrV5, proxy_op.is_send) == 44);
static_assert(offsetof(EventDescrV5, proxy_step.step) == 24);
static_assert(offsetof(EventDescrV5, kernel_ch.channel_id) == 24);
static_assert(offsetof(EventDescrV5, kernel_ch.p_timer) == 32);
static_assert(offsetof(EventDescrV5, net_plugin.id) == 24);
static_assert(offsetof(EventDescrV5, net_plugin.data) == 32);
static_assert(sizeof(ProfilerV5) == 48);

}  // namespace ncclwatch::abi

#endif  // NCCLWATCH_PLUGIN_ABI_V5_H_
