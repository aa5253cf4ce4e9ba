// libnccl-profiler-noop.so: the cheapest second plugin there is, for measuring what chaining one
// behind ncclwatch (NCCLWATCH_CHAIN_PLUGIN) costs ncclwatch itself (plugin_bench, docs/
// plugin-chaining.md). Like NCCL Inspector it exports only ncclProfiler_v5 and asks for
// collectives, point-to-point operations and kernel channels; every event gets a handle (so that
// ncclwatch keeps one beside its own) and nothing else happens.
#include "plugin/abi.h"
#include "plugin/abi_v5.h"

namespace {

namespace abi = ncclwatch::abi;

char g_handle;
char g_context;

abi::Result Init(void** context, uint64_t, int* mask, const char*, int, int, int, abi::Logger) {
  *context = &g_context;
  *mask = abi::kColl | abi::kP2p | abi::kKernelCh;
  return abi::kSuccess;
}
abi::Result Start(void*, void** handle, abi::EventDescrV5*) {
  *handle = &g_handle;
  return abi::kSuccess;
}
abi::Result Stop(void*) { return abi::kSuccess; }
abi::Result Record(void*, abi::EventState, abi::StateArgs*) { return abi::kSuccess; }
abi::Result Finalize(void*) { return abi::kSuccess; }

}  // namespace

extern "C" {
__attribute__((visibility("default")))
ncclwatch::abi::ProfilerV5 ncclProfiler_v5 = {"noop", Init, Start, Stop, Record, Finalize};
}
