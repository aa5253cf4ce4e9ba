// A background loop that runs one function every period until stopped: the aggregator's detection
// tick, retention and remote-write loops. Tests can wait for iterations instead of sleeping.
#ifndef NCCLWATCH_COMMON_PERIODIC_TASK_H_
#define NCCLWATCH_COMMON_PERIODIC_TASK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "common/sync.h"

namespace ncclwatch {

class PeriodicTask {
 public:
  // `fn` runs on the task's own thread, first one `period` after Start (at Start itself when
  // `run_first`), then every `period` after the previous run began (a run that takes longer than
  // the period delays the next, never overlaps it).
  PeriodicTask(absl::Duration period, std::function<void()> fn, bool run_first = false)
      : period_(period), fn_(std::move(fn)), run_first_(run_first) {}
  ~PeriodicTask() { Stop(); }
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

  // Starts the thread (once: a second Start does nothing).
  void Start();
  // Wakes the thread, waits for a run in progress to finish and joins; `fn` never runs after
  // Stop returns. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Runs completed so far.
  uint64_t iterations() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until at least `n` runs have completed or `timeout` passes; true if they have.
  bool WaitForIterations(uint64_t n, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration period_;
  const std::function<void()> fn_;
  const bool run_first_;
  mutable ncclwatch::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t iterations_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_PERIODIC_TASK_H_
