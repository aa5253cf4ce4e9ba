// NCCLWATCH_CHAIN_PLUGIN: a second NCCL profiler plugin behind ncclwatch (docs/plugin-chaining.md).
//
// The loader (isolation/loader.c) opens the second plugin in the host's namespace, finds its
// newest table (ncclProfiler_v7, _v6 or _v5) and hands it to SetChild before any communicator
// exists; NCCL is then given the tables below instead of exports.cc's. Each entry point calls
// ncclwatch's own (adapter.h) and the second plugin's:
//   - init: each gets a context and an activation mask of its own; NCCL's mask is their union.
//     The context NCCL keeps is a pair of both, from a fixed array (never freed: NCCL may hand a
//     context in after finalize).
//   - startEvent: an event goes to the second plugin when its version has the type and its mask
//     asks for it (its own bit or a descendant's, as NCCL decides what to emit). Parent handles
//     that are ncclwatch's are translated back to the second plugin's handle for the same event,
//     which ncclwatch's Recorder keeps beside its own record (Recorder::ChainedCell); when
//     ncclwatch keeps no record, the second plugin's handle is the one NCCL gets.
//   - stop and record go to whichever plugins hold the event; finalize to both.
// Proxy events with a context that is not one of these pairs (PXN: another process's) and PXN
// ProxyOps (their pid is not ours) go to neither.
//
// Everything on the event path is lock-free and allocation-free, as the Recorder's own path.
#ifndef NCCLWATCH_PLUGIN_CHAIN_H_
#define NCCLWATCH_PLUGIN_CHAIN_H_

#include "plugin/abi.h"
#include "plugin/abi_v4.h"
#include "plugin/abi_v5.h"
#include "plugin/abi_v6.h"
#include "plugin/abi_v7.h"

namespace ncclwatch::plugin::chain {

// Takes the second plugin's table of ABI `version` (5, 6 or 7; it must outlive the process) and
// its file name, for the start-up line. Returns false, chaining nothing, for another version or a
// null table. Call once, before any init.
bool SetChild(const void* table, int version, const char* name);
// The second plugin's version (0: none) and name.
int ChildVersion();
const char* ChildName();
// Why NCCLWATCH_CHAIN_PLUGIN chained nothing (copied; said at the plugin's start), or "".
void SetProblem(const char* why);
const char* Problem();

// The tables NCCL calls when a second plugin is chained, one per version it may speak with us.
extern const abi::ProfilerV4 kTableV4;
extern const abi::ProfilerV5 kTableV5;
extern const abi::ProfilerV6 kTableV6;
extern const abi::ProfilerV7 kTableV7;

}  // namespace ncclwatch::plugin::chain

#endif  // NCCLWATCH_PLUGIN_CHAIN_H_
