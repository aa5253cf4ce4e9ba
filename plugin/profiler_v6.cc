// The adapter of profiler ABI v6 (abi_v6.h): v5's, plus copy-engine collectives.
#include "plugin/adapter.h"

namespace ncclwatch::plugin::v6 {
namespace {

struct V6 {
  using Descr = abi::EventDescrV6;
  static OpDescr Coll(const abi::CollDescrV5& c) { return adapter::CollOf(c); }
  static OpDescr P2p(const abi::P2pDescrV5& p) { return adapter::P2pOf(p); }
  static void* Other(Recorder* rec, CommState* comm, const Descr& d) {
    return d.type == abi::kCeColl ? rec->StartOp(comm, adapter::CeCollOf(d.ce_coll)) : nullptr;
  }
};

}  // namespace

abi::Result Init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                 int nranks, int rank, abi::Logger logfn) noexcept {
  return adapter::Init(context, comm_id, mask, adapter::kEventMaskV6, comm_name, n_nodes, nranks,
                       rank, logfn);
}

abi::Result StartEvent(void* context, void** handle, abi::EventDescrV6* descr) noexcept {
  return adapter::StartEvent<V6>(context, handle, descr);
}

}  // namespace ncclwatch::plugin::v6
