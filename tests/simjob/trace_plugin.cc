// libnccl-profiler-simtrace.so: a test profiler plugin that checks the host's side of the ABI. This
// file holds its exported tables, one thin adapter per ABI version (v4-v7) onto the Tracer
// (trace_tracer.h: the invariants it checks, its report line and its knobs).
#include "plugin/abi.h"
#include "plugin/abi_v7.h"
#include "tests/simjob/trace_tracer.h"

namespace ncclwatch::simtrace {
namespace {

Tracer g_tracer;

// ---- per-version adapters ----------------------------------------------------------------------

template <typename D>
Tracer::Descr Common(const D& d) {
  Tracer::Descr c{d.type, d.parent_obj, d.rank};
  if (d.type == abi::kColl) {
    c.func = d.coll.func;
    c.seq = d.coll.seq_number;
    c.n_channels = d.coll.n_channels;
  } else if (d.type == abi::kP2p) {
    c.func = d.p2p.func;
    c.n_channels = d.p2p.n_channels;
  } else if (d.type == abi::kKernelCh) {
    c.p_timer = d.kernel_ch.p_timer;
    c.channel = d.kernel_ch.channel_id;
  }
  return c;
}

template <typename D>
Tracer::Descr CommonV5(const D& d) {
  Tracer::Descr c = Common(d);
  if (d.type == abi::kColl) c.parent_group = d.coll.parent_group;
  if (d.type == abi::kP2p) c.parent_group = d.p2p.parent_group;
  return c;
}

// v7: the user tags and the KernelPhase member.
Tracer::Descr CommonV7(const abi::EventDescrV7& d) {
  Tracer::Descr c = CommonV5(d);
  switch (d.type) {
    case abi::kCollApi:
      c.user_tag = d.coll_api.user_tag;
      break;
    case abi::kP2pApi:
      c.user_tag = d.p2p_api.user_tag;
      break;
    case abi::kColl:
      c.user_tag = d.coll.user_tag;
      break;
    case abi::kP2p:
      c.user_tag = d.p2p.user_tag;
      break;
    case abi::kKernelPhase:
      c.channel = d.kernel_phase.channel_id;
      c.phase_id = d.kernel_phase.phase_id;
      c.phase_name = d.kernel_phase.phase_name;
      c.p_timer = d.kernel_phase.p_timer;
      break;
    default:
      break;
  }
  return c;
}

abi::Result InitV4(void** ctx, int* mask, const char*, uint64_t, int, int nranks, int rank,
                   abi::Logger) {
  return g_tracer.Init(4, ctx, mask, nranks, rank);
}
abi::Result InitV5(void** ctx, uint64_t, int* mask, const char*, int, int nranks, int rank,
                   abi::Logger) {
  return g_tracer.Init(5, ctx, mask, nranks, rank);
}
abi::Result InitV6(void** ctx, uint64_t, int* mask, const char*, int, int nranks, int rank,
                   abi::Logger) {
  return g_tracer.Init(6, ctx, mask, nranks, rank);
}
abi::Result InitV7(void** ctx, uint64_t, int* mask, const char*, int, int nranks, int rank,
                   abi::Logger) {
  return g_tracer.Init(7, ctx, mask, nranks, rank);
}
abi::Result StartV4(void* ctx, void** handle, abi::EventDescrV4* d) {
  g_tracer.Start(ctx, handle, Common(*d));
  return abi::kSuccess;
}
abi::Result StartV5(void* ctx, void** handle, abi::EventDescrV5* d) {
  g_tracer.Start(ctx, handle, CommonV5(*d));
  return abi::kSuccess;
}
abi::Result StartV6(void* ctx, void** handle, abi::EventDescrV6* d) {
  g_tracer.Start(ctx, handle, CommonV5(*d));
  return abi::kSuccess;
}
abi::Result StartV7(void* ctx, void** handle, abi::EventDescrV7* d) {
  g_tracer.Start(ctx, handle, CommonV7(*d));
  return abi::kSuccess;
}
abi::Result Stop(void* handle) {
  g_tracer.Stop(handle);
  return abi::kSuccess;
}
abi::Result Record(void* handle, abi::EventState state, abi::StateArgs* args) {
  g_tracer.Record(handle, state, args);
  return abi::kSuccess;
}
abi::Result Finalize(void* ctx) {
  g_tracer.Finalize(ctx);
  return abi::kSuccess;
}

}  // namespace
}  // namespace ncclwatch::simtrace

// The only symbols this library exports (it is built with -fvisibility=hidden): its tables up to
// SIMTRACE_NEWEST_ABI (7 unless the build says otherwise; libnccl-profiler-simtrace5.so stops at
// 5, as NCCL Inspector does). The newer ones are there, hidden.
#ifndef SIMTRACE_NEWEST_ABI
#define SIMTRACE_NEWEST_ABI 7
#endif
#define SIMTRACE_EXPORTED __attribute__((visibility("default")))
#define SIMTRACE_HIDDEN __attribute__((visibility("hidden")))
#if SIMTRACE_NEWEST_ABI >= 6
#define SIMTRACE_V6 SIMTRACE_EXPORTED
#else
#define SIMTRACE_V6 SIMTRACE_HIDDEN
#endif
#if SIMTRACE_NEWEST_ABI >= 7
#define SIMTRACE_V7 SIMTRACE_EXPORTED
#else
#define SIMTRACE_V7 SIMTRACE_HIDDEN
#endif
namespace simtrace = ncclwatch::simtrace;
extern "C" {
SIMTRACE_EXPORTED
ncclwatch::abi::ProfilerV4 ncclProfiler_v4 = {"simtrace",     simtrace::InitV4, simtrace::StartV4,
                                              simtrace::Stop, simtrace::Record, simtrace::Finalize};
SIMTRACE_EXPORTED
ncclwatch::abi::ProfilerV5 ncclProfiler_v5 = {"simtrace",     simtrace::InitV5, simtrace::StartV5,
                                              simtrace::Stop, simtrace::Record, simtrace::Finalize};
SIMTRACE_V6
ncclwatch::abi::ProfilerV6 ncclProfiler_v6 = {"simtrace",     simtrace::InitV6, simtrace::StartV6,
                                              simtrace::Stop, simtrace::Record, simtrace::Finalize};
SIMTRACE_V7
ncclwatch::abi::ProfilerV7 ncclProfiler_v7 = {"simtrace",     simtrace::InitV7, simtrace::StartV7,
                                              simtrace::Stop, simtrace::Record, simtrace::Finalize};
}
