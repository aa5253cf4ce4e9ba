// The aggregator's gRPC services: Ingest (agents push batches) and Query (findings, events,
// series, traces, stats and a server-streaming Watch of detection events). Thin adapters: each
// RPC checks the caller's bearer token in one place (Serve) and hands the request to Ingest or to
// the QueryEngine, the plain handlers that tests call directly.
#ifndef NCCLWATCH_AGGREGATOR_SERVER_SERVICES_H_
#define NCCLWATCH_AGGREGATOR_SERVER_SERVICES_H_

#include <memory>
#include <string>

#include "aggregator/ingest/ingest.h"
#include "aggregator/query/query.h"
#include "aggregator/server/shard_router.h"
#include "common/metrics.h"
#include "common/rpc/token.h"
#include "ncclwatch/v1/ingest.grpc.pb.h"
#include "ncclwatch/v1/query.grpc.pb.h"

namespace ncclwatch::aggregator {

// Who pushed a batch, as authenticated: "cert:<identity>" for a verified client certificate,
// "ip:<address>" for a peer beyond loopback, "local:<agent_id>" on loopback or a unix socket.
std::string PushSource(const grpc::ServerContextBase& context, const std::string& agent_id);

// Push is served from its bytes as received (a raw method): the batch is parsed here, onto an
// arena of its own, and those same bytes go to the batch log (Store::WriteBatchIfNew) instead of
// an encoding of the parsed batch.
class IngestService final
    : public ncclwatch::v1::Ingest::WithRawCallbackMethod_Push<ncclwatch::v1::Ingest::Service> {
 public:
  // With `token` (optional, outlives the service), a push without `authorization: Bearer
  // <token>` is refused (UNAUTHENTICATED) and counted.
  explicit IngestService(Ingest& ingest, TokenFile* token = nullptr);
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;

 private:
  Ingest& ingest_;
  BearerGate gate_;
  Counter* unparsable_;
};

class QueryService final : public ncclwatch::v1::Query::CallbackService {
 public:
  // With `token` (optional, outlives the service), every call needs `authorization: Bearer
  // <token>` (UNAUTHENTICATED otherwise, counted). `ingest` answers GetStats and carries the
  // event bus Watch subscribes to.
  // With `router` (optional, outlives the service), calls are answered for every aggregator of
  // the sharded service (shard_router.h).
  QueryService(QueryEngine& query, Ingest& ingest, TokenFile* token = nullptr,
               ShardRouter* router = nullptr);
  grpc::ServerUnaryReactor* ListStragglers(
      grpc::CallbackServerContext* context, const ncclwatch::v1::ListStragglersRequest* request,
      ncclwatch::v1::ListStragglersResponse* response) override;
  grpc::ServerUnaryReactor* ListHangs(grpc::CallbackServerContext* context,
                                      const ncclwatch::v1::ListHangsRequest* request,
                                      ncclwatch::v1::ListHangsResponse* response) override;
  grpc::ServerUnaryReactor* ListDegraded(grpc::CallbackServerContext* context,
                                         const ncclwatch::v1::ListDegradedRequest* request,
                                         ncclwatch::v1::ListDegradedResponse* response) override;
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* context,
                                       const ncclwatch::v1::ListEventsRequest* request,
                                       ncclwatch::v1::ListEventsResponse* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const ncclwatch::v1::GetStatsRequest* request,
                                     ncclwatch::v1::Stats* response) override;
  grpc::ServerUnaryReactor* QueryRange(grpc::CallbackServerContext* context,
                                       const ncclwatch::v1::QueryRangeRequest* request,
                                       ncclwatch::v1::QueryRangeResponse* response) override;
  grpc::ServerUnaryReactor* GetTrace(grpc::CallbackServerContext* context,
                                     const ncclwatch::v1::GetTraceRequest* request,
                                     ncclwatch::v1::GetTraceResponse* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const ncclwatch::v1::ListJobsRequest* request,
                                     ncclwatch::v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* ListComms(grpc::CallbackServerContext* context,
                                      const ncclwatch::v1::ListCommsRequest* request,
                                      ncclwatch::v1::ListCommsResponse* response) override;
  grpc::ServerWriteReactor<ncclwatch::v1::Event>* Watch(
      grpc::CallbackServerContext* context, const ncclwatch::v1::WatchRequest* request) override;

 private:
  // Answers a unary call with what `answer()` returns (a response, or a StatusOr of one), once
  // the caller's token is admitted.
  template <typename Response, typename Answer>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context, Response* response,
                                  Answer&& answer);

  // Answers a unary call, once the caller's token is admitted, here (`local`), or, with a router
  // and unless a peer forwarded it, on `job`'s owner, or on every aggregator merged by `merge`
  // (default: concatenated) for no job. RouteAdmitted: the token was checked already.
  template <typename Response>
  grpc::ServerUnaryReactor* Route(grpc::CallbackServerContext* context, Response* response,
                                  std::string_view job, ShardRouter::Local<Response> local,
                                  ShardRouter::Remote<Response> remote,
                                  ShardRouter::Merge<Response> merge = nullptr);
  template <typename Response>
  grpc::ServerUnaryReactor* RouteAdmitted(grpc::CallbackServerContext* context, Response* response,
                                          std::string_view job, ShardRouter::Local<Response> local,
                                          ShardRouter::Remote<Response> remote,
                                          ShardRouter::Merge<Response> merge = nullptr);

  QueryEngine& query_;
  Ingest& ingest_;
  ShardRouter* router_;
  BearerGate gate_;
  Counter* watch_dropped_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVER_SERVICES_H_
