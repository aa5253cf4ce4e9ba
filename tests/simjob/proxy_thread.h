// The proxy thread of one simjob rank process: it plays NCCL's proxy progress thread, which emits
// the per-channel KernelCh events of every launched kernel (docs/nccl-profiler-abi.md §7).
//
// For each queued KernelWork, in order: at start_ns, one KernelCh start per (task, channel), with
// the task's Coll/P2p handle as parent, rank 0 and the channel's start pTimer; at stop_ns, for each
// of those handles in the same order, KernelChStop (with the stop pTimer) and stop, back to back.
// Work whose stop_ns is kNever (a hung collective) keeps its channels open and blocks the queue
// until Finish(). Work whose start_ns is kNever (queued on a stream that is stuck) never starts:
// its channels get no events at all, and it blocks the queue the same way.
//
// Thread safety: Push and Finish are called by the rank's user thread; the counters may be read
// from any thread. The plugin is called from the proxy thread only.
#ifndef NCCLWATCH_TESTS_SIMJOB_PROXY_THREAD_H_
#define NCCLWATCH_TESTS_SIMJOB_PROXY_THREAD_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/simjob/profiler_host.h"
#include "tests/simjob/timeline.h"

namespace ncclwatch::simjob {

// The kernel of one group launch: every task of it runs on every channel from the rank's arrival to
// the op's completion.
struct KernelWork {
  void* context = nullptr;
  std::vector<void*> parents;          // Coll/P2p handles, one per task (may be null)
  int64_t start_ns = 0;                // real time the kernel starts: the rank's arrival;
                                       // kNever if it never starts
  int64_t stop_ns = kNever;            // real time the op completes, kNever if it never does
  std::vector<uint64_t> start_timers;  // per channel GPU timer at start
  std::vector<uint64_t> stop_timers;   // per channel GPU timer at stop (empty if never)
};

// Plays NCCL's proxy progress thread: emits KernelCh start, KernelChStop and stop. The thread
// starts in the constructor; `host` must outlive the object.
class ProxyThread {
 public:
  explicit ProxyThread(ProfilerHost* host) : host_(host), thread_([this] { Run(); }) {}
  ~ProxyThread() { Finish(); }

  // Queues the channels of one kernel; they start and stop at the work's real times.
  void Push(KernelWork work);

  // No more work will come: completes every queued op that completes, abandons the one that never
  // does (a hung collective), and joins the thread.
  void Finish();

  uint64_t channels_started() const { return started_.load(std::memory_order_relaxed); }
  uint64_t channels_stopped() const { return stopped_.load(std::memory_order_relaxed); }

 private:
  void Run();
  std::vector<void*> StartChannels(const KernelWork& work);
  void StopChannels(const KernelWork& work, const std::vector<void*>& handles);

  ProfilerHost* const host_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KernelWork> queue_;  // guarded by mu_
  bool done_ = false;             // guarded by mu_
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> stopped_{0};
  std::thread thread_;  // last: starts after every other member is initialized
};

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_PROXY_THREAD_H_
