// Offline mode (NCCLWATCH_DUMP_DIR): NCCL Inspector-compatible files, a drop-in for people who
// read Inspector's output today (formats: docs/nccl-profiler-abi.md §11.1, §11.2).
//
//   <dir>/<host>-pid<pid>.log                        JSON Lines, one line per completed operation,
//                                                    Inspector's "v4.0" schema
//   <dir>/nccl_inspector_metrics_<gpu>-pid<pid>.prom  Prometheus textfile-collector metrics of the
//                                                    last interval of every live communicator,
//                                                    replaced atomically (write + rename)
//
// Inspector's names, labels (version, slurm_job_id, node, gpu, comm_name, n_nodes, nranks,
// collective | p2p_operation, message_size[, algo_proto]), message-size buckets and geometric-mean
// bus bandwidth.
//
// A ReportSink beside the agent client (the lifecycle joins both in a CompositeSink), fed by the
// flusher under its lock (report_sink.h); nothing here runs in an event callback. What it writes:
//   - one JSON line per completed operation with an execution time (Inspector's records all carry
//     one; untimed copy-engine collectives are left out), p2p operations numbered per communicator
//     from 1 (Inspector's p2p_sn);
//   - the metrics of every periodic report, as its communicator's latest interval (final reports
//     are not exported: the communicator is going away);
//   - at the end of every reporting round, and after a communicator is finalized (which removes it
//     from the metrics, as Inspector exports live communicators only): the .prom file rewritten
//     and the JSON Lines file flushed.
// It queues nothing, so Drain() has nothing to wait for, and it never drops a report.
#ifndef NCCLWATCH_PLUGIN_OFFLINE_DUMP_H_
#define NCCLWATCH_PLUGIN_OFFLINE_DUMP_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ncclwatch/v1/report.pb.h"
#include "plugin/hot_path.h"
#include "plugin/recorder.h"
#include "plugin/report_sink.h"

namespace ncclwatch::plugin {

class OfflineDump : public ReportSink {
 public:
  struct Identity {
    std::string host;
    uint32_t pid = 0;
    std::string slurm_job_id;  // "unknown" when unset
    int cuda_device = -1;
  };

  // Creates `dir` if needed and opens the JSON Lines file. Null (with *error set) on failure.
  static std::unique_ptr<OfflineDump> Open(const std::string& dir, Identity identity,
                                           std::string* error);
  ~OfflineDump() override;

  // ReportSink: see the top of this file.
  void Submit(ncclwatch::v1::RankReport report) override;
  bool Drain(std::chrono::milliseconds timeout) override { return true; }
  uint64_t dropped() const override { return 0; }
  bool wants_operations() const override { return true; }
  void OnOperation(const CommState& comm, const Completion& c, int64_t drained_unix_ns) override;
  void OnCommunicatorFinalized(const CommState& comm) override;
  void OnRoundEnd() override { Flush(); }

  const std::string& log_path() const { return log_path_; }
  const std::string& prom_path() const { return prom_path_; }

 private:
  OfflineDump(Identity identity, std::string log_path, std::string prom_path, FILE* log)
      : identity_(std::move(identity)),
        log_path_(std::move(log_path)),
        prom_path_(std::move(prom_path)),
        log_(log) {}

  struct Sample {
    std::string family;
    std::string labels;  // rendered {…} block
    double value;
  };

  // One completed operation. `p2p_sn` numbers a communicator's p2p operations from 1.
  void AppendOperation(const CommIdentity& comm, const Completion& c, uint64_t bytes,
                       uint64_t p2p_sn, uint64_t now_unix_us);
  // Remembers the metrics of `report` as its communicator's latest interval.
  void UpdateMetrics(const ncclwatch::v1::RankReport& report);
  // Forgets a finalized communicator (Inspector exports live communicators only).
  void ForgetCommunicator(uint64_t comm_hash, int rank);
  // Rewrites the .prom file and flushes the JSON Lines file.
  void Flush();

  const Identity identity_;
  const std::string log_path_;
  const std::string prom_path_;
  FILE* log_;
  std::map<std::pair<uint64_t, int>, std::vector<Sample>> latest_;  // (comm hash, rank) -> samples
  std::map<const CommState*, uint64_t> p2p_sn_;  // last p2p_sn given, per live communicator
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_OFFLINE_DUMP_H_
