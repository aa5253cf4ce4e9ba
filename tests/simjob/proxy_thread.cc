// The proxy thread of a simjob rank: KernelCh (and v7 KernelPhase) events per channel, at the
// model's real times. The contract (event order, hung collectives, thread safety) is in
// proxy_thread.h.
#include "tests/simjob/proxy_thread.h"

#include <cstring>
#include <utility>

#include "plugin/abi.h"
#include "plugin/abi_v7.h"
#include "tests/simjob/job_common.h"

namespace ncclwatch::simjob {

void ProxyThread::Push(KernelWork work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void ProxyThread::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProxyThread::Run() {
  for (;;) {
    KernelWork work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty() || done_; });
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    std::vector<void*> handles;
    if (work.start_ns != kNever) {
      SleepUntil(work.start_ns);
      NoteLag(work.start_ns);
      handles = StartChannels(work);
    }
    if (work.start_ns == kNever || work.stop_ns == kNever) {
      // The kernel never completes (or never starts, behind one that never completes): its
      // channels stay as they are until the job ends.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return done_; });
      continue;
    }
    SleepUntil(work.stop_ns);
    NoteLag(work.stop_ns);
    StopChannels(work, handles);
  }
}

void ProxyThread::NoteLag(int64_t due_ns) {
  const int64_t lag = NowNs() - due_ns;
  if (lag > max_lag_ns_.load(std::memory_order_relaxed)) {
    max_lag_ns_.store(lag, std::memory_order_relaxed);  // this thread is the only writer
  }
}

std::vector<void*> ProxyThread::StartChannels(const KernelWork& work) {
  std::vector<void*> handles;
  for (void* parent : work.parents) {
    for (size_t c = 0; c < work.start_timers.size(); ++c) {
      abi::EventDescrV7 d;
      std::memset(&d, 0, sizeof(d));
      d.type = abi::kKernelCh;
      d.parent_obj = parent;
      d.rank = 0;  // NCCL leaves rank 0 for KernelCh
      d.kernel_ch.channel_id = static_cast<uint8_t>(c);
      d.kernel_ch.p_timer = work.start_timers[c];
      handles.push_back(host_->Start(work.context, d));
      started_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return handles;
}

void ProxyThread::StopChannels(const KernelWork& work, const std::vector<void*>& handles) {
  const size_t channels = work.stop_timers.size();
  const size_t delivered =
      work.lose_last_stop && !handles.empty() ? handles.size() - 1 : handles.size();
  for (size_t i = 0; i < delivered; ++i) {
    const size_t c = i % channels;
    if (!work.sync_end_timers.empty()) {
      EmitPhases(work.context, handles[i], static_cast<int>(c),
                 {work.start_timers[c], work.sync_end_timers[c], work.final_sync_timers[c],
                  work.stop_timers[c]});
    }
    abi::StateArgs args;
    args.kernel_ch.p_timer = work.stop_timers[c];
    // KernelChStop and stop come back to back, as in NCCL.
    host_->Record(handles[i], abi::kKernelChStop, &args);
    host_->Stop(handles[i]);
    stopped_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ProxyThread::EmitPhases(void* context, void* kernel_ch, int channel,
                             const std::array<uint64_t, 4>& bounds) {
  static constexpr const char* kNames[] = {"initial_sync", "compute", "final_sync"};
  for (int p = 0; p < 3; ++p) {
    if (bounds[p] == bounds[p + 1]) continue;
    abi::EventDescrV7 d;
    std::memset(&d, 0, sizeof(d));
    d.type = abi::kKernelPhase;
    d.parent_obj = kernel_ch;
    d.rank = 0;
    d.kernel_phase = {static_cast<uint8_t>(channel), static_cast<uint8_t>(p), kNames[p], bounds[p]};
    void* handle = host_->Start(context, d);
    phases_.fetch_add(1, std::memory_order_relaxed);
    abi::StateArgs args;
    args.kernel_ch.p_timer = bounds[p + 1];  // the phase's end travels in the KernelCh slot
    host_->Record(handle, abi::kKernelPhaseStop, &args);
    host_->Stop(handle);
  }
}

}  // namespace ncclwatch::simjob
