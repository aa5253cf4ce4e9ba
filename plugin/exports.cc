// The exported NCCL profiler tables (ncclProfiler_v4 to _v7) and one thin adapter per ABI version
// onto the version-independent Recorder. The process-wide plugin object (lazy start at the first
// communicator init, shutdown at exit) lives in lifecycle.h.
//
// Every entry point is noexcept and returns success: a profiler must never fail or slow the job.
// Only init can fail in NCCL's eyes, and we never make it: on any problem the communicator simply
// gets no context and no events.
#include <cstdint>
#include <type_traits>

#include "plugin/abi.h"
#include "plugin/abi_v7.h"
#include "plugin/lifecycle.h"
#include "plugin/recorder.h"

namespace ncclwatch::plugin {
namespace {

constexpr int kEventMask = abi::kColl | abi::kP2p | abi::kKernelCh;
// v6 adds copy-engine collectives (NCCL's v5 shim clears the bit for older tables anyway).
constexpr int kEventMaskV6 = kEventMask | abi::kCeColl;

OpDescr FromColl(const abi::CollDescrV5& c) {
  return OpDescr{false,  c.func,  c.seq_number, c.datatype,  c.count,
                 c.algo, c.proto, -1,           c.n_channels};
}
// Symmetric kernels (2.31) carry their variant in `algo` and an empty `proto`.
OpDescr FromColl(const abi::CollDescrV7& c) {
  OpDescr op{false, c.func, c.seq_number, c.datatype, c.count, c.algo, c.proto, -1, c.n_channels};
  op.user_tag = c.user_tag;
  return op;
}
OpDescr FromColl(const abi::CollDescrV4& c) {
  return OpDescr{false,  c.func,  c.seq_number, c.datatype,  c.count,
                 c.algo, c.proto, -1,           c.n_channels};
}
template <typename P2p>
OpDescr FromP2p(const P2p& p) {
  OpDescr op{true, p.func, 0, p.datatype, p.count, nullptr, nullptr, p.peer, p.n_channels};
  if constexpr (std::is_same_v<P2p, abi::P2pDescrV7>) op.user_tag = p.user_tag;
  return op;
}
// "CE" plus the synchronisation strategy ("MC" or "UC") stands where algorithm and protocol are.
template <typename CeColl>
OpDescr FromCeColl(const CeColl& c) {
  static const char kCe[] = "CE";
  OpDescr op{false, c.func, c.seq_number, c.datatype, c.count, kCe, c.sync_strategy, -1, 0};
  op.copy_engine = true;
  if constexpr (std::is_same_v<CeColl, abi::CeCollDescrV7>) op.user_tag = c.user_tag;
  return op;
}

// One adapter for every descriptor version: the fields we read have the same names.
template <typename Descr>
void StartEvent(void* context, void** handle, Descr* descr) {
  *handle = nullptr;
  Recorder* rec = ActiveRecorder();
  if (rec == nullptr || descr == nullptr) return;
  auto* comm = static_cast<CommState*>(context);
  switch (static_cast<uint64_t>(descr->type)) {
    case abi::kColl:
      *handle = rec->StartOp(comm, FromColl(descr->coll));
      break;
    case abi::kP2p:
      *handle = rec->StartOp(comm, FromP2p(descr->p2p));
      break;
    case abi::kKernelCh:
      *handle = rec->StartKernelChannel(descr->parent_obj, descr->kernel_ch.channel_id,
                                        descr->kernel_ch.p_timer);
      break;
    default:
      if constexpr (!std::is_same_v<Descr, abi::EventDescrV4> &&
                    !std::is_same_v<Descr, abi::EventDescrV5>) {
        if (descr->type == abi::kCeColl) *handle = rec->StartOp(comm, FromCeColl(descr->ce_coll));
      }
      if constexpr (std::is_same_v<Descr, abi::EventDescrV7>) {
        if (descr->type == abi::kKernelPhase) {
          *handle = rec->StartKernelPhase(descr->parent_obj, descr->kernel_phase.phase_id,
                                          descr->kernel_phase.p_timer);
        }
      }
      break;  // API, Group, proxy and CE child events: not needed, NULL handle
  }
}

abi::Result StopEvent(void* handle) noexcept {
  if (Recorder* rec = ActiveRecorder()) rec->StopEvent(handle);
  return abi::kSuccess;
}

abi::Result RecordEventState(void* handle, abi::EventState state, abi::StateArgs* args) noexcept {
  if (args == nullptr || handle == nullptr) return abi::kSuccess;
  if (state == abi::kKernelChStop) {
    if (Recorder* rec = ActiveRecorder())
      rec->RecordKernelChannelStop(handle, args->kernel_ch.p_timer);
  } else if (state == abi::kKernelPhaseStop) {
    if (Recorder* rec = ActiveRecorder())
      rec->RecordKernelPhaseStop(handle, args->kernel_ch.p_timer);
  }
  return abi::kSuccess;
}

abi::Result Finalize(void* context) noexcept {
  try {
    return FinalizeCommunicator(context);
  } catch (...) {
    return abi::kSuccess;
  }
}

abi::Result InitWithMask(void** context, uint64_t comm_id, int* mask, int wanted_mask,
                         const char* comm_name, int n_nodes, int nranks, int rank,
                         abi::Logger logfn, int kernel_phase_bit = 0) noexcept {
  try {
    return InitCommunicator(context, comm_id, mask, wanted_mask, comm_name, n_nodes, nranks, rank,
                            logfn, kernel_phase_bit);
  } catch (...) {
    *context = nullptr;
    return abi::kSuccess;
  }
}

abi::Result InitV7(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                   int nranks, int rank, abi::Logger logfn) noexcept {
  // KernelPhase is added when NCCLWATCH_KERNEL_PHASE asks for it (it costs GPU time on 2.31.2).
  return InitWithMask(context, comm_id, mask, kEventMaskV6, comm_name, n_nodes, nranks, rank, logfn,
                      static_cast<int>(abi::kKernelPhase));
}

abi::Result InitV6(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                   int nranks, int rank, abi::Logger logfn) noexcept {
  return InitWithMask(context, comm_id, mask, kEventMaskV6, comm_name, n_nodes, nranks, rank,
                      logfn);
}

abi::Result InitV5(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                   int nranks, int rank, abi::Logger logfn) noexcept {
  return InitWithMask(context, comm_id, mask, kEventMask, comm_name, n_nodes, nranks, rank, logfn);
}

abi::Result InitV4(void** context, int* mask, const char* comm_name, uint64_t comm_hash,
                   int n_nodes, int nranks, int rank, abi::Logger logfn) noexcept {
  return InitWithMask(context, comm_hash, mask, kEventMask, comm_name, n_nodes, nranks, rank,
                      logfn);
}

template <typename Descr>
abi::Result StartEventAdapter(void* context, void** handle, Descr* descr) noexcept {
  StartEvent(context, handle, descr);
  return abi::kSuccess;
}

}  // namespace
}  // namespace ncclwatch::plugin

namespace np = ncclwatch::plugin;

extern "C" {
__attribute__((visibility("default"))) ncclwatch::abi::ProfilerV7 ncclProfiler_v7 = {
    "ncclwatch",   np::InitV7,           np::StartEventAdapter<ncclwatch::abi::EventDescrV7>,
    np::StopEvent, np::RecordEventState, np::Finalize};
__attribute__((visibility("default"))) ncclwatch::abi::ProfilerV6 ncclProfiler_v6 = {
    "ncclwatch",   np::InitV6,           np::StartEventAdapter<ncclwatch::abi::EventDescrV6>,
    np::StopEvent, np::RecordEventState, np::Finalize};
__attribute__((visibility("default"))) ncclwatch::abi::ProfilerV5 ncclProfiler_v5 = {
    "ncclwatch",   np::InitV5,           np::StartEventAdapter<ncclwatch::abi::EventDescrV5>,
    np::StopEvent, np::RecordEventState, np::Finalize};
__attribute__((visibility("default"))) ncclwatch::abi::ProfilerV4 ncclProfiler_v4 = {
    "ncclwatch",   np::InitV4,           np::StartEventAdapter<ncclwatch::abi::EventDescrV4>,
    np::StopEvent, np::RecordEventState, np::Finalize};
}
