// Off the hot path: drains the completion rings, compacts them per flush interval into one
// RankReport per communicator (format: docs/wire-format.md) and hands the reports to a ReportSink.
//
// Compaction per (op, algo_proto, Inspector size bucket, peer): count, bytes, execution time
// sum/min/max and a log2 histogram, log-sums of bus and algorithm bandwidth (geometric means).
// Sampling: a collective is sent as a sample (RankReport.sample_columns) when seq % stride == 0; the stride starts at
// NCCLWATCH_SAMPLE_STRIDE and doubles while the interval holds more than NCCLWATCH_MAX_SAMPLES.
// Because strides are powers of two, the records of two ranks that chose different strides still
// share every seq that is a multiple of the larger one, so the aggregator can always join them.
#ifndef NCCLWATCH_PLUGIN_FLUSHER_H_
#define NCCLWATCH_PLUGIN_FLUSHER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <condition_variable>
#include <mutex>

#include "ncclwatch/v1/report.pb.h"
#include "plugin/offline_dump.h"
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

// Accumulates one communicator's completions over one interval. Flusher thread only.
class CommAccumulator {
 public:
  CommAccumulator(int64_t sample_stride, int64_t max_samples)
      : base_stride_(sample_stride), max_samples_(max_samples), stride_(sample_stride) {}

  void Add(const Completion& c, int nranks);
  // Moves the interval's content into `report` and starts a new interval.
  void TakeInto(ncclwatch::v1::RankReport* report);
  uint64_t samples_capped() const { return samples_capped_; }

 private:
  // NCCL passes static strings (ABI notes §3.1): the pointers identify them, so the per-operation
  // work needs no string copies. Labels are built once per interval in TakeInto.
  struct Key {
    const char* op;
    const char* algo;
    const char* proto;
    uint64_t size_floor;
    int32_t peer;
    bool p2p;
    bool operator<(const Key& o) const {
      return std::tie(op, algo, proto, size_floor, peer, p2p) <
             std::tie(o.op, o.algo, o.proto, o.size_floor, o.peer, o.p2p);
    }
  };
  struct Stats {
    uint64_t count = 0;
    uint64_t bytes = 0;
    double sum_us = 0;
    double min_us = 0;
    double max_us = 0;
    uint64_t hist[32] = {};
    double bus_log_sum = 0;
    double alg_log_sum = 0;
    uint64_t bw_samples = 0;
    uint64_t untimed_count = 0;
    uint64_t untimed_bytes = 0;
  };
  struct Sample {
    const char* op;
    const char* algo;
    const char* proto;
    uint64_t seq;
    uint64_t gpu_start_ns;
    uint64_t duration_ns;
    uint64_t bytes;
    uint32_t channels;
  };
  void RaiseStride();

  const int64_t base_stride_;
  const int64_t max_samples_;
  int64_t stride_;
  std::map<Key, Stats> stats_;
  std::vector<Sample> samples_;
  uint64_t samples_capped_ = 0;
  bool have_clock_ = false;
  int64_t best_clock_gap_ = 0;
  ncclwatch::v1::ClockSync clock_;
};

class Flusher {
 public:
  // `dump` (optional, not owned) also receives every operation and report (NCCLWATCH_DUMP_DIR).
  Flusher(const PluginConfig& config, Recorder& recorder, ProcessIdentity identity,
          ReportSink& sink, OfflineDump* dump = nullptr);
  ~Flusher();  // stops the thread, frees finalized communicators

  // Starts the background thread: drains every 50 ms, reports every flush interval.
  void Start();
  void Stop();

  // One drain of every ring (and, when `report` is true, one report per communicator).
  // Thread-safe; the background thread calls it, tests may call it directly.
  void RunOnce(bool report);
  // Sends the communicator's last report, unregisters it and frees it once no in-flight
  // operation refers to it. Called from NCCL's finalize.
  void FinalizeComm(CommState* comm);
  // FinalizeComm for every communicator still registered (process exit).
  void FinalizeAll();

 private:
  void Loop();
  void DrainLocked(CommState* comm);  // requires mu_
  ncclwatch::v1::RankReport BuildLocked(CommState* comm, const std::vector<InFlightView>& in_flight,
                                        int64_t now_unix_ns, bool final)
     ;  // requires mu_
  void ReapZombiesLocked();  // requires mu_

  const PluginConfig config_;
  Recorder& recorder_;
  const ProcessIdentity identity_;
  ReportSink& sink_;
  OfflineDump* const dump_;

  // std::mutex: visible to ThreadSanitizer (see recorder.h).
  std::mutex mu_;  // guards the four members below
  std::map<CommState*, std::unique_ptr<CommAccumulator>> accumulators_;
  std::map<CommState*, int64_t> interval_start_;
  std::vector<CommState*> zombies_;  // finalized, still referenced
  std::map<CommState*, uint64_t> p2p_sn_;  // offline mode: p2p operations numbered per comm
  uint64_t next_report_counter_ = 0;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread thread_;
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_FLUSHER_H_
