// Several aggregators as one Query service. The agents place each job on one aggregator, the
// rendezvous owner of its job id among the aggregator endpoints they list (common/rendezvous.h),
// so every rank of a job is judged in one place. Each aggregator started with the same list
// (--shard-peers) and its own entry in it (--shard-self) answers the Query API for every job:
//   - a call about one job (a job_id, or a QueryRange selector with job_id="...") goes to the
//     job's owner, this aggregator or a peer;
//   - a call about all jobs goes to every aggregator at once and the answers are merged (jobs,
//     findings and communicators concatenated, a job that moved listed once, events merged by
//     time with one page token that carries each aggregator's cursor, series paged aggregator by
//     aggregator, stats summed).
// A forwarded call carries the caller's bearer token and the header `ncclwatch-shard-hop`; an
// aggregator answers such a call from its own state only, so nothing is forwarded twice. An
// unreachable peer fails a call about one of its jobs (UNAVAILABLE, naming it) and leaves a call
// about all jobs answered by the rest, named in the trailing metadata `ncclwatch-unreachable` and
// counted in ncclwatch_aggregator_shard_calls_total{peer,result}.
//
// Watch streams every aggregator's detection events: each aggregator keeps one Watch stream open
// to every peer (marked forwarded, so the peer sends only its own) and relays what arrives, with
// its own events, to its Watch clients. A peer that is down is retried every second; what it
// found meanwhile is in ListEvents.
#ifndef NCCLWATCH_AGGREGATOR_SERVER_SHARD_ROUTER_H_
#define NCCLWATCH_AGGREGATOR_SERVER_SHARD_ROUTER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "aggregator/ingest/event_bus.h"
#include "common/metrics.h"
#include "common/rpc/shard_metadata.h"
#include "common/rpc/token.h"
#include "common/sync.h"
#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/query.grpc.pb.h"

namespace ncclwatch::aggregator {

struct ShardOptions {
  // Every aggregator of the service as the agents' --aggregator lists them: "host:port" or
  // "name=host:port" (common/rendezvous.h); jobs are hashed on the names.
  std::vector<std::string> peers;
  std::string self;  // this aggregator's name (or its entry) in `peers`
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // towards the peers; null: plaintext
  // Of a forwarded call, waiting for a (re)connection included: how long an answer about all
  // jobs waits for a peer that is down before it is given without that peer's part.
  absl::Duration timeout = absl::Seconds(5);
};

// Merging the answers of several aggregators (exposed for tests). `answers[i]` came from peer i.
// Jobs: one entry per job id, the running one first, else the latest reported.
ncclwatch::v1::ListJobsResponse MergeJobs(std::vector<ncclwatch::v1::ListJobsResponse> answers);
// Events, oldest first, at most `limit` (0: 1000). `cursors[i]` is peer i's page token the answers
// were read from; the next page token, set when the limit cut the answer short, holds each peer's
// cursor after what was taken. ParseEventCursors reads it back (InvalidArgument when malformed
// or made for a different number of peers).
ncclwatch::v1::ListEventsResponse MergeEvents(
    std::vector<ncclwatch::v1::ListEventsResponse> answers, const std::vector<std::string>& cursors,
    uint32_t limit);
absl::StatusOr<std::vector<std::string>> ParseEventCursors(std::string_view token, size_t peers);
// Where a page of series merged aggregator by aggregator resumes: on peer `peer`, with that peer's
// own page token. ParseSeriesPage reads a token SeriesPageToken made ("": the first page).
struct SeriesPage {
  size_t peer = 0;
  std::string token;
};
absl::StatusOr<SeriesPage> ParseSeriesPage(std::string_view token, size_t peers);
std::string SeriesPageToken(size_t peer, std::string_view token);
// The value of an equality matcher on job_id in a series selector ("" when there is none).
std::string SelectorJob(std::string_view selector);

class ShardRouter {
 public:
  // InvalidArgument when `self` is not among `peers` or a peer is listed twice.
  static absl::StatusOr<std::unique_ptr<ShardRouter>> Create(ShardOptions options,
                                                             MetricRegistry& metrics);

  // Whether `context`'s call came from a peer (answer it locally).
  static bool Forwarded(const grpc::ServerContextBase& context);

  template <typename Response>
  using Local = std::function<absl::StatusOr<Response>()>;
  template <typename Response>
  using Merge = std::function<absl::Status(std::vector<Response>& answers,
                                           const std::vector<bool>& answered, Response* out)>;
  // Sends the call to peer `peer` (it may also answer at once, calling back with OK, to skip it).
  template <typename Response>
  using Remote =
      std::function<void(size_t peer, ncclwatch::v1::Query::StubInterface::async_interface*,
                         grpc::ClientContext*, Response*, std::function<void(grpc::Status)>)>;

  // Answers a call about `job` (its owner answers: `local` here, else `remote` on the peer).
  template <typename Response>
  grpc::ServerUnaryReactor* ForJob(grpc::CallbackServerContext* context, std::string_view job,
                                   Response* response, Local<Response> local,
                                   Remote<Response> remote);
  // Answers a call about every job: `local` here and `remote` on every peer at once, then
  // `merge(answers, answered, response)` over the answers in peer order (an unreachable peer's is
  // empty, and false in `answered`).
  template <typename Response>
  grpc::ServerUnaryReactor* ForAll(grpc::CallbackServerContext* context, Response* response,
                                   Local<Response> local, Remote<Response> remote,
                                   Merge<Response> merge);

  // The peers' names, in --shard-peers order.
  const std::vector<std::string>& peers() const { return names_; }
  size_t self() const { return self_; }
  size_t Owner(std::string_view job) const;

  // Starts relaying every aggregator's events onto fleet_events(): this one's from `local`, each
  // peer's from a Watch stream authorised with `token` (optional; the service's query token).
  // `local` and `token` outlive the relay. StopRelay ends it (idempotent; the destructor calls it).
  void StartRelay(EventBus& local, TokenFile* token);
  void StopRelay();
  EventBus& fleet_events() { return fleet_; }
  ~ShardRouter() { StopRelay(); }

 private:
  class LocalRelay final : public EventWatcher {
   public:
    explicit LocalRelay(EventBus& to) : to_(to) {}
    void Deliver(const ncclwatch::v1::Event& event) override { to_.Publish(event); }

   private:
    EventBus& to_;
  };
  // Relays peer `peer`'s events until StopRelay.
  void RelayPeer(size_t peer, TokenFile* token);
  struct Peer {
    std::unique_ptr<ncclwatch::v1::Query::Stub> stub;
    Counter* ok;
    Counter* failed;
  };
  ShardRouter(ShardOptions options, std::vector<std::string> names, size_t self,
              std::vector<Peer> peers)
      : options_(std::move(options)),
        names_(std::move(names)),
        self_(self),
        peers_(std::move(peers)) {}
  // A client context for a call forwarded on behalf of `from`.
  std::unique_ptr<grpc::ClientContext> Forward(const grpc::ServerContextBase& from) const;
  // Counts how a call forwarded to `peer` ended and returns its status, made UNAVAILABLE and
  // naming the peer when it was not reached (unavailable, or the deadline passed waiting).
  grpc::Status Settle(size_t peer, const grpc::Status& status) const;

  const ShardOptions options_;
  const std::vector<std::string> names_;
  const size_t self_;
  std::vector<Peer> peers_;  // peers_[self_].stub is null
  EventBus fleet_;
  EventBus* local_ = nullptr;
  std::unique_ptr<LocalRelay> local_relay_;
  std::vector<std::thread> relays_;
  ncclwatch::Mutex relay_mu_;
  bool stopping_ ABSL_GUARDED_BY(relay_mu_) = false;
  // The Watch stream each relay has open (to cancel it at StopRelay).
  std::vector<grpc::ClientContext*> streams_ ABSL_GUARDED_BY(relay_mu_);
};

// --- implementation of the templates ---

grpc::Status ToGrpcStatus(const absl::Status& s);

template <typename Response>
grpc::ServerUnaryReactor* ShardRouter::ForJob(grpc::CallbackServerContext* context,
                                              std::string_view job, Response* response,
                                              Local<Response> local, Remote<Response> remote) {
  auto* reactor = context->DefaultReactor();
  const size_t owner = Owner(job);
  if (owner == self_) {
    absl::StatusOr<Response> answer = local();
    if (answer.ok()) *response = *std::move(answer);
    reactor->Finish(answer.ok() ? grpc::Status::OK : ToGrpcStatus(answer.status()));
    return reactor;
  }
  std::shared_ptr<grpc::ClientContext> client = Forward(*context);
  remote(owner, peers_[owner].stub->async(), client.get(), response,
         [this, reactor, client, owner](grpc::Status status) {
           reactor->Finish(Settle(owner, status));
         });
  return reactor;
}

template <typename Response>
grpc::ServerUnaryReactor* ShardRouter::ForAll(grpc::CallbackServerContext* context,
                                              Response* response, Local<Response> local,
                                              Remote<Response> remote, Merge<Response> merge) {
  struct State {
    std::vector<Response> answers;
    std::vector<grpc::Status> status;  // this aggregator's own, or a settled peer's
    std::vector<std::unique_ptr<grpc::ClientContext>> clients;
    std::atomic<size_t> pending;
  };
  auto state = std::make_shared<State>();
  const size_t n = peers_.size();
  state->answers.resize(n);
  state->status.resize(n);
  state->clients.resize(n);
  state->pending = n;
  auto* reactor = context->DefaultReactor();
  auto done = [this, state, reactor, context, response, merge]() {
    std::string unreachable;
    std::vector<bool> answered(state->status.size(), true);
    for (size_t i = 0; i < state->status.size(); ++i) {
      if (state->status[i].ok()) continue;
      answered[i] = false;
      // This aggregator's error, or a peer's own refusal (a bad page token, a bad selector), is
      // the call's; only a peer not reached leaves the answer to the others.
      if (i == self_ || state->status[i].error_code() != grpc::StatusCode::UNAVAILABLE) {
        reactor->Finish(state->status[i]);
        return;
      }
      state->answers[i] = Response();
      if (!unreachable.empty()) unreachable += ",";
      unreachable += names_[i];
    }
    if (!unreachable.empty()) context->AddTrailingMetadata(kUnreachableTrailer, unreachable);
    const absl::Status merged = merge(state->answers, answered, response);
    reactor->Finish(merged.ok() ? grpc::Status::OK : ToGrpcStatus(merged));
  };
  for (size_t i = 0; i < n; ++i) {
    if (i == self_) continue;
    state->clients[i] = Forward(*context);
    remote(i, peers_[i].stub->async(), state->clients[i].get(), &state->answers[i],
           [this, state, i, done](grpc::Status status) {
             state->status[i] = Settle(i, status);
             if (--state->pending == 0) done();
           });
  }
  absl::StatusOr<Response> mine = local();
  if (mine.ok()) {
    state->answers[self_] = *std::move(mine);
  } else {
    state->status[self_] = ToGrpcStatus(mine.status());
  }
  if (--state->pending == 0) done();
  return reactor;
}

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVER_SHARD_ROUTER_H_
