// The agent's gRPC service for plugins: one client stream per rank process
// (ncclwatch.v1.Agent/StreamReports). Each report is validated, stamped with this node's name and
// handed to the Forwarder. Rejections are counted by reason and never end the stream.
//
// Reports stay in the bytes their plugin serialized: the stream is read raw, a report is decoded
// (on a per-thread arena) only to be validated, and the agent's identity fields are appended as a
// second, partial `identity` field, which protobuf merges into the first when the aggregator
// decodes it. Nothing is re-encoded, which halves the agent's CPU per report. The stamp is the
// node's name and, where the kubelet knows the report's GPU, the pod, namespace and container.
#ifndef NCCLWATCH_AGENT_AGENT_SERVICE_H_
#define NCCLWATCH_AGENT_AGENT_SERVICE_H_

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "agent/forwarder.h"
#include "agent/inspector_series.h"
#include "agent/pod_resources.h"
#include "common/metrics.h"
#include "common/sync.h"
#include "ncclwatch/v1/report.grpc.pb.h"

namespace ncclwatch::agent {

// Which of `shards` aggregator endpoints serves `job_id`: FNV-1a of the job id modulo their
// number. Every agent of a cluster computes the same answer (given the same endpoint list in the
// same order), so all the ranks of a job meet in one aggregator.
size_t ShardOf(std::string_view job_id, size_t shards);

// Plain handler, callable without gRPC (tests); the service below adapts streams onto it.
class ReportHandler {
 public:
  // `shards`: one forwarder per aggregator endpoint (at least one); a report goes to the one
  // ShardOf its job id names.
  // `pods` (optional, outlives the handler) attributes a report's GPU to its Kubernetes pod.
  // `inspector` (optional, outlives the handler) keeps the node-local Inspector series.
  ReportHandler(std::string node, std::vector<Forwarder*> shards, MetricRegistry& metrics,
                const PodResolver* pods = nullptr, NodeInspectorSeries* inspector = nullptr);
  // Takes one serialized RankReport that arrived on stream `source`; returns true if it was
  // accepted.
  bool Handle(std::string report, uint64_t source = 0);
  void StreamOpened();
  void StreamClosed();
  // A report dropped by its stream's rate limit (counted as rejected, reason rate_limited).
  void RateLimited();

 private:
  void Reject(const std::string& reason);
  // The identity fields this agent adds to a report, serialized as a partial RankReport.
  std::string Stamp(const ncclwatch::v1::RankIdentity& identity) const;

  const std::string node_;
  std::string node_stamp_;  // a serialized RankReport holding only identity.node
  const std::vector<Forwarder*> shards_;
  const PodResolver* pods_;
  NodeInspectorSeries* inspector_;
  MetricRegistry& metrics_;
  Counter* received_;
  Counter* accepted_;
  Counter* attributed_;
  Gauge* streams_;
};

// Bounds on the plugins' streams: at most `max_streams` are open (a new one beyond closes the
// stream silent the longest, so streams held open doing nothing cannot lock plugins out), and a
// stream that sends nothing for `idle_timeout` is closed (a plugin opens a new one when it next
// has a report). Evictions and closings are counted.
// Each stream may also send at most `bytes_per_s` on average, in bursts of `burst_bytes`; reports
// beyond are dropped and counted (ncclwatch_agent_reports_rejected_total{reason="rate_limited"}).
// A plugin sends one report of a few KiB per flush interval.
struct StreamLimits {
  int max_streams = 1024;
  absl::Duration idle_timeout = absl::Minutes(10);
  double bytes_per_s = 4 << 20;
  double burst_bytes = 16 << 20;
};

class AgentService final : public ncclwatch::v1::Agent::WithRawCallbackMethod_StreamReports<
                               ncclwatch::v1::Agent::Service> {
 public:
  AgentService(ReportHandler& handler, MetricRegistry& metrics, StreamLimits limits = {});
  grpc::ServerReadReactor<grpc::ByteBuffer>* StreamReports(grpc::CallbackServerContext* context,
                                                           grpc::ByteBuffer* summary) override;

  // Cancels every stream whose last message is older than `now` - idle_timeout; returns how many.
  // Call it periodically (the agent server does, every few seconds).
  int CancelIdle(absl::Time now);

  // For the streams (internal): a stream is admitted while fewer than max_streams are open.
  struct Live {
    grpc::CallbackServerContext* context;
    const std::atomic<int64_t>* last_message_ns;
    bool cancelled = false;
  };
  bool Admit(const void* stream, Live live);
  void Release(const void* stream);
  const StreamLimits& limits() const { return limits_; }
  ReportHandler& handler() { return handler_; }

 private:
  ReportHandler& handler_;
  const StreamLimits limits_;
  Counter* refused_;
  Counter* evicted_;
  Counter* idle_closed_;
  ncclwatch::Mutex mu_;
  absl::flat_hash_map<const void*, Live> live_ ABSL_GUARDED_BY(mu_);
  size_t cancelled_ ABSL_GUARDED_BY(mu_) = 0;  // of live_, closing already
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_AGENT_SERVICE_H_
