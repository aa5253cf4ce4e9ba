#include "agent/agent_service.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/log.h"
#include "common/rendezvous.h"
#include "common/sync.h"
#include "google/protobuf/arena.h"
#include "proto/validate.h"

namespace ncclwatch::agent {

namespace {
constexpr const char* kRejectedHelp = "Reports rejected by validation, by reason.";
constexpr const char* kAttributedHelp =
    "Accepted reports stamped with a pod, by where the pod came from: kernel (the sender's "
    "cgroup) or gpu (the kubelet's owner of the GPU the report names).";
}  // namespace

size_t ShardOf(std::string_view job_id, const std::vector<std::string>& endpoints) {
  return endpoints.size() == 1 ? 0 : RendezvousOwner(job_id, endpoints);
}

ReportHandler::ReportHandler(std::string node, std::vector<Forwarder*> shards,
                             MetricRegistry& metrics, const PodResolver* pods,
                             NodeInspectorSeries* inspector, PodDirectory* pod_names)
    : node_(std::move(node)),
      shards_(std::move(shards)),
      pods_(pods),
      inspector_(inspector),
      pod_names_(pod_names),
      metrics_(metrics),
      received_(metrics.GetCounter("ncclwatch_agent_reports_received_total",
                                   "Reports received from plugins.")),
      accepted_(metrics.GetCounter("ncclwatch_agent_reports_accepted_total",
                                   "Reports that passed validation and were queued.")),
      attributed_by_kernel_(metrics.GetCounter("ncclwatch_agent_reports_attributed_total",
                                               kAttributedHelp, {{"source", "kernel"}})),
      attributed_by_gpu_(metrics.GetCounter("ncclwatch_agent_reports_attributed_total",
                                            kAttributedHelp, {{"source", "gpu"}})),
      claims_refused_(metrics.GetCounter(
          "ncclwatch_agent_gpu_claims_refused_total",
          "Reports naming a GPU that the kubelet allocates to a pod other than the sender's "
          "(per the kernel); their gpu_uuid is dropped.")),
      unnamed_pods_(metrics.GetCounter(
          "ncclwatch_agent_reports_unnamed_pod_total",
          "Reports from a pod the kernel knows but --pod-logs-dir does not name; sent without a "
          "pod.")),
      unknown_senders_(metrics.GetCounter(
          "ncclwatch_agent_reports_unknown_sender_total",
          "Reports on a connection whose process the kernel could no longer name (it exited "
          "before the agent read its cgroup); sent without a pod and without the GPU they "
          "claim.")),
      streams_(metrics.GetGauge("ncclwatch_agent_plugin_streams",
                                "Plugin streams currently connected.")) {
  for (const Forwarder* f : shards_) endpoints_.push_back(f->shard_name());
  // Every field the agent vouches for is written, empty ones too (they are `optional` in the
  // proto, so an empty value is serialised): a plugin's claims about its node or pod never survive.
  ncclwatch::v1::RankReport stamp;
  auto* id = stamp.mutable_identity();
  id->set_node(node_);
  id->set_pod("");
  id->set_pod_namespace("");
  id->set_container("");
  node_stamp_ = stamp.SerializeAsString();
  // Pre-create the common rejection reasons so dashboards see zeros, not gaps.
  for (const char* reason : {"malformed", "bad_rank", "bad_nranks", "too_large", "rate_limited"}) {
    metrics.GetCounter("ncclwatch_agent_reports_rejected_total", kRejectedHelp,
                       {{"reason", reason}});
  }
}

std::string ReportHandler::Stamp(const ncclwatch::v1::RankIdentity& identity,
                                 const PeerIdentity* peer) {
  std::optional<PodRef> owner;
  if (pods_ != nullptr && !identity.gpu_uuid().empty()) owner = pods_->Lookup(identity.gpu_uuid());
  ncclwatch::v1::RankReport stamp;
  auto* id = stamp.mutable_identity();
  id->set_node(node_);
  if (peer != nullptr && peer->cgroup_unreadable) {
    // Not a host process: one the kernel can no longer name. Its GPU claim proves nothing.
    unknown_senders_->Increment();
    id->set_pod("");
    id->set_pod_namespace("");
    id->set_container("");
    id->set_gpu_uuid("");
    return stamp.SerializeAsString();
  }
  if (peer != nullptr && peer->pod && pod_names_ != nullptr) {
    std::optional<PodName> sender = pod_names_->Find(peer->pod->pod_uid);
    if (!sender) {
      // The kernel knows the pod but nothing names it; its GPU claim cannot name one either.
      unnamed_pods_->Increment();
      id->set_pod("");
      id->set_pod_namespace("");
      id->set_container("");
      return stamp.SerializeAsString();
    }
    attributed_by_kernel_->Increment();
    id->set_pod(sender->pod);
    id->set_pod_namespace(sender->pod_namespace);
    const bool owned =
        owner && owner->pod == sender->pod && owner->pod_namespace == sender->pod_namespace;
    id->set_container(owned ? owner->container : "");
    if (owner && !owned) {
      claims_refused_->Increment();
      id->set_gpu_uuid("");
      if (ClaimWarningDue()) {
        LogWarning(
            "pod %s/%s (pid %d) sent a report naming GPU %s, which the kubelet allocates to "
            "%s/%s; the GPU is dropped from the report",
            sender->pod_namespace, sender->pod, peer->pid, identity.gpu_uuid(),
            owner->pod_namespace, owner->pod);
      }
    }
    return stamp.SerializeAsString();
  }
  if (!owner) return node_stamp_;
  attributed_by_gpu_->Increment();
  id->set_pod(owner->pod);
  id->set_pod_namespace(owner->pod_namespace);
  id->set_container(owner->container);
  return stamp.SerializeAsString();
}

bool ReportHandler::ClaimWarningDue() {
  // One line per 10 s at most: a pod that keeps lying must not flood the agent's log.
  const int64_t now_ns = absl::GetCurrentTimeNanos();
  int64_t last_ns = last_claim_warning_ns_.load(std::memory_order_relaxed);
  return now_ns - last_ns >= 10'000'000'000 &&
         last_claim_warning_ns_.compare_exchange_strong(last_ns, now_ns);
}

void ReportHandler::RateLimited() {
  received_->Increment();
  Reject("rate_limited");
}

void ReportHandler::Reject(const std::string& reason) {
  metrics_
      .GetCounter("ncclwatch_agent_reports_rejected_total", kRejectedHelp, {{"reason", reason}})
      ->Increment();
}

bool ReportHandler::Handle(std::string report, uint64_t source, const PeerIdentity* peer) {
  received_->Increment();
  // Decode into this thread's scratch block: a typical report fits, so the decoded copy costs no
  // allocation and is discarded whole when the arena goes.
  constexpr size_t kScratchBytes = 64 << 10;
  alignas(16) thread_local char scratch[kScratchBytes];
  google::protobuf::ArenaOptions arena_options;
  arena_options.initial_block = scratch;
  arena_options.initial_block_size = kScratchBytes;
  google::protobuf::Arena arena(arena_options);
  auto* decoded = google::protobuf::Arena::CreateMessage<ncclwatch::v1::RankReport>(&arena);
  if (!decoded->ParseFromString(report)) {
    Reject("malformed");
    LogDebug("rejected a report of %d bytes that is not a RankReport", report.size());
    return false;
  }
  ReportVerdict verdict = ValidateReport(*decoded);
  if (!verdict.ok) {
    Reject(verdict.reason);
    LogDebug("rejected report from pid %d: %s", decoded->identity().pid(), verdict.detail);
    return false;
  }
  if (inspector_ != nullptr) inspector_->Update(*decoded);
  // What goes on is what was validated, encoded again: fields this agent does not know are
  // dropped, and with them whatever the aggregator might not parse (it reads a report one level
  // deeper, inside a NodeBatch: 100 nested unknown groups pass here and fail there) or that a
  // newer plugin meant for a newer aggregator.
  decoded->DiscardUnknownFields();
  report.clear();
  decoded->AppendToString(&report);
  report.append(Stamp(decoded->identity(), peer));
  shards_[ShardOf(decoded->identity().job_id(), endpoints_)]->Enqueue(std::move(report), source);
  accepted_->Increment();
  return true;
}

void ReportHandler::StreamOpened() { streams_->Add(1); }
void ReportHandler::StreamClosed() { streams_->Add(-1); }

namespace {

// One per plugin stream: read, hand over, read again; deletes itself when gRPC is done with it.
class ReportReader final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  ReportReader(ReportHandler& handler, AgentService& service, grpc::CallbackServerContext* context,
               grpc::ByteBuffer* response)
      : handler_(handler), service_(service), response_(response) {
    last_message_ns_.store(absl::GetCurrentTimeNanos(), std::memory_order_relaxed);
    refilled_ns_ = last_message_ns_.load(std::memory_order_relaxed);
    tokens_ = service_.limits().burst_bytes;
    source_ = next_source.fetch_add(1, std::memory_order_relaxed);
    if (service_.peers() != nullptr) peer_ = service_.peers()->OpenStream(context->peer());
    admitted_ = service_.Admit(this, AgentService::Live{context, &last_message_ns_});
    if (!admitted_) {
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "the agent has as many plugin streams open as it allows"));
      return;
    }
    handler_.StreamOpened();
    HandOff(this);
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    TakeOver(this);
    if (!ok) {  // the plugin closed its side (or the stream broke)
      bool own_buffer = false;
      grpc::Status status = grpc::SerializationTraits<ncclwatch::v1::StreamSummary>::Serialize(
          summary_, response_, &own_buffer);
      Finish(status);
      return;
    }
    std::string report;
    if (message_.Dump(&slices_).ok()) {
      report.reserve(message_.Length() + 512);  // room for the identity stamp
      for (const grpc::Slice& s : slices_) {
        report.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    slices_.clear();
    message_.Clear();
    const int64_t now_ns = absl::GetCurrentTimeNanos();
    last_message_ns_.store(now_ns, std::memory_order_relaxed);
    // Token bucket over this stream's bytes.
    const StreamLimits& limits = service_.limits();
    tokens_ =
        std::min(limits.burst_bytes, tokens_ + (now_ns - refilled_ns_) * 1e-9 * limits.bytes_per_s);
    refilled_ns_ = now_ns;
    const auto size = static_cast<double>(report.size());
    bool accepted = false;
    if (size > tokens_) {
      handler_.RateLimited();
    } else {
      tokens_ -= size;
      accepted = handler_.Handle(std::move(report), source_, peer_.get());
    }
    if (accepted) {
      summary_.set_accepted(summary_.accepted() + 1);
    } else {
      summary_.set_rejected(summary_.rejected() + 1);
    }
    HandOff(this);
    StartRead(&message_);
  }

  void OnDone() override {
    TakeOver(this);
    if (admitted_) {
      service_.Release(this);
      handler_.StreamClosed();
    }
    delete this;
  }

 private:
  ReportHandler& handler_;
  AgentService& service_;
  bool admitted_ = false;
  std::atomic<int64_t> last_message_ns_{0};
  uint64_t source_ = 0;  // tells this stream's reports apart in the forwarding queue
  std::shared_ptr<const PeerIdentity> peer_;  // the kernel's word on the sender; null: none
  double tokens_ = 0;                         // rate limit: bytes this stream may send now
  int64_t refilled_ns_ = 0;
  static inline std::atomic<uint64_t> next_source{1};
  grpc::ByteBuffer* response_;
  ncclwatch::v1::StreamSummary summary_;
  grpc::ByteBuffer message_;
  std::vector<grpc::Slice> slices_;
};

}  // namespace

AgentService::AgentService(ReportHandler& handler, MetricRegistry& metrics, StreamLimits limits,
                           PeerTable* peers)
    : handler_(handler),
      limits_(limits),
      peers_(peers),
      refused_(metrics.GetCounter(
          "ncclwatch_agent_plugin_streams_refused_total",
          "Plugin streams refused: --max-plugin-streams were open, all of them closing.")),
      evicted_(metrics.GetCounter("ncclwatch_agent_plugin_streams_evicted_total",
                                  "Plugin streams closed to make room for a new one at "
                                  "--max-plugin-streams: the one silent the longest.")),
      idle_closed_(metrics.GetCounter(
          "ncclwatch_agent_plugin_streams_idle_closed_total",
          "Plugin streams closed after sending nothing for --plugin-stream-idle-s.")) {}

grpc::ServerReadReactor<grpc::ByteBuffer>* AgentService::StreamReports(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* summary) {
  return new ReportReader(handler_, *this, context, summary);
}

bool AgentService::Admit(const void* stream, Live live) {
  ncclwatch::MutexLock lock(&mu_);
  if (static_cast<int>(live_.size() - cancelled_) >= limits_.max_streams) {
    // Full: the stream silent the longest makes room (a plugin reports every flush interval, so
    // streams held open doing nothing go first), unless every open stream is already closing.
    Live* quietest = nullptr;
    for (auto& [other, l] : live_) {
      if (l.cancelled) continue;
      if (quietest == nullptr || l.last_message_ns->load(std::memory_order_relaxed) <
                                     quietest->last_message_ns->load(std::memory_order_relaxed)) {
        quietest = &l;
      }
    }
    if (quietest == nullptr) {
      refused_->Increment();
      return false;
    }
    quietest->cancelled = true;
    ++cancelled_;
    evicted_->Increment();  // counted before the stream can see it end
    quietest->context->TryCancel();
  }
  live_.emplace(stream, live);
  return true;
}

void AgentService::Release(const void* stream) {
  ncclwatch::MutexLock lock(&mu_);
  auto it = live_.find(stream);
  if (it == live_.end()) return;
  if (it->second.cancelled) --cancelled_;
  live_.erase(it);
}

int AgentService::CancelIdle(absl::Time now) {
  const int64_t before_ns = absl::ToUnixNanos(now - limits_.idle_timeout);
  int cancelled = 0;
  // Under mu_: a stream stays registered (so alive) until its OnDone has released it.
  ncclwatch::MutexLock lock(&mu_);
  for (auto& [stream, live] : live_) {
    if (live.cancelled || live.last_message_ns->load(std::memory_order_relaxed) >= before_ns) {
      continue;
    }
    live.cancelled = true;
    ++cancelled_;
    idle_closed_->Increment();  // counted before the stream can see it end
    live.context->TryCancel();
    ++cancelled;
  }
  return cancelled;
}

}  // namespace ncclwatch::agent
