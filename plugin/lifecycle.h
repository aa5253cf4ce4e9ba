// The plugin's process-wide lifecycle, behind the per-version adapters of exports.cc. Loading the
// library costs nothing: the first communicator init starts the plugin (configuration from the
// NCCLWATCH_* environment, job id, GPU UUIDs, the Recorder, the report sinks and the flusher
// thread), and only then publishes the Recorder that the event callbacks feed.
//
//   InitCommunicator      once per communicator, possibly concurrently (serialized inside)
//   FinalizeCommunicator  once per communicator; the last one drains the reports to the agent
//   ShutdownPlugin        at process exit (an atexit handler registered at start calls it)
//
// Fork: a pthread_atfork child handler, registered when the library loads, marks a forked child
// before any lock can be taken in it. In the child every entry point returns at once, the
// callbacks see no Recorder, and the exit path does nothing: a child never touches the parent's
// threads, agent stream or communicators, and never waits.
//
// Exit: the shutdown runs from an atexit handler registered at start, after the transport's
// libraries were loaded and constructed, so it runs before their static destructors. It sends
// every live communicator's final report and frees nothing NCCL may still hand in: threads that
// keep launching while the process exits find their contexts intact.
//
// None of these is on the event callback path; they take a lock, allocate and may log through
// NCCL's logger. They may throw (std::bad_alloc, std::system_error): the noexcept adapters in
// exports.cc catch everything. ActiveRecorder() is the only call meant for the callback path.
#ifndef NCCLWATCH_PLUGIN_LIFECYCLE_H_
#define NCCLWATCH_PLUGIN_LIFECYCLE_H_

#include <atomic>
#include <cstdint>

#include "plugin/abi.h"
#include "plugin/isolation/engine_api.h"
#include "plugin/recorder.h"

namespace ncclwatch::plugin {

namespace internal {
// Set once, by the init that starts the plugin, after the flusher runs; never reset and never
// freed (NCCL threads may still call in at exit). Read it through ActiveRecorder().
extern std::atomic<Recorder*> g_recorder;
}  // namespace internal

// The Recorder the event callbacks feed, or null while no communicator has started the plugin
// (or the plugin is disabled). One acquire load: safe on the callback path.
inline Recorder* ActiveRecorder() { return internal::g_recorder.load(std::memory_order_acquire); }

// Starts the plugin on the first call (whatever the outcome, it starts only once), then gives
// the communicator its profiler context: *context is a CommState, or null when the plugin is
// disabled or failed to start (the communicator then simply has no events). Sets *mask (when not
// null) to `wanted_mask` for a context, leaves it alone otherwise. `logfn` (may be null) receives
// the start-up message. Always returns kSuccess.
// `kernel_phase_bit` (ABI v7: the KernelPhase bit, else 0) is added to the mask when
// NCCLWATCH_KERNEL_PHASE=1.
abi::Result InitCommunicator(void** context, uint64_t comm_hash, int* mask, int wanted_mask,
                             const char* comm_name, int n_nodes, int nranks, int rank,
                             abi::Logger logfn, int kernel_phase_bit = 0);

// Sends the communicator's final report and releases its context (null: nothing to do). After the
// last live communicator, waits up to NCCLWATCH_FINALIZE_TIMEOUT_MS for the reports to reach the
// agent: NCCL may unload the library next. A no-op after ShutdownPlugin. Always returns kSuccess.
abi::Result FinalizeCommunicator(void* context);

// Process exit: stops the flusher, sends a final report for every communicator still alive (so
// the aggregator knows these ranks ended rather than went silent) and hands the queued reports
// to the agent for at most NCCLWATCH_FINALIZE_TIMEOUT_MS. Does nothing before the plugin started,
// after it already ran, or in a forked child, which inherits the state but not the threads.
void ShutdownPlugin();

// Whether this process is a fork() child of the one that loaded the plugin (set by the child
// handler, before any of our locks can be taken).
bool InForkedChild();

// The fork() child handler: two stores, nothing that could wait on a lock. Registered with this
// namespace's libc when the library loads, and forwarded by the loader from the host's libc (an
// isolated engine's own handlers never run).
void MarkForkedChild();

// Set by the loader before any init (null until then, and when the engine is loaded without it):
// the host's atexit (the exit-time shutdown must run from the host's exit(), before any namespace
// is torn down) and symbol lookup (cudaGetDevice lives in the host's namespace).
void SetHostServices(const ncclwatch_host_services* services);

// Isolated engine only, called by the loader's adopt_host: this namespace's libc sets up its
// per-thread locale tables (what isalpha and friends read) only on threads it created itself, so
// the entry points called on NCCL's threads (init, finalize, exit) set them up first. The event
// callbacks use no locale.
void EnableHostThreadSetup();

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_LIFECYCLE_H_
