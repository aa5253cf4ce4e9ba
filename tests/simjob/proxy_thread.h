// The proxy thread of one simjob rank process: it plays NCCL's proxy progress thread (2.31: its
// profiler thread), which emits the per-channel KernelCh events of every launched kernel
// (docs/nccl-profiler-abi.md §7, §10).
//
// For each queued KernelWork, in order: at start_ns, one KernelCh start per (task, channel), with
// the task's Coll/P2p handle as parent, rank 0 and the channel's start pTimer; at stop_ns, for each
// of those handles in the same order, KernelChStop (with the stop pTimer) and stop, back to back.
// With KernelPhase (v7, the work has phase timers) each handle's phases come just before its
// KernelChStop, as NCCL 2.31 reports them once the channel has completed: for initial sync,
// compute and final sync in turn, KernelPhase start (parent = the KernelCh handle, even a null
// one; pTimer = the phase's start), KernelPhaseStop (the phase's end) and stop. A phase of zero
// length is left out, as NCCL leaves it out (the last rank to arrive does not wait).
// Work whose stop_ns is kNever (a hung collective) keeps its channels open and blocks the queue
// until Finish(). Work whose start_ns is kNever (queued on a stream that is stuck) never starts:
// its channels get no events at all, and it blocks the queue the same way.
//
// Thread safety: Push and Finish are called by the rank's user thread; the counters and the lag may
// be read from any thread. The plugin is called from the proxy thread only.
#ifndef NCCLWATCH_TESTS_SIMJOB_PROXY_THREAD_H_
#define NCCLWATCH_TESTS_SIMJOB_PROXY_THREAD_H_

#include <array>
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
  // KernelPhase (v7, asked for by the mask at launch; empty otherwise or if the op never
  // completes): per channel, the GPU timers where the initial sync ends and the final sync begins.
  std::vector<uint64_t> sync_end_timers;
  std::vector<uint64_t> final_sync_timers;
  // The last channel's KernelChStop and stop never arrive (lost telemetry, --lose-rank): the
  // profiler never sees the operation complete, though the GPU finished it.
  bool lose_last_stop = false;
};

// Fills the per-channel timers of `work` (whose start_ns and stop_ns are set) for `channels`
// channels: none if it never starts, no stop or phase timers if it never completes, phase timers
// (timeline.h's PhaseBounds, from when the op's last party arrived) only with `kernel_phase`.
// `gpu_timer(virtual_ns, channel)` is the rank's GPU clock.
template <typename GpuTimer>
void SetChannelTimers(int channels, bool kernel_phase, int64_t all_arrived_ns,
                      const GpuTimer& gpu_timer, KernelWork* work) {
  if (work->start_ns == kNever) return;
  const KernelPhaseBounds phases = PhaseBounds(work->start_ns, all_arrived_ns, work->stop_ns);
  for (int c = 0; c < channels; ++c) {
    work->start_timers.push_back(gpu_timer(work->start_ns, c));
    if (work->stop_ns == kNever) continue;
    work->stop_timers.push_back(gpu_timer(work->stop_ns, c));
    if (!kernel_phase) continue;
    work->sync_end_timers.push_back(gpu_timer(phases.sync_end, c));
    work->final_sync_timers.push_back(gpu_timer(phases.final_sync, c));
  }
}

// Plays NCCL's proxy progress thread: emits KernelCh start, KernelChStop and stop, and the
// KernelPhase events. The thread starts in the constructor; `host` must outlive the object.
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
  uint64_t phases_started() const { return phases_.load(std::memory_order_relaxed); }
  // How far behind the model's times it ever delivered a kernel's start or stop. A proxy that
  // cannot keep up on a loaded machine shows operations in flight that its peers have finished,
  // which a real NCCL cannot do (its proxy progresses the operation itself), so a test that judges
  // hangs must not judge a run where this grew near the hang threshold.
  int64_t max_lag_ns() const { return max_lag_ns_.load(std::memory_order_relaxed); }

 private:
  void Run();
  void NoteLag(int64_t due_ns);  // called just after the events due at due_ns are delivered
  std::vector<void*> StartChannels(const KernelWork& work);
  void StopChannels(const KernelWork& work, const std::vector<void*>& handles);
  // The phases of one channel between bounds[0] (start), [1], [2] and [3] (stop).
  void EmitPhases(void* context, void* kernel_ch, int channel,
                  const std::array<uint64_t, 4>& bounds);

  ProfilerHost* const host_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KernelWork> queue_;  // guarded by mu_
  bool done_ = false;             // guarded by mu_
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> stopped_{0};
  std::atomic<uint64_t> phases_{0};
  std::atomic<int64_t> max_lag_ns_{0};
  std::thread thread_;  // last: starts after every other member is initialized
};

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_PROXY_THREAD_H_
