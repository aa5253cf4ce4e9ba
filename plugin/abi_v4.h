// Profiler ABI v4 (NCCL 2.27, docs/nccl-profiler-abi.md §1): a one-byte event type, no API
// events, collectives and point-to-point tasks whose parent is the group event, and an `init`
// that takes the communicator's name before its hash (§3.4). Our own declarations, like
// abi_common.h.
#ifndef NCCLWATCH_PLUGIN_ABI_V4_H_
#define NCCLWATCH_PLUGIN_ABI_V4_H_

#include <cstddef>
#include <cstdint>

#include "plugin/abi_common.h"

namespace ncclwatch::abi {

struct CollDescrV4 {
  uint64_t seq_number;
  const char* func;
  const void* send_buff;
  void* recv_buff;
  size_t count;
  int root;
  const char* datatype;
  uint8_t n_channels;
  uint8_t n_warps;
  const char* algo;
  const char* proto;
};

struct P2pDescrV4 {
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
  uint8_t n_channels;  // not copied by NCCL >= 2.28's v4 shim: treat as unreliable
};

struct EventDescrV4 {
  uint8_t type;
  void* parent_obj;
  int rank;
  union {
    CollDescrV4 coll;
    P2pDescrV4 p2p;
    ProxyOpDescr proxy_op;
    ProxyStepDescr proxy_step;
    KernelChDescr kernel_ch;
    NetPluginDescr net_plugin;
  };
};

// v4's init has commName before commHash (§3.4).
struct ProfilerV4 {
  const char* name;
  Result (*init)(void** context, int* activation_mask, const char* comm_name, uint64_t comm_hash,
                 int n_nodes, int nranks, int rank, Logger logfn);
  Result (*start_event)(void* context, void** handle, EventDescrV4* descr);
  Result (*stop_event)(void* handle);
  Result (*record_event_state)(void* handle, EventState state, StateArgs* args);
  Result (*finalize)(void* context);
};

// ---- layout pins (x86-64 LP64, §5) -------------------------------------------------------------

static_assert(sizeof(ProfilerV4) == 48);
static_assert(sizeof(EventDescrV4) == 104);
static_assert(offsetof(EventDescrV4, parent_obj) == 8);
static_assert(offsetof(EventDescrV4, rank) == 16);
static_assert(offsetof(EventDescrV4, coll.seq_number) == 24);
static_assert(offsetof(EventDescrV4, coll.n_channels) == 80);
static_assert(offsetof(EventDescrV4, coll.proto) == 96);
static_assert(offsetof(EventDescrV4, p2p.n_channels) == 60);
static_assert(offsetof(EventDescrV4, kernel_ch.p_timer) == 32);

}  // namespace ncclwatch::abi

#endif  // NCCLWATCH_PLUGIN_ABI_V4_H_
