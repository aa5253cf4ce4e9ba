// Forwards reports from this node to the aggregator in acknowledged batches.
//
// Reports travel as the bytes their plugin serialized (with the agent's identity stamp appended):
// a batch is a NodeBatchBytes, which the aggregator decodes as a NodeBatch (ingest.proto).
//
// Reports are queued in memory (bounded: when full, the oldest report of the source -- the plugin
// stream -- holding the most bytes is dropped and counted; fair_queue.h) and cut into
// a NodeBatch when the batch interval has passed or the batch is full. Cut batches wait in an
// outbox and are pushed in order, one at a time, each with a deadline; a batch keeps its
// (agent_id, batch_seq) until the aggregator acknowledges it, so a retry after a timeout is
// deduplicated by the aggregator and never stored twice. Failed pushes back off exponentially
// with jitter (100 ms .. 5 s), while new batches keep being cut.
//
// With a spool (spool.h) every batch is written there as it is cut, and deleted once acknowledged;
// the outbox then holds only the spool names, so an outage costs disk, not memory. The batches an
// earlier run left in the spool go first, in order. At stop, the reports still in memory are cut
// and spooled rather than lost. Memory is bounded twice, in reports and in (serialized) bytes: the
// queue by max_queued_reports and max_queued_bytes, and, without a spool, the batches waiting in
// memory by the same two limits; beyond them the oldest are dropped and counted.
//
// Thread safety: Enqueue() may be called from any thread; one internal thread cuts and pushes.
#ifndef NCCLWATCH_AGENT_FORWARDER_H_
#define NCCLWATCH_AGENT_FORWARDER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "agent/fair_queue.h"
#include "agent/spool.h"
#include "common/metrics.h"
#include "common/rpc/token.h"
#include "common/sync.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"

namespace ncclwatch::agent {

struct ForwarderOptions {
  std::string aggregator;  // host:port
  std::string shard_name;  // the name jobs are placed by (ShardOf); empty: `aggregator`
  std::string agent_id;
  std::string node;
  int64_t batch_interval_ms = 200;
  int64_t max_batch_reports = 512;
  int64_t max_queued_reports = 100000;
  int64_t max_queued_bytes = 16 << 20;
  int64_t max_batch_bytes = 4 << 20;  // the agent keeps it under 1/8 of the spool
  int64_t push_timeout_ms = 5000;
  // The oldest batch is set aside after this many failures a retry may not mend (PushResult::
  // kFailed), once a later batch of the node gets through: a poison batch must not hold back
  // every batch behind it. Spooled, it is kept as `<name>.rejected`.
  int64_t set_aside_after = 5;
  Spool* spool = nullptr;  // optional; outlives the Forwarder
  // TLS towards the aggregator (plaintext when null) and the name to verify in its certificate.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string tls_server_name;
  TokenFile* token = nullptr;  // optional bearer token on every push; outlives the Forwarder
  LabelPairs metric_labels;    // on every metric of this forwarder, e.g. {aggregator="..."}
};

class Forwarder {
 public:
  Forwarder(ForwarderOptions options, MetricRegistry& metrics);
  ~Forwarder();

  void Start();
  // Queues one serialized RankReport.
  // `source` tells apart the streams reports come on: when the queue is full, the source with
  // the most queued bytes loses its oldest report (fair_queue.h).
  void Enqueue(std::string report, uint64_t source = 0);
  // Pushes everything queued now, waiting at most `timeout`. Returns true if all was acknowledged.
  bool Flush(absl::Duration timeout);
  void Stop();
  // Since when every push has failed (unix ns; 0 while the last one was acknowledged), and how
  // the last one failed: for readiness (a full disk at the aggregator, a wrong token alike).
  int64_t FailingSinceNs() const { return failing_since_ns_.load(std::memory_order_relaxed); }
  std::string LastFailure() const;
  const std::string& aggregator() const { return options_.aggregator; }
  // The name jobs are placed on this forwarder's aggregator by (ShardOf).
  const std::string& shard_name() const {
    return options_.shard_name.empty() ? options_.aggregator : options_.shard_name;
  }

 private:
  // A cut batch waiting for its acknowledgement: in the spool (by name) or in memory.
  struct Outgoing {
    std::string spool_name;
    std::optional<ncclwatch::v1::NodeBatchBytes> batch;
    int reports = 0;
    int64_t bytes = 0;  // of the in-memory batch, 0 when it lives in the spool
    absl::Time oldest_report = absl::InfinitePast();  // unknown for batches of an earlier run
  };

  void Run();
  enum class PushResult {
    kAcked,
    kRetry,    // the aggregator was unreachable, busy or refused the token: try again later
    kFailed,   // failed in a way a retry may not mend (it could not parse it, an internal
               // error): tried again, and set aside once a later batch gets through instead
    kRefused,  // the aggregator will never take this batch (malformed, too large): drop it
  };
  PushResult Push(ncclwatch::v1::NodeBatchBytes& batch);
  // Reads a spooled batch into `o` if it is not in memory; false (and logged) when it is gone.
  bool Load(Outgoing& o);
  // Done with `o` (acknowledged, refused or set aside): off the spool and the memory counts.
  void Release(const Outgoing& o);
  // A batch just cut from the queue, and when its oldest report arrived.
  struct Cut {
    ncclwatch::v1::NodeBatchBytes batch;
    absl::Time oldest_report;
  };
  // Cuts up to max_batch_reports queued reports into a new batch.
  Cut CutBatch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a cut batch in the outbox (through the spool when there is one).
  void Admit(Cut cut);

  const ForwarderOptions options_;
  // Ingest/Push, called with the NodeBatchBytes encoding of a NodeBatch.
  std::shared_ptr<grpc::Channel> channel_;
  grpc::TemplatedGenericStub<ncclwatch::v1::NodeBatchBytes, ncclwatch::v1::BatchAck> stub_;

  ncclwatch::Mutex mu_;
  FairQueue queue_ ABSL_GUARDED_BY(mu_);
  absl::Time oldest_enqueued_ ABSL_GUARDED_BY(mu_);
  bool flush_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool idle_ ABSL_GUARDED_BY(mu_) = true;  // nothing queued and nothing waiting in the outbox
  std::deque<Outgoing> outbox_;            // sender thread only
  int64_t outbox_reports_ = 0;             // sender thread only: reports in memory in the outbox
  int64_t outbox_bytes_ = 0;               // sender thread only: their serialized bytes
  uint64_t next_seq_ = 1;                  // under mu_ (CutBatch)
  int64_t front_failures_ = 0;             // sender thread only: kFailed pushes of the oldest
  std::atomic<int64_t> failing_since_ns_{0};
  mutable ncclwatch::Mutex failure_mu_;
  std::string last_failure_ ABSL_GUARDED_BY(failure_mu_);
  std::thread thread_;

  Counter* reports_forwarded_;
  Counter* reports_dropped_;
  Counter* batches_acked_;
  Counter* batches_duplicate_;
  Counter* push_failures_;
  Counter* batches_refused_;
  Counter* batches_set_aside_;
  Counter* batches_replayed_;
  Gauge* queue_depth_;
  Gauge* outbox_depth_;
  Gauge* last_push_duration_;
  Histogram* push_seconds_;
  Histogram* delay_seconds_;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_FORWARDER_H_
