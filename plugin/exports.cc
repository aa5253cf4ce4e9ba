// The exported NCCL profiler tables, one per ABI version we speak (ncclProfiler_v4 to _v7). Each
// version's adapter is profiler_vN.cc (its layout abi_vN.h); what they share, adapter.h. The
// process-wide plugin object (lazy start at the first communicator init, shutdown at exit) lives
// in lifecycle.h. A new version: docs/architecture.md, "Support a new profiler ABI version".
#include "plugin/adapter.h"

namespace np = ncclwatch::plugin;
namespace npa = ncclwatch::plugin::adapter;

extern "C" {
__attribute__((visibility("default"))) ncclwatch::abi::ProfilerV7 ncclProfiler_v7 = {
    "ncclwatch",    np::v7::Init,          np::v7::StartEvent,
    npa::StopEvent, npa::RecordEventState, npa::Finalize};
__attribute__((visibility("default"))) ncclwatch::abi::ProfilerV6 ncclProfiler_v6 = {
    "ncclwatch",    np::v6::Init,          np::v6::StartEvent,
    npa::StopEvent, npa::RecordEventState, npa::Finalize};
__attribute__((visibility("default"))) ncclwatch::abi::ProfilerV5 ncclProfiler_v5 = {
    "ncclwatch",    np::v5::Init,          np::v5::StartEvent,
    npa::StopEvent, npa::RecordEventState, npa::Finalize};
__attribute__((visibility("default"))) ncclwatch::abi::ProfilerV4 ncclProfiler_v4 = {
    "ncclwatch",    np::v4::Init,          np::v4::StartEvent,
    npa::StopEvent, npa::RecordEventState, npa::Finalize};
}
