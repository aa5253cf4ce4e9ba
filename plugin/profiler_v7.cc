// The adapter of profiler ABI v7 (abi_v7.h, NCCL 2.31): v6's, plus the user tag of every
// operation, symmetric kernels (their variant in `algo`, an empty `proto`) and KernelPhase events,
// which `init` asks for when NCCLWATCH_KERNEL_PHASE is on (they cost GPU time on 2.31.2).
#include "plugin/adapter.h"

namespace ncclwatch::plugin::v7 {
namespace {

struct V7 {
  using Descr = abi::EventDescrV7;
  static OpDescr Coll(const abi::CollDescrV7& c) {
    OpDescr op = adapter::CollOf(c);
    op.user_tag = c.user_tag;
    return op;
  }
  static OpDescr P2p(const abi::P2pDescrV7& p) {
    OpDescr op = adapter::P2pOf(p);
    op.user_tag = p.user_tag;
    return op;
  }
  static void* Other(Recorder* rec, CommState* comm, const Descr& d) {
    if (d.type == abi::kCeColl) {
      OpDescr op = adapter::CeCollOf(d.ce_coll);
      op.user_tag = d.ce_coll.user_tag;
      return rec->StartOp(comm, op);
    }
    if (d.type == abi::kKernelPhase) {
      return rec->StartKernelPhase(d.parent_obj, d.kernel_phase.phase_id, d.kernel_phase.p_timer);
    }
    return nullptr;
  }
};

}  // namespace

abi::Result Init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                 int nranks, int rank, abi::Logger logfn) noexcept {
  return adapter::Init(context, comm_id, mask, adapter::kEventMaskV6, comm_name, n_nodes, nranks,
                       rank, logfn, static_cast<int>(abi::kKernelPhase));
}

abi::Result StartEvent(void* context, void** handle, abi::EventDescrV7* descr) noexcept {
  return adapter::StartEvent<V7>(context, handle, descr);
}

}  // namespace ncclwatch::plugin::v7
