// The adapter of profiler ABI v5 (abi_v5.h): collectives, point-to-point operations and kernel
// channels; the API events above them are not asked for.
#include "plugin/adapter.h"

namespace ncclwatch::plugin::v5 {
namespace {

struct V5 {
  using Descr = abi::EventDescrV5;
  static OpDescr Coll(const abi::CollDescrV5& c) { return adapter::CollOf(c); }
  static OpDescr P2p(const abi::P2pDescrV5& p) { return adapter::P2pOf(p); }
  static void* Other(Recorder*, CommState*, const Descr&) { return nullptr; }
};

}  // namespace

abi::Result Init(void** context, uint64_t comm_id, int* mask, const char* comm_name, int n_nodes,
                 int nranks, int rank, abi::Logger logfn) noexcept {
  return adapter::Init(context, comm_id, mask, adapter::kEventMask, comm_name, n_nodes, nranks,
                       rank, logfn);
}

abi::Result StartEvent(void* context, void** handle, abi::EventDescrV5* descr) noexcept {
  return adapter::StartEvent<V5>(context, handle, descr);
}

}  // namespace ncclwatch::plugin::v5
