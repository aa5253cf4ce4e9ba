// The agent's gRPC service for plugins: one client stream per rank process
// (ncclwatch.v1.Agent/StreamReports). Each report is validated, stamped with this node's name and
// handed to the Forwarder. Rejections are counted by reason and never end the stream.
//
// Reports stay in the bytes their plugin serialized: the stream is read raw, a report is decoded
// (on a per-thread arena) only to be validated, and the agent's identity fields are appended as a
// second, partial `identity` field, which protobuf merges into the first when the aggregator
// decodes it. Nothing is re-encoded, which halves the agent's CPU per report.
//
// The stamp is the node's name and the report's pod, namespace and container, which come from the
// kernel and the kubelet, never from the report:
//  - when the kernel names the connection's pod (peer_identity.h), that pod; its container too
//    when the kubelet allocates the report's GPU to that very pod. A GPU the kubelet allocates to
//    another pod is a false claim: the report keeps its pod, loses its gpu_uuid, and the claim is
//    counted (ncclwatch_agent_gpu_claims_refused_total) and logged;
//  - when the kernel cannot tell (a process outside any pod, or an agent without hostPID), the pod
//    the kubelet allocates the report's GPU to, as a best effort.
// ncclwatch_agent_reports_attributed_total{source="kernel"|"gpu"} counts the reports given a pod.
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
#include "agent/peer_identity.h"
#include "agent/pod_resources.h"
#include "common/metrics.h"
#include "common/sync.h"
#include "ncclwatch/v1/report.grpc.pb.h"

namespace ncclwatch::agent {

// Which of the aggregator `endpoints` (host:port) serves `job_id`: the rendezvous owner of the job
// id among the endpoints' names (common/rendezvous.h). Every agent given the same names, in any
// order, computes the same answer, so all the ranks of a job meet in one aggregator; adding an
// aggregator moves only the jobs it takes over. The aggregators route Query calls by the same
// names (their --shard-peers).
size_t ShardOf(std::string_view job_id, const std::vector<std::string>& endpoints);

// Plain handler, callable without gRPC (tests); the service below adapts streams onto it.
class ReportHandler {
 public:
  // `shards`: one forwarder per aggregator endpoint (at least one); a report goes to the one
  // ShardOf its job id names among their endpoints.
  // `pods` (optional, outlives the handler) attributes a report's GPU to its Kubernetes pod.
  // `inspector` (optional, outlives the handler) keeps the node-local Inspector series.
  // `pod_names` (optional, outlives the handler) names the pods the kernel finds peers in; without
  // it, peers are attributed by their GPU alone.
  ReportHandler(std::string node, std::vector<Forwarder*> shards, MetricRegistry& metrics,
                const PodResolver* pods = nullptr, NodeInspectorSeries* inspector = nullptr,
                PodDirectory* pod_names = nullptr);
  // Takes one serialized RankReport that arrived on stream `source` from `peer` (null: unknown,
  // e.g. over TCP); returns true if it was accepted.
  bool Handle(std::string report, uint64_t source = 0, const PeerIdentity* peer = nullptr);
  void StreamOpened();
  void StreamClosed();
  // A report dropped by its stream's rate limit (counted as rejected, reason rate_limited).
  void RateLimited();

 private:
  void Reject(const std::string& reason);
  // The identity fields this agent adds to a report, serialized as a partial RankReport.
  std::string Stamp(const ncclwatch::v1::RankIdentity& identity, const PeerIdentity* peer);
  // Whether a refused GPU claim may be logged now (true at most once per 10 s).
  bool ClaimWarningDue();

  const std::string node_;
  std::string node_stamp_;  // a serialized RankReport holding only identity.node
  const std::vector<Forwarder*> shards_;
  std::vector<std::string> endpoints_;  // shards_[i]->shard_name()
  const PodResolver* pods_;
  NodeInspectorSeries* inspector_;
  PodDirectory* pod_names_;
  MetricRegistry& metrics_;
  Counter* received_;
  Counter* accepted_;
  Counter* attributed_by_kernel_;
  Counter* attributed_by_gpu_;
  Counter* claims_refused_;
  Counter* unnamed_pods_;
  Counter* unknown_senders_;
  std::atomic<int64_t> last_claim_warning_ns_{0};
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
  // `peers` (optional, outlives the service): the kernel's word on each connection's peer.
  AgentService(ReportHandler& handler, MetricRegistry& metrics, StreamLimits limits = {},
               PeerTable* peers = nullptr);
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
  PeerTable* peers() const { return peers_; }

 private:
  ReportHandler& handler_;
  const StreamLimits limits_;
  PeerTable* peers_;
  Counter* refused_;
  Counter* evicted_;
  Counter* idle_closed_;
  ncclwatch::Mutex mu_;
  absl::flat_hash_map<const void*, Live> live_ ABSL_GUARDED_BY(mu_);
  size_t cancelled_ ABSL_GUARDED_BY(mu_) = 0;  // of live_, closing already
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_AGENT_SERVICE_H_
