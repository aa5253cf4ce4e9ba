#include "aggregator/server/services.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "aggregator/server/watch.h"
#include "common/daemon.h"
#include "grpcpp/security/auth_context.h"

namespace ncclwatch::aggregator {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  if (absl::IsInvalidArgument(s)) code = grpc::StatusCode::INVALID_ARGUMENT;
  if (absl::IsUnavailable(s)) code = grpc::StatusCode::UNAVAILABLE;
  if (absl::IsResourceExhausted(s)) code = grpc::StatusCode::RESOURCE_EXHAUSTED;
  if (absl::IsDataLoss(s)) code = grpc::StatusCode::DATA_LOSS;
  if (absl::IsNotFound(s)) code = grpc::StatusCode::NOT_FOUND;
  return grpc::Status(code, std::string(s.message()));
}

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

// Ends a unary call with `answer`: its value as the response, or its error as the status.
template <typename Response>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 absl::StatusOr<Response> answer, Response* response) {
  if (!answer.ok()) return Finished(context, ToGrpc(answer.status()));
  *response = *std::move(answer);
  return Finished(context);
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
                       "Batch pushes refused for a missing or wrong bearer token.")) {}

grpc::ServerUnaryReactor* IngestService::Push(grpc::CallbackServerContext* context,
                                              const ncclwatch::v1::NodeBatch* request,
                                              ncclwatch::v1::BatchAck* response) {
  if (!gate_.Admits(*context)) return Finished(context, kPushUnauthenticated);
  return Answer(context, ingest_.Push(*request, PushSource(*context, request->agent_id())),
                response);
}

QueryService::QueryService(QueryEngine& query, Ingest& ingest, TokenFile* token)
    : query_(query),
      ingest_(ingest),
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
  return Answer(context, absl::StatusOr<Response>(answer()), response);
}

grpc::ServerUnaryReactor* QueryService::ListStragglers(
    grpc::CallbackServerContext* context, const ncclwatch::v1::ListStragglersRequest* request,
    ncclwatch::v1::ListStragglersResponse* response) {
  return Serve(context, response, [&] { return query_.ListStragglers(*request); });
}

grpc::ServerUnaryReactor* QueryService::ListHangs(grpc::CallbackServerContext* context,
                                                  const ncclwatch::v1::ListHangsRequest* request,
                                                  ncclwatch::v1::ListHangsResponse* response) {
  return Serve(context, response,
               [&] { return query_.ListHangs(*request, absl::GetCurrentTimeNanos()); });
}

grpc::ServerUnaryReactor* QueryService::ListDegraded(
    grpc::CallbackServerContext* context, const ncclwatch::v1::ListDegradedRequest* request,
    ncclwatch::v1::ListDegradedResponse* response) {
  return Serve(context, response, [&] { return query_.ListDegraded(*request); });
}

grpc::ServerUnaryReactor* QueryService::ListEvents(grpc::CallbackServerContext* context,
                                                   const ncclwatch::v1::ListEventsRequest* request,
                                                   ncclwatch::v1::ListEventsResponse* response) {
  return Serve(context, response, [&] { return query_.ListEvents(*request); });
}

grpc::ServerUnaryReactor* QueryService::GetStats(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::GetStatsRequest*,
                                                 ncclwatch::v1::Stats* response) {
  return Serve(context, response, [&] { return ingest_.Stats(); });
}

grpc::ServerUnaryReactor* QueryService::QueryRange(grpc::CallbackServerContext* context,
                                                   const ncclwatch::v1::QueryRangeRequest* request,
                                                   ncclwatch::v1::QueryRangeResponse* response) {
  return Serve(context, response,
               [&] { return query_.QueryRange(*request, absl::GetCurrentTimeNanos()); });
}

grpc::ServerUnaryReactor* QueryService::GetTrace(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::GetTraceRequest* request,
                                                 ncclwatch::v1::GetTraceResponse* response) {
  return Serve(context, response,
               [&] { return query_.GetTrace(*request, absl::GetCurrentTimeNanos()); });
}

grpc::ServerUnaryReactor* QueryService::ListJobs(grpc::CallbackServerContext* context,
                                                 const ncclwatch::v1::ListJobsRequest*,
                                                 ncclwatch::v1::ListJobsResponse* response) {
  return Serve(context, response, [&] { return query_.ListJobs(); });
}

grpc::ServerUnaryReactor* QueryService::ListComms(grpc::CallbackServerContext* context,
                                                  const ncclwatch::v1::ListCommsRequest* request,
                                                  ncclwatch::v1::ListCommsResponse* response) {
  return Serve(context, response, [&] { return query_.ListComms(*request); });
}

grpc::ServerWriteReactor<ncclwatch::v1::Event>* QueryService::Watch(
    grpc::CallbackServerContext* context, const ncclwatch::v1::WatchRequest*) {
  if (!gate_.Admits(*context)) return RefuseWatch(kQueryUnauthenticated);
  return StartWatch(ingest_.events(), watch_dropped_);
}

}  // namespace ncclwatch::aggregator
