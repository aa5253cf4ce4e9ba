// Off the hot path: drains the completion rings, measures each operation's own time across the
// process's communicators (own_time.h), compacts them per flush interval into one
// RankReport per communicator (format: docs/wire-format.md; compaction and sampling: compactor.h)
// and hands the reports to one ReportSink, whose optional hooks also see each drained operation,
// the end of each reporting round and each finalized communicator (report_sink.h).
#ifndef NCCLWATCH_PLUGIN_FLUSHER_H_
#define NCCLWATCH_PLUGIN_FLUSHER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
  void Loop();
  // Pops every completion of `comms`, computes own times and feeds the accumulators (requires mu_).
  void DrainLocked(const std::vector<CommState*>& comms);
  CommAccumulator& AccumulatorLocked(CommState* comm);  // created on first use; requires mu_
  ncclwatch::v1::RankReport BuildLocked(CommState* comm, const std::vector<InFlightView>& in_flight,
                                        int64_t now_unix_ns, bool final);  // requires mu_
  void ReapZombiesLocked();                                                // requires mu_
  // The last report of `comm` and its unregistration (requires mu_).
  void FinalReportLocked(CommState* comm);

  const PluginConfig config_;
  Recorder& recorder_;
  const ProcessIdentity identity_;
  ReportSink& sink_;
  const bool deliver_operations_;  // sink_.wants_operations(), asked once

  // std::mutex: visible to ThreadSanitizer (see recorder.h).
  std::mutex mu_;  // guards the members below up to stop_mu_
  std::map<CommState*, std::unique_ptr<CommAccumulator>> accumulators_;
  std::map<int, OwnTimeTracker> own_time_;  // per CUDA device: one GPU clock each
  struct Drained {
    CommState* comm;
    Completion completion;
    int64_t own_time_ns;
  };
  // Scratch of DrainLocked, kept to reuse their capacity: the drained completions in ring order,
  // and the indices of the timed ones in GPU start order.
  std::vector<Drained> drained_;
  std::vector<size_t> by_start_;
  std::map<CommState*, int64_t> interval_start_;
  std::vector<CommState*> zombies_;  // finalized, still referenced
  uint64_t next_report_counter_ = 0;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread thread_;
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_FLUSHER_H_
