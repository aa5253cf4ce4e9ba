#include "common/periodic_task.h"

#include "absl/time/clock.h"

namespace ncclwatch {

void PeriodicTask::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void PeriodicTask::Stop() {
  {
    ncclwatch::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void PeriodicTask::Loop() {
  absl::Time next = absl::Now() + (run_first_ ? absl::ZeroDuration() : period_);
  for (;;) {
    {
      ncclwatch::MutexLock lock(&mu_);
      if (mu_.AwaitWithDeadline(absl::Condition(&stop_), next)) return;
    }
    next += period_;
    fn_();
    // After a run that overran, start counting again from now rather than catching up.
    const absl::Time now = absl::Now();
    if (next < now) next = now;
    ncclwatch::MutexLock lock(&mu_);
    ++iterations_;
  }
}

uint64_t PeriodicTask::iterations() const {
  ncclwatch::MutexLock lock(&mu_);
  return iterations_;
}

bool PeriodicTask::WaitForIterations(uint64_t n, absl::Duration timeout) const {
  ncclwatch::MutexLock lock(&mu_);
  auto done = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return iterations_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

}  // namespace ncclwatch
