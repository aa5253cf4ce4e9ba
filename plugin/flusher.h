// Off the hot path: drains the completion rings, measures each operation's own time across the
// process's communicators (own_time.h), compacts them per flush interval into one
// RankReport per communicator (format: docs/wire-format.md; compaction and sampling: compactor.h)
// and hands the reports to one ReportSink, whose optional hooks also see each drained operation,
// the end of each reporting round and each finalized communicator (report_sink.h).
#ifndef NCCLWATCH_PLUGIN_FLUSHER_H_
#define NCCLWATCH_PLUGIN_FLUSHER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/periodic_task.h"
#include "common/sync.h"
#include "ncclwatch/v1/report.pb.h"
#include "plugin/compactor.h"
#include "plugin/own_time.h"
#include "plugin/plugin_config.h"
#include "plugin/recorder.h"
#include "plugin/report_sink.h"

namespace ncclwatch::plugin {

// Identity shared by every report of this process.
struct ProcessIdentity {
  std::string job_id;
  std::string host;
  uint32_t pid = 0;
  uint64_t report_id_prefix = 0;  // random, in the high 32 bits
  int global_rank = -1;           // the training's own ranks (training_rank.h); -1: unknown
  int local_rank = -1;
};

class Flusher {
 public:
  // `recorder` and `sink` are not owned and must outlive the flusher. Every call into `sink` is
  // made under the flusher's lock; OnOperation only if sink.wants_operations(), asked here once.
  Flusher(const PluginConfig& config, Recorder& recorder, ProcessIdentity identity,
          ReportSink& sink);
  ~Flusher();  // stops the thread, frees finalized communicators

  // Starts the background thread: drains every 50 ms, reports every flush interval.
  void Start();
  void Stop();

  // One drain of every ring (and, when `report` is true, one report per communicator, then
  // sink.OnRoundEnd()). Thread-safe; the background thread calls it, tests may call it directly.
  void RunOnce(bool report);
  // Sends the communicator's last report (then sink.OnCommunicatorFinalized), unregisters it and
  // frees it once no in-flight operation refers to it. Called from NCCL's finalize.
  void FinalizeComm(CommState* comm);
  // Process exit: the last report of every communicator still registered, which is then
  // unregistered but never freed -- NCCL's threads may still hand its context in until the
  // process is gone.
  void FinalizeAll();

 private:
  // One run of the background task: a drain, and a report when the interval is up.
  void Tick();
  // Pops every completion of `comms`, computes own times and feeds the accumulators.
  void DrainLocked(const std::vector<CommState*>& comms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Created on first use.
  CommAccumulator& AccumulatorLocked(CommState* comm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `completed_enqueue_ns`: comm->last_completed_enqueue_ns() read before `in_flight` was listed.
  ncclwatch::v1::RankReport BuildLocked(CommState* comm, const std::vector<InFlightView>& in_flight,
                                        int64_t completed_enqueue_ns, int64_t now_unix_ns,
                                        bool final) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapZombiesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last report of `comm` and its unregistration.
  void FinalReportLocked(CommState* comm) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PluginConfig config_;
  Recorder& recorder_;
  const ProcessIdentity identity_;
  ReportSink& sink_;
  const bool deliver_operations_;  // sink_.wants_operations(), asked once

  ncclwatch::Mutex mu_;
  std::map<CommState*, std::unique_ptr<CommAccumulator>> accumulators_ ABSL_GUARDED_BY(mu_);
  std::map<int, OwnTimeTracker> own_time_ ABSL_GUARDED_BY(mu_);  // per CUDA device: one clock each
  struct Drained {
    CommState* comm;
    Completion completion;
    int64_t own_time_ns;
  };
  // Scratch of DrainLocked, kept to reuse their capacity: the drained completions in ring order,
  // and the indices of the timed ones in GPU start order.
  std::vector<Drained> drained_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> by_start_ ABSL_GUARDED_BY(mu_);
  std::map<CommState*, int64_t> interval_start_ ABSL_GUARDED_BY(mu_);
  std::vector<CommState*> zombies_ ABSL_GUARDED_BY(mu_);  // finalized, still referenced
  uint64_t next_report_counter_ ABSL_GUARDED_BY(mu_) = 0;

  int64_t next_report_ns_ = 0;  // the task's (Tick), set by Start
  PeriodicTask task_;           // last: stopped before anything above goes
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_FLUSHER_H_
