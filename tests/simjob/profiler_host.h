// The NCCL side of the profiler plugin ABI, as simjob needs it: load the plugin the way NCCL does
// (dlopen RTLD_NOW|RTLD_LOCAL, then dlsym of the data symbol ncclProfiler_vN) and call its function
// table through one version-independent interface.
//
// Descriptors are always built as EventDescrV7 (v7 is a superset of v6, v6 of v5) and narrowed to
// the layout of the loaded version: v6 and v5 lose the user tags and the symmetric-kernel fields,
// v4 also the parentGroup pointers and the one-byte type. Like NCCL 2.31's v6 shim, the host never
// hands a KernelPhase event (or its state) to a v4-v6 plugin and clears the KernelPhase bit from
// the activation mask after their init. Callers must not pass API-level events to a v4 plugin: v4
// has no such events and NCCL's v4 shim drops them.
//
// Thread safety: all methods may be called concurrently (the user and proxy threads both emit);
// the counters are atomic, the rest is immutable after Load().
#ifndef NCCLWATCH_TESTS_SIMJOB_PROFILER_HOST_H_
#define NCCLWATCH_TESTS_SIMJOB_PROFILER_HOST_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "plugin/abi.h"
#include "plugin/abi_v7.h"

namespace ncclwatch::simjob {

// Whether NCCL emits events of `type` under activation `mask`: an event is emitted when its own bit
// or the bit of one of its descendants is set (docs/nccl-profiler-abi.md §6.2; KernelPhase, v7, is
// a child of KernelCh, §10). The caller clears the KernelPhase bit for v4-v6.
bool EventEnabled(uint64_t type, int mask);

class ProfilerHost {
 public:
  // Loads `path` and resolves ncclProfiler_v<abi_version> (4, 5, 6 or 7). On failure returns null
  // and sets *error to a one-line reason.
  static std::unique_ptr<ProfilerHost> Load(const std::string& path, int abi_version,
                                            std::string* error);
  ~ProfilerHost();  // dlcloses the library

  ProfilerHost(const ProfilerHost&) = delete;
  ProfilerHost& operator=(const ProfilerHost&) = delete;

  int abi_version() const { return abi_version_; }
  // The plugin's self-reported name ("?" if it gave none).
  const char* name() const;

  // init, with the argument order of the loaded version. For v4-v6 the KernelPhase bit is cleared
  // from *mask afterwards, as NCCL 2.31's v6 shim does.
  abi::Result Init(void** context, uint64_t comm_hash, int* mask, const char* comm_name,
                   int n_nodes, int nranks, int rank, abi::Logger logfn);
  // startEvent; returns the handle the plugin chose (may be null). A KernelPhase event for a v4-v6
  // plugin is not passed on (null, not counted).
  void* Start(void* context, const abi::EventDescrV7& descr);
  // stopEvent / recordEventState; no-ops on a null handle, as NCCL never passes one, and Record of
  // KernelPhaseStop for a v4-v6 plugin.
  void Stop(void* handle);
  void Record(void* handle, abi::EventState state, abi::StateArgs* args);
  void Finalize(void* context);

  uint64_t events_started() const { return events_started_.load(std::memory_order_relaxed); }
  uint64_t null_handles() const { return null_handles_.load(std::memory_order_relaxed); }

 private:
  ProfilerHost(void* library, int abi_version, const void* table);

  void* library_;
  int abi_version_;
  const abi::ProfilerV4* v4_ = nullptr;
  const abi::ProfilerV5* v5_ = nullptr;
  const abi::ProfilerV6* v6_ = nullptr;
  const abi::ProfilerV7* v7_ = nullptr;
  std::atomic<uint64_t> events_started_{0};
  std::atomic<uint64_t> null_handles_{0};
};

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_PROFILER_HOST_H_
