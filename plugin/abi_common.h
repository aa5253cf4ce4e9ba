// Our own declarations of the NCCL profiler plugin interface: what versions 4 to 7 share (result
// codes, log levels, event types and states, the state-arguments union, the union members every
// version's event descriptor has). One header per version adds its descriptors and function table
// (abi_v4.h ... abi_v7.h, in the shape of NCCL's profiler_vN.h); abi.h includes them all.
//
// Written from the interface as docs/nccl-profiler-abi.md describes it (field order, types,
// numeric values), not copied from NCCL. Every layout that NCCL relies on is pinned by the
// static_asserts at the bottom of each header, against the x86-64 sizes and offsets listed in §5
// of that document; the other § numbers refer to it too. Used by the plugin and by the simulated
// NCCL host in tests/simjob, which therefore speak exactly the same binary interface.
//
// Naming: NCCL's C names are deliberately not reused; everything lives in ncclwatch::abi.
#ifndef NCCLWATCH_PLUGIN_ABI_COMMON_H_
#define NCCLWATCH_PLUGIN_ABI_COMMON_H_

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

// ---- layout pins (x86-64 LP64, §5) -------------------------------------------------------------

static_assert(sizeof(Result) == 4 && sizeof(EventState) == 4);
static_assert(sizeof(StateArgs) == 8);

}  // namespace ncclwatch::abi

#endif  // NCCLWATCH_PLUGIN_ABI_COMMON_H_
