// What every profiler ABI version's adapter shares, and each version's two entry points of its
// own. A version's adapter (profiler_vN.cc, beside its abi_vN.h) says how its descriptors map to
// the version-independent OpDescr and which event types beyond collectives, point-to-point
// operations and kernel channels it handles; exports.cc lists the tables.
//
// Every entry point is noexcept and returns success: a profiler must never fail or slow the job.
// Only init can fail in NCCL's eyes, and we never make it: on any problem the communicator simply
// gets no context and no events.
#ifndef NCCLWATCH_PLUGIN_ADAPTER_H_
#define NCCLWATCH_PLUGIN_ADAPTER_H_

#include <cstdint>

#include "plugin/abi.h"
#include "plugin/lifecycle.h"
#include "plugin/recorder.h"

namespace ncclwatch::plugin {
namespace adapter {

// What the plugin asks NCCL for: collectives, point-to-point operations and kernel channels, and
// from v6 on copy-engine collectives (NCCL's v5 shim clears the bit for older tables anyway).
inline constexpr int kEventMask = abi::kColl | abi::kP2p | abi::kKernelCh;
inline constexpr int kEventMaskV6 = kEventMask | abi::kCeColl;

// `init` of every version: `wanted_mask` the event types asked for, `kernel_phase_bit` the bit
// that asks for KernelPhase events where the version has them and NCCLWATCH_KERNEL_PHASE is on.
abi::Result Init(void** context, uint64_t comm_id, int* mask, int wanted_mask,
                 const char* comm_name, int n_nodes, int nranks, int rank, abi::Logger logfn,
                 int kernel_phase_bit = 0) noexcept;
abi::Result StopEvent(void* handle) noexcept;
abi::Result RecordEventState(void* handle, abi::EventState state, abi::StateArgs* args) noexcept;
// What RecordEventState does with a state, for a handle of ours already decoded.
void RecordDecoded(Recorder& rec, const OpPool::Decoded& d, abi::EventState state,
                   abi::StateArgs* args) noexcept;
abi::Result Finalize(void* context) noexcept;

// `startEvent` of a version described by `V`:
//   using Descr = abi::EventDescrVN;
//   static OpDescr Coll(const <its collective descriptor>&);
//   static OpDescr P2p(const <its point-to-point descriptor>&);
//   static void* Other(Recorder*, CommState*, const Descr&);  // any other type: a handle or null
template <typename V>
abi::Result StartEvent(void* context, void** handle, typename V::Descr* descr) noexcept {
  *handle = nullptr;
  Recorder* rec = ActiveRecorder();
  if (rec == nullptr || descr == nullptr) return abi::kSuccess;
  auto* comm = static_cast<CommState*>(context);
  switch (static_cast<uint64_t>(descr->type)) {
    case abi::kColl:
      *handle = rec->StartOp(comm, V::Coll(descr->coll));
      break;
    case abi::kP2p:
      *handle = rec->StartOp(comm, V::P2p(descr->p2p));
      break;
    case abi::kKernelCh:
      *handle = rec->StartKernelChannel(descr->parent_obj, descr->kernel_ch.channel_id,
                                        descr->kernel_ch.p_timer);
      break;
    default:
      *handle = V::Other(rec, comm, *descr);  // API, Group, proxy and CE child events: null
      break;
  }
  return abi::kSuccess;
}

// A collective, point-to-point or copy-engine task descriptor of any version as an OpDescr: the
// fields read have the same names in every version (v7 adds the user tag, which its adapter sets).
template <typename Coll>
OpDescr CollOf(const Coll& c) {
  return OpDescr{false,  c.func,  c.seq_number, c.datatype,  c.count,
                 c.algo, c.proto, -1,           c.n_channels};
}
template <typename P2p>
OpDescr P2pOf(const P2p& p) {
  return OpDescr{true, p.func, 0, p.datatype, p.count, nullptr, nullptr, p.peer, p.n_channels};
}
// "CE" plus the synchronisation strategy ("MC" or "UC") stands where algorithm and protocol are.
inline constexpr char kCopyEngineAlgo[] = "CE";
template <typename CeColl>
OpDescr CeCollOf(const CeColl& c) {
  OpDescr op{false,           c.func,          c.seq_number, c.datatype, c.count,
             kCopyEngineAlgo, c.sync_strategy, -1,           0};
  op.copy_engine = true;
  return op;
}

}  // namespace adapter

// Each version's own entry points (profiler_vN.cc); the rest of its table is adapter's.
namespace v4 {
abi::Result Init(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int n_nodes,
                 int nranks, int rank, abi::Logger logfn) noexcept;
abi::Result StartEvent(void* context, void** handle, abi::EventDescrV4* descr) noexcept;
}  // namespace v4
namespace v5 {
abi::Result Init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                 int nranks, int rank, abi::Logger logfn) noexcept;
abi::Result StartEvent(void* context, void** handle, abi::EventDescrV5* descr) noexcept;
}  // namespace v5
namespace v6 {
abi::Result Init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                 int nranks, int rank, abi::Logger logfn) noexcept;
abi::Result StartEvent(void* context, void** handle, abi::EventDescrV6* descr) noexcept;
}  // namespace v6
namespace v7 {
abi::Result Init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                 int nranks, int rank, abi::Logger logfn) noexcept;
abi::Result StartEvent(void* context, void** handle, abi::EventDescrV7* descr) noexcept;
}  // namespace v7

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_ADAPTER_H_
