// The adapter of profiler ABI v4 (abi_v4.h): collectives, point-to-point operations and kernel
// channels; `init` takes the communicator's name before its hash.
#include "plugin/adapter.h"

namespace ncclwatch::plugin::v4 {
namespace {

struct V4 {
  using Descr = abi::EventDescrV4;
  static OpDescr Coll(const abi::CollDescrV4& c) { return adapter::CollOf(c); }
  static OpDescr P2p(const abi::P2pDescrV4& p) { return adapter::P2pOf(p); }
  static void* Other(Recorder*, CommState*, const Descr&) { return nullptr; }
};

}  // namespace

abi::Result Init(void** context, int* mask, const char* comm_name, uint64_t comm_hash, int n_nodes,
                 int nranks, int rank, abi::Logger logfn) noexcept {
  return adapter::Init(context, comm_hash, mask, adapter::kEventMask, comm_name, n_nodes, nranks,
                       rank, logfn);
}

abi::Result StartEvent(void* context, void** handle, abi::EventDescrV4* descr) noexcept {
  return adapter::StartEvent<V4>(context, handle, descr);
}

}  // namespace ncclwatch::plugin::v4
