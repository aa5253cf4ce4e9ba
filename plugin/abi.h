// Our own declarations of the NCCL profiler plugin interface, versions 4, 5 and 6.
//
// Written from the interface as docs/nccl-profiler-abi.md describes it (field order, types,
// numeric values), not copied from NCCL. Every layout that NCCL relies on is pinned by the
// static_asserts at the bottom of this file, against the x86-64 sizes and offsets listed in §5 of
// that document; the other § numbers in this file refer to it too. Used by the plugin and by the
// simulated NCCL host in tests/simjob, which therefore speak exactly the same binary interface.
//
// Naming: NCCL's C names are deliberately not reused; everything lives in ncclwatch::abi.
#ifndef NCCLWATCH_PLUGIN_ABI_H_
#define NCCLWATCH_PLUGIN_ABI_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace ncclwatch::abi {

// ncclResult_t: an int-sized C enum. Plugins only ever return kSuccess from event callbacks.
enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
};

// ncclDebugLogLevel.
enum LogLevel : int {
  kLogNone = 0,
  kLogVersion = 1,
  kLogWarn = 2,
  kLogInfo = 3,
  kLogAbort = 4,
  kLogTrace = 5,
};

// Subsystem flag NCCL_DEBUG_SUBSYS=PROFILE selects.
inline constexpr unsigned long kLogSubsysProfile = 0x4000;

// ncclDebugLogger_t.
using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line,
                        const char* fmt, ...);

// Event-type bits, used both in EventDescr*::type and in the activation mask (§6.1).
enum EventType : uint64_t {
  kGroup = 1u << 0,
  kColl = 1u << 1,
  kP2p = 1u << 2,
  kProxyOp = 1u << 3,
  kProxyStep = 1u << 4,
  kProxyCtrl = 1u << 5,
  kKernelCh = 1u << 6,
  kNetPlugin = 1u << 7,
  kGroupApi = 1u << 8,       // v5+
  kCollApi = 1u << 9,        // v5+
  kP2pApi = 1u << 10,        // v5+
  kKernelLaunch = 1u << 11,  // v5+
  kCeColl = 1u << 12,        // v6
  kCeSync = 1u << 13,        // v6
  kCeBatch = 1u << 14,       // v6
};

// ncclProfilerEventState_t: a plain 4-byte C enum (§7.1). Only the values we act on are named.
enum EventState : int {
  kProxyStepSendGpuWait = 8,
  kProxyStepSendWait = 9,
  kProxyStepRecvWait = 10,
  kProxyStepRecvFlushWait = 11,
  kProxyStepRecvGpuWait = 12,
  kProxyCtrlIdle = 13,
  kProxyCtrlActive = 14,
  kProxyCtrlSleep = 15,
  kProxyCtrlWakeup = 16,
  kProxyCtrlAppend = 17,
  kProxyCtrlAppendEnd = 18,
  kProxyOpInProgressV4 = 19,
  kProxyStepSendPeerWaitV4 = 20,
  kNetPluginUpdate = 21,
  kKernelChStop = 22,
  kGroupStartApiStop = 23,
  kGroupEndApiStart = 24,
  kCeCollStart = 25,
  kCeCollComplete = 26,
  kCeSyncStart = 27,
  kCeSyncComplete = 28,
  kCeBatchStart = 29,
  kCeBatchComplete = 30,
};

// State arguments (v4, v5 and v6 share this 8-byte union, §7.2).
union StateArgs {
  struct {
    size_t trans_size;
  } proxy_step;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
  struct {
    void* data;
  } net_plugin;
  struct {
    uint64_t p_timer;  // GPU %globaltimer (ns) when the channel finished the work batch.
  } kernel_ch;
};

// ---- union members shared by v4, v5 and v6 ----------------------------------------------------

struct ProxyOpDescr {
  pid_t pid;  // process that created the op; under PXN this is another process (§10.2)
  uint8_t channel_id;
  int peer;
  int n_steps;
  int chunk_size;
  int is_send;
};

struct ProxyStepDescr {
  int step;
};

struct KernelChDescr {
  uint8_t channel_id;
  uint64_t p_timer;  // GPU %globaltimer (ns) when the kernel started the work batch.
};

struct NetPluginDescr {
  int64_t id;
  void* data;
};

// ---- v5 (and the prefix of v6) -----------------------------------------------------------------

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

// ---- v6: v5 plus copy-engine collectives ------------------------------------------------------

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

// ---- v4: one-byte type, no API events, Coll/P2p parent is the Group event ----------------------

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

// ---- function tables (the exported data symbols ncclProfiler_v4/_v5/_v6) ----------------------

struct ProfilerV5 {
  const char* name;
  Result (*init)(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                 int n_nodes, int nranks, int rank, Logger logfn);
  Result (*start_event)(void* context, void** handle, EventDescrV5* descr);
  Result (*stop_event)(void* handle);
  Result (*record_event_state)(void* handle, EventState state, StateArgs* args);
  Result (*finalize)(void* context);
};

struct ProfilerV6 {
  const char* name;
  Result (*init)(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                 int n_nodes, int nranks, int rank, Logger logfn);
  Result (*start_event)(void* context, void** handle, EventDescrV6* descr);
  Result (*stop_event)(void* handle);
  Result (*record_event_state)(void* handle, EventState state, StateArgs* args);
  Result (*finalize)(void* context);
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

static_assert(sizeof(Result) == 4 && sizeof(EventState) == 4);
static_assert(sizeof(StateArgs) == 8);
static_assert(sizeof(EventDescrV5) == 112);
static_assert(sizeof(EventDescrV6) == 112);
static_assert(sizeof(EventDescrV4) == 104);
static_assert(sizeof(ProfilerV5) == 48 && sizeof(ProfilerV6) == 48 && sizeof(ProfilerV4) == 48);

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

static_assert(offsetof(EventDescrV6, coll.parent_group) == 104);
static_assert(offsetof(EventDescrV6, kernel_ch.p_timer) == 32);
static_assert(offsetof(EventDescrV6, ce_coll.sync_strategy) == 80);
static_assert(offsetof(EventDescrV6, ce_coll.intra_batch_sync) == 88);
static_assert(offsetof(EventDescrV6, ce_coll.batch_size) == 92);
static_assert(offsetof(EventDescrV6, ce_coll.num_batches) == 96);
static_assert(offsetof(EventDescrV6, ce_coll.ce_seq_num) == 100);
static_assert(offsetof(EventDescrV6, ce_coll.stream) == 104);
static_assert(offsetof(EventDescrV6, ce_batch.total_bytes) == 32);

static_assert(offsetof(EventDescrV4, parent_obj) == 8);
static_assert(offsetof(EventDescrV4, rank) == 16);
static_assert(offsetof(EventDescrV4, coll.seq_number) == 24);
static_assert(offsetof(EventDescrV4, coll.n_channels) == 80);
static_assert(offsetof(EventDescrV4, coll.proto) == 96);
static_assert(offsetof(EventDescrV4, p2p.n_channels) == 60);
static_assert(offsetof(EventDescrV4, kernel_ch.p_timer) == 32);

}  // namespace ncclwatch::abi

#endif  // NCCLWATCH_PLUGIN_ABI_H_
