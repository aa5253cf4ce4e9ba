// Forwards reports from this node to the aggregator in acknowledged batches.
//
// Reports are queued in memory (bounded: the oldest is dropped and counted when full), cut into a
// NodeBatch when the batch interval has passed or the batch is full, and pushed with a deadline.
// A batch keeps its (agent_id, batch_seq) until the aggregator acknowledges it, so a retry after a
// timeout is deduplicated by the aggregator and never stored twice. Failed pushes back off
// exponentially with jitter (100 ms .. 5 s).
//
// Thread safety: Enqueue() may be called from any thread; one internal thread pushes.
#ifndef NCCLWATCH_AGENT_FORWARDER_H_
#define NCCLWATCH_AGENT_FORWARDER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"

namespace ncclwatch::agent {

struct ForwarderOptions {
  std::string aggregator;         // host:port
  std::string agent_id;
  std::string node;
  int64_t batch_interval_ms = 200;
  int64_t max_batch_reports = 512;
  int64_t max_queued_reports = 100000;
  int64_t push_timeout_ms = 5000;
};

class Forwarder {
 public:
  Forwarder(ForwarderOptions options, MetricRegistry& metrics);
  ~Forwarder();

  void Start();
  void Enqueue(ncclwatch::v1::RankReport report);
  // Pushes everything queued now, waiting at most `timeout`. Returns true if all was acknowledged.
  bool Flush(absl::Duration timeout);
  void Stop();

 private:
  void Run();
  bool PushPending();  // pushes pending_; true when acknowledged

  const ForwarderOptions options_;
  std::unique_ptr<ncclwatch::v1::Ingest::Stub> stub_;

  absl::Mutex mu_;
  std::deque<ncclwatch::v1::RankReport> queue_ ABSL_GUARDED_BY(mu_);
  absl::Time oldest_enqueued_ ABSL_GUARDED_BY(mu_);
  bool flush_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_ ABSL_GUARDED_BY(mu_) = true;  // no pending batch and nothing queued
  std::optional<ncclwatch::v1::NodeBatch> pending_;  // sender thread only
  uint64_t next_seq_ = 1;                             // sender thread only
  std::thread thread_;

  Counter* reports_forwarded_;
  Counter* reports_dropped_;
  Counter* batches_acked_;
  Counter* batches_duplicate_;
  Counter* push_failures_;
  Gauge* queue_depth_;
  Gauge* last_push_seconds_;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_FORWARDER_H_
