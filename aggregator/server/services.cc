#include "aggregator/server/services.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "aggregator/server/arena_batch.h"
#include "aggregator/server/watch.h"
#include "common/daemon.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_writer.h"

namespace ncclwatch::aggregator {
namespace {

const grpc::Status kPushUnauthenticated(grpc::StatusCode::UNAUTHENTICATED,
                                        "a valid bearer token is required to push batches");
const grpc::Status kQueryUnauthenticated(grpc::StatusCode::UNAUTHENTICATED,
                                         "a valid bearer token is required to query");

// Ends a unary call (its response already filled when `status` is OK).
grpc::ServerUnaryReactor* Finished(grpc::CallbackServerContext* context,
                                   const grpc::Status& status = grpc::Status::OK) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// Ends a unary call through `reactor` with `answer`: its value as the response, or its error as
// the status.
template <typename Response>
void FinishWith(grpc::ServerUnaryReactor* reactor, absl::StatusOr<Response> answer,
                Response* response) {
  if (!answer.ok()) {
    reactor->Finish(ToGrpcStatus(answer.status()));
    return;
  }
  *response = *std::move(answer);
  reactor->Finish(grpc::Status::OK);
}

// The same, answered now on the call's default reactor.
template <typename Response>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 absl::StatusOr<Response> answer, Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  FinishWith(reactor, std::move(answer), response);
  return reactor;
}

// A received message's bytes, in one piece (gRPC hands them over as slices).
bool Flatten(const grpc::ByteBuffer& buffer, std::string* out) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return false;
  out->reserve(buffer.Length());
  for (const grpc::Slice& slice : slices) {
    out->append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return true;
}

}  // namespace

std::string PushSource(const grpc::ServerContextBase& context, const std::string& agent_id) {
  // A verified client certificate names the sender best.
  if (std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
      auth != nullptr && auth->IsPeerAuthenticated()) {
    std::vector<grpc::string_ref> identity = auth->GetPeerIdentity();
    if (!identity.empty()) return "cert:" + std::string(identity[0].data(), identity[0].size());
  }
  // Else its address, without the port: "ipv4:10.0.3.7:51234" -> "ip:10.0.3.7".
  const std::string peer = context.peer();
  std::string host = peer.substr(peer.find(':') + 1);
  if (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:")) {
    host = host.substr(0, host.rfind(':'));
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    // On this machine (tests, the demo, a sidecar) every agent shares the address: its name
    // tells them apart, and a local process is trusted as far as the machine is.
    if (!IsLoopbackHost(host)) return "ip:" + host;
  }
  return "local:" + agent_id;
}

IngestService::IngestService(Ingest& ingest, TokenFile* token)
    : ingest_(ingest),
      gate_(token, ingest.metrics().GetCounter(
                       "ncclwatch_aggregator_pushes_unauthenticated_total",
                       "Batch pushes refused for a missing or wrong bearer token.")),
      unparsable_(ingest.metrics().GetCounter(
          "ncclwatch_aggregator_pushes_unparsable_total",
          "Batch pushes refused because their bytes are not a NodeBatch message.")) {}

grpc::ServerUnaryReactor* IngestService::Push(grpc::CallbackServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  if (!gate_.Admits(*context)) return Finished(context, kPushUnauthenticated);
  auto parsed = std::make_shared<ArenaBatch>();
  std::string wire;
  if (!Flatten(*request, &wire) || !parsed->batch().ParseFromString(wire)) {
    unparsable_->Increment();
    return Finished(context, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                          "the pushed bytes are not a NodeBatch message"));
  }
  // Answered by Ingest's committer once the batch is durable; this thread goes back to gRPC
  // meanwhile. The bytes are only needed until PushAsync returns (they are logged by then).
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const ncclwatch::v1::NodeBatch& batch = parsed->batch();
  std::shared_ptr<const ncclwatch::v1::NodeBatch> shared(parsed, &batch);
  ingest_.PushAsync(
      std::move(shared), PushSource(*context, batch.agent_id()),
      [reactor, response](absl::StatusOr<ncclwatch::v1::BatchAck> ack) {
        if (!ack.ok()) {
          reactor->Finish(ToGrpcStatus(ack.status()));
          return;
        }
        bool own_buffer = false;
        reactor->Finish(grpc::SerializationTraits<ncclwatch::v1::BatchAck>::Serialize(
            *ack, response, &own_buffer));
      },
      wire);
  return reactor;
}

QueryService::QueryService(QueryEngine& query, Ingest& ingest, TokenFile* token,
                           ShardRouter* router)
    : query_(query),
      ingest_(ingest),
      router_(router),
      gate_(token, ingest.metrics().GetCounter(
                       "ncclwatch_aggregator_queries_unauthenticated_total",
                       "Query API calls refused for a missing or wrong bearer token.")),
      watch_dropped_(ingest.metrics().GetCounter(
          "ncclwatch_aggregator_watch_events_dropped_total",
          "Detection events dropped from a Watch stream whose client fell behind (oldest first; "
          "ingest never waits for a Watch client).")) {}

template <typename Response, typename AnswerFn>
grpc::ServerUnaryReactor* QueryService::Serve(grpc::CallbackServerContext* context,
                                              Response* response, AnswerFn&& answer) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  ingest_.AwaitAnalysed();  // what a caller was acknowledged, it sees
  return Answer(context, absl::StatusOr<Response>(answer()), response);
}

template <typename Response>
grpc::ServerUnaryReactor* QueryService::Route(grpc::CallbackServerContext* context,
                                              Response* response, std::string_view job,
                                              ShardRouter::Local<Response> local,
                                              ShardRouter::Remote<Response> remote,
                                              ShardRouter::Merge<Response> merge) {
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  return RouteAdmitted(context, response, job, std::move(local), std::move(remote),
                       std::move(merge));
}

template <typename Response>
grpc::ServerUnaryReactor* QueryService::RouteAdmitted(grpc::CallbackServerContext* context,
                                                      Response* response, std::string_view job,
                                                      ShardRouter::Local<Response> local,
                                                      ShardRouter::Remote<Response> remote,
                                                      ShardRouter::Merge<Response> merge) {
  // What a caller was acknowledged, it sees: this aggregator's answer waits for the analysis of
  // every batch acknowledged before the call.
  local = [this, local = std::move(local)]() {
    ingest_.AwaitAnalysed();
    return local();
  };
  if (router_ == nullptr || ShardRouter::Forwarded(*context)) {
    return Answer(context, local(), response);
  }
  if (!job.empty()) return router_->ForJob(context, job, response, local, remote);
  if (!merge) {
    merge = [](std::vector<Response>& answers, const std::vector<bool>&, Response* out) {
      // Every field of these responses is repeated: merging concatenates.
      for (const Response& a : answers) out->MergeFrom(a);
      return absl::OkStatus();
    };
  }
  return router_->ForAll(context, response, local, remote, merge);
}

// The Remote of a call forwarded unchanged: `Method` of the async stub with the same request.
#define NCCLWATCH_FORWARD(Method, Response)                                                       \
  [request](size_t, ncclwatch::v1::Query::StubInterface::async_interface* stub,                   \
            grpc::ClientContext* client, Response* out, std::function<void(grpc::Status)> done) { \
    stub->Method(client, request, out, std::move(done));                                          \
  }

grpc::ServerUnaryReactor* QueryService::ListStragglers(
    grpc::CallbackServerContext* context, const ncclwatch::v1::ListStragglersRequest* request,
    ncclwatch::v1::ListStragglersResponse* response) {
  using Response = ncclwatch::v1::ListStragglersResponse;
  return Route<Response>(
      context, response, request->job_id(),
      [this, request]() -> absl::StatusOr<Response> { return query_.ListStragglers(*request); },
      NCCLWATCH_FORWARD(ListStragglers, Response));
}

grpc::ServerUnaryReactor* QueryService::ListHangs(grpc::CallbackServerContext* context,
                                                  const ncclwatch::v1::ListHangsRequest* request,
                                                  ncclwatch::v1::ListHangsResponse* response) {
  using Response = ncclwatch::v1::ListHangsResponse;
  return Route<Response>(
      context, response, request->job_id(),
      [this, request]() -> absl::StatusOr<Response> {
        return query_.ListHangs(*request, absl::GetCurrentTimeNanos());
      },
      NCCLWATCH_FORWARD(ListHangs, Response));
}

grpc::ServerUnaryReactor* QueryService::ListDegraded(
    grpc::CallbackServerContext* context, const ncclwatch::v1::ListDegradedRequest* request,
    ncclwatch::v1::ListDegradedResponse* response) {
  using Response = ncclwatch::v1::ListDegradedResponse;
  return Route<Response>(
      context, response, request->job_id(),
      [this, request]() -> absl::StatusOr<Response> { return query_.ListDegraded(*request); },
      NCCLWATCH_FORWARD(ListDegraded, Response));
}

grpc::ServerUnaryReactor* QueryService::ListEvents(grpc::CallbackServerContext* context,
                                                   const ncclwatch::v1::ListEventsRequest* request,
                                                   ncclwatch::v1::ListEventsResponse* response) {
  using Response = ncclwatch::v1::ListEventsResponse;
  using Request = ncclwatch::v1::ListEventsRequest;
  const bool fan_out =
      router_ != nullptr && request->job_id().empty() && !ShardRouter::Forwarded(*context);
  if (!fan_out) {
    return Route<Response>(
        context, response, request->job_id(),
        [this, request]() { return query_.ListEvents(*request); },
        NCCLWATCH_FORWARD(ListEvents, Response));
  }
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  // Every aggregator reads on from its own cursor in the page token.
  absl::StatusOr<std::vector<std::string>> cursors =
      ParseEventCursors(request->page_token(), router_->peers().size());
  if (!cursors.ok()) return Finished(context, ToGrpcStatus(cursors.status()));
  auto requests = std::make_shared<std::vector<Request>>(cursors->size(), *request);
  for (size_t i = 0; i < requests->size(); ++i) (*requests)[i].set_page_token((*cursors)[i]);
  const size_t self = router_->self();
  return RouteAdmitted<Response>(
      context, response, "",
      [this, requests, self]() { return query_.ListEvents((*requests)[self]); },
      [requests](size_t peer, ncclwatch::v1::Query::StubInterface::async_interface* stub,
                 grpc::ClientContext* client, Response* out,
                 std::function<void(grpc::Status)> done) {
        stub->ListEvents(client, &(*requests)[peer], out, std::move(done));
      },
      [requests, cursors = *std::move(cursors), limit = request->limit()](
          std::vector<Response>& answers, const std::vector<bool>&, Response* out) {
        *out = MergeEvents(std::move(answers), cursors, limit);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* QueryService::GetStats(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::GetStatsRequest* request,
                                                 ncclwatch::v1::Stats* response) {
  using Response = ncclwatch::v1::Stats;
  return Route<Response>(
      context, response, "", [this]() -> absl::StatusOr<Response> { return ingest_.Stats(); },
      NCCLWATCH_FORWARD(GetStats, Response),
      [](std::vector<Response>& answers, const std::vector<bool>&, Response* out) {
        for (const Response& a : answers) {
          out->set_batches_stored(out->batches_stored() + a.batches_stored());
          out->set_batches_duplicate(out->batches_duplicate() + a.batches_duplicate());
          out->set_reports_ingested(out->reports_ingested() + a.reports_ingested());
          out->set_reports_rejected(out->reports_rejected() + a.reports_rejected());
          out->set_groups_completed(out->groups_completed() + a.groups_completed());
          out->set_groups_expired(out->groups_expired() + a.groups_expired());
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* QueryService::QueryRange(grpc::CallbackServerContext* context,
                                                   const ncclwatch::v1::QueryRangeRequest* request,
                                                   ncclwatch::v1::QueryRangeResponse* response) {
  using Response = ncclwatch::v1::QueryRangeResponse;
  using Request = ncclwatch::v1::QueryRangeRequest;
  const std::string job = SelectorJob(request->selector());
  const bool fan_out = router_ != nullptr && job.empty() && !ShardRouter::Forwarded(*context);
  if (!fan_out) {
    return Route<Response>(
        context, response, job,
        [this, request]() { return query_.QueryRange(*request, absl::GetCurrentTimeNanos()); },
        NCCLWATCH_FORWARD(QueryRange, Response));
  }
  if (!gate_.Admits(*context)) return Finished(context, kQueryUnauthenticated);
  // Series are paged aggregator by aggregator.
  absl::StatusOr<SeriesPage> page = ParseSeriesPage(request->page_token(), router_->peers().size());
  if (!page.ok()) return Finished(context, ToGrpcStatus(page.status()));
  const size_t first = page->peer;
  const std::string first_token = page->token;
  auto requests = std::make_shared<std::vector<Request>>(router_->peers().size(), *request);
  for (size_t i = 0; i < requests->size(); ++i) {
    (*requests)[i].set_page_token(i == first ? first_token : "");
  }
  const size_t self = router_->self();
  const size_t max_series = request->max_series() == 0 ? 1000 : request->max_series();
  return RouteAdmitted<Response>(
      context, response, "",
      [this, requests, self, first]() -> absl::StatusOr<Response> {
        if (self < first) return Response();
        return query_.QueryRange((*requests)[self], absl::GetCurrentTimeNanos());
      },
      [requests, first](size_t peer, ncclwatch::v1::Query::StubInterface::async_interface* stub,
                        grpc::ClientContext* client, Response* out,
                        std::function<void(grpc::Status)> done) {
        if (peer < first) return done(grpc::Status::OK);  // paged past already
        stub->QueryRange(client, &(*requests)[peer], out, std::move(done));
      },
      [requests, first, first_token, max_series](std::vector<Response>& answers,
                                                 const std::vector<bool>& answered, Response* out) {
        // The aggregator whose page the token continues must answer, or its series would be
        // skipped for good.
        if (!first_token.empty() && !answered[first]) {
          return absl::UnavailableError(
              "the aggregator this page continues on is unreachable: ask again with the same "
              "page_token");
        }
        for (size_t i = first; i < answers.size(); ++i) {
          Response& a = answers[i];
          const bool fits = static_cast<size_t>(out->series_size() + a.series_size()) <= max_series;
          if (out->series_size() > 0 && (!fits || a.truncated())) {
            // Whole answers only: this peer's page starts the next one.
            out->set_truncated(true);
            out->set_next_page_token(SeriesPageToken(i, ""));
            return absl::OkStatus();
          }
          for (auto& ts : *a.mutable_series()) *out->add_series() = std::move(ts);
          if (a.truncated()) {
            out->set_truncated(true);
            out->set_next_page_token(SeriesPageToken(i, a.next_page_token()));
            return absl::OkStatus();
          }
        }
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* QueryService::GetTrace(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::GetTraceRequest* request,
                                                 ncclwatch::v1::GetTraceResponse* response) {
  using Response = ncclwatch::v1::GetTraceResponse;
  auto local = [this, request]() { return query_.GetTrace(*request, absl::GetCurrentTimeNanos()); };
  // A trace is of one job's communicator, which the job's owner has; without a job id it is
  // refused here as anywhere.
  if (request->job_id().empty()) return Serve(context, response, local);
  return Route<Response>(context, response, request->job_id(), local,
                         NCCLWATCH_FORWARD(GetTrace, Response));
}

grpc::ServerUnaryReactor* QueryService::ListJobs(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::ListJobsRequest* request,
                                                 ncclwatch::v1::ListJobsResponse* response) {
  using Response = ncclwatch::v1::ListJobsResponse;
  return Route<Response>(
      context, response, "", [this]() -> absl::StatusOr<Response> { return query_.ListJobs(); },
      NCCLWATCH_FORWARD(ListJobs, Response),
      [](std::vector<Response>& answers, const std::vector<bool>&, Response* out) {
        *out = MergeJobs(std::move(answers));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* QueryService::ListComms(grpc::CallbackServerContext* context,
                                                  const ncclwatch::v1::ListCommsRequest* request,
                                                  ncclwatch::v1::ListCommsResponse* response) {
  using Response = ncclwatch::v1::ListCommsResponse;
  return Route<Response>(
      context, response, request->job_id(),
      [this, request]() -> absl::StatusOr<Response> { return query_.ListComms(*request); },
      NCCLWATCH_FORWARD(ListComms, Response));
}

#undef NCCLWATCH_FORWARD

grpc::ServerWriteReactor<ncclwatch::v1::Event>* QueryService::Watch(
    grpc::CallbackServerContext* context, const ncclwatch::v1::WatchRequest*) {
  if (!gate_.Admits(*context)) return RefuseWatch(kQueryUnauthenticated);
  // A sharded service's clients see every aggregator's events; a peer's relay only this one's.
  const bool fleet = router_ != nullptr && !ShardRouter::Forwarded(*context);
  return StartWatch(fleet ? router_->fleet_events() : ingest_.events(), watch_dropped_);
}

}  // namespace ncclwatch::aggregator
