// What the user thread of a simjob rank does in every layout (rank_driver.cc for world and 3d,
// megatron_driver.cc for megatron): keep the rank's communicators and their NCCL events, sleep
// until the next operation is due (or die at --kill-rank's time), launch an operation's tasks and
// hand its kernel work to the proxy thread, finalize, and count what happened in the RankReport.
// A layout's driver derives from it and says which operations come when.
#ifndef NCCLWATCH_TESTS_SIMJOB_DRIVER_BASE_H_
#define NCCLWATCH_TESTS_SIMJOB_DRIVER_BASE_H_

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "plugin/abi.h"
#include "tests/simjob/job_common.h"
#include "tests/simjob/nccl_events.h"
#include "tests/simjob/proxy_thread.h"
#include "tests/simjob/rank_driver.h"
#include "tests/simjob/rank_process.h"

namespace ncclwatch::simjob {

class DriverBase {
 public:
  void FinalizeCommunicators() {
    for (NcclComm& comm : comms_) events_.Finalize(&comm);
    report_.events = host_->events_started();
    report_.null_handles = host_->null_handles();
  }

  const RankReport& report() const { return report_; }

 protected:
  // `kill_at_ns`: when --kill-rank kills this rank (kNever: it lives).
  DriverBase(const Options& options, int rank, ProfilerHost* host, int64_t kill_at_ns)
      : options_(options),
        rank_(rank),
        host_(host),
        events_(host, rank, options.channels),
        kill_at_ns_(kill_at_ns) {}

  // Adds `comm` (its name, hash, rank, size and nodes set) and initializes it as NCCL would;
  // returns its index in comms_.
  int AddComm(NcclComm comm) {
    const int index = static_cast<int>(comms_.size());
    comms_.push_back(std::move(comm));
    events_.Init(&comms_.back(), index);
    return index;
  }

  // Sleeps until `deadline_ns`, unless this rank is to be killed before then.
  void SleepUntilOrDie(int64_t deadline_ns) {
    if (kill_at_ns_ <= deadline_ns) {
      SleepUntil(kill_at_ns_);
      RankLog(abi::kLogInfo, 0, __FILE__, __LINE__, "killed (--kill-rank): _exit(0)");
      _exit(0);  // abrupt: no finalize, no dlclose, no atexit handlers
    }
    SleepUntil(deadline_ns);
  }

  // The job is hung for this rank: it idles until the job's end, then tears down; a rank to be
  // killed dies at its kill time, even if that is after the end.
  void IdleUntilTheEnd(int64_t end_ns) {
    SleepUntilOrDie(kill_at_ns_ == kNever ? end_ns : std::max(end_ns, kill_at_ns_));
  }

  // Launches `tasks` on `comm`; when NCCL asked for kernel channels, hands their work to `proxy`:
  // the kernel runs from `start_ns` to `stop_ns` (real time; kNever: never), the last party
  // arrived at `all_arrived_ns`, `gpu_timer(virtual_ns, channel)` is the rank's GPU clock.
  template <typename GpuTimer>
  // `lost`: none of the launch's profiler events arrive (NCCL still counts its seqNumbers);
  // `lose_last_stop`: its last channel's stop never arrives (KernelWork::lose_last_stop).
  void Launch(NcclComm& comm, const std::vector<NcclTask>& tasks, int64_t start_ns, int64_t stop_ns,
              int64_t all_arrived_ns, const GpuTimer& gpu_timer, ProxyThread* proxy,
              bool lost = false, bool lose_last_stop = false) {
    const NcclLaunch launch = events_.Launch(&comm, tasks, lost);
    if (!launch.kernel_ch) return;
    KernelWork work;
    work.context = launch.context;
    work.parents = launch.parents;
    work.start_ns = start_ns;
    work.stop_ns = stop_ns;
    SetChannelTimers(options_.channels, launch.kernel_phase, all_arrived_ns, gpu_timer, &work);
    work.lose_last_stop = lose_last_stop;
    proxy->Push(std::move(work));
  }

  // The proxy thread is done: its kernel-channel and phase counts and its lag go to the report.
  void Finish(ProxyThread& proxy) {
    proxy.Finish();
    report_.kernel_ch_started = proxy.channels_started();
    report_.kernel_ch_stopped = proxy.channels_stopped();
    report_.kernel_phases = proxy.phases_started();
    report_.proxy_lag_ns = proxy.max_lag_ns();
  }

  const Options& options_;
  const int rank_;
  ProfilerHost* const host_;
  NcclEvents events_;
  std::deque<NcclComm> comms_;  // in creation order; a deque keeps references stable
  const int64_t kill_at_ns_;
  RankReport report_;
};

}  // namespace ncclwatch::simjob

#endif  // NCCLWATCH_TESTS_SIMJOB_DRIVER_BASE_H_
