// Test only: a Query service with canned answers, served by a real gRPC server on 127.0.0.1 port
// 0, so that the CLI's commands are tested through the same stub, channel and wire as in use.
//
//   FakeQuery fake;
//   fake.stragglers = {empty, one};          // the i-th call gets the i-th answer, the last
//   repeats fake.watch_events = {...};               // written on each Watch, in order
//   FakeQueryServer server(&fake);
//   auto stub = server.NewStub();
//
// Configure the answers before the server starts; read the recorded calls after the command
// returned (the recorders are guarded by a mutex, the answers are read-only while serving).
#ifndef NCCLWATCH_AGGREGATOR_CLI_FAKE_QUERY_TEST_UTIL_H_
#define NCCLWATCH_AGGREGATOR_CLI_FAKE_QUERY_TEST_UTIL_H_

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/sync.h"
#include "grpcpp/grpcpp.h"
#include "ncclwatch/v1/query.grpc.pb.h"

namespace ncclwatch::cli {

class FakeQuery final : public ncclwatch::v1::Query::CallbackService {
 public:
  // Canned answers; an empty list answers with an empty response.
  std::vector<ncclwatch::v1::ListStragglersResponse> stragglers;
  std::vector<ncclwatch::v1::ListHangsResponse> hangs;
  std::vector<ncclwatch::v1::ListDegradedResponse> degraded;
  std::vector<ncclwatch::v1::ListEventsResponse> events;
  std::vector<ncclwatch::v1::ListJobsResponse> jobs;
  std::vector<ncclwatch::v1::ListCommsResponse> comms;
  std::vector<ncclwatch::v1::QueryRangeResponse> query_range;
  std::vector<ncclwatch::v1::GetTraceResponse> trace;
  // Fault injection: every unary call fails with this status instead.
  grpc::Status unary_status = grpc::Status::OK;
  // When set, a call (Watch included) without "authorization: Bearer <token>" fails with
  // UNAUTHENTICATED "missing or wrong token".
  std::string token;
  // Each Watch writes these, one at a time, then finishes with `watch_end`, or without it stays
  // open until the client cancels or its deadline passes.
  std::vector<ncclwatch::v1::Event> watch_events;
  std::optional<grpc::Status> watch_end;

  // How many calls each method ("ListStragglers", "Watch", ...) received.
  int calls(const std::string& method) const {
    MutexLock lock(&mu_);
    auto it = calls_.find(method);
    return it == calls_.end() ? 0 : it->second;
  }
  ncclwatch::v1::ListEventsRequest last_events_request() const {
    MutexLock lock(&mu_);
    return events_request_;
  }
  ncclwatch::v1::GetTraceRequest last_trace_request() const {
    MutexLock lock(&mu_);
    return trace_request_;
  }
  ncclwatch::v1::QueryRangeRequest last_query_request() const {
    MutexLock lock(&mu_);
    return query_request_;
  }

  grpc::ServerUnaryReactor* ListStragglers(
      grpc::CallbackServerContext* context, const ncclwatch::v1::ListStragglersRequest* request,
      ncclwatch::v1::ListStragglersResponse* response) override {
    return Answer(context, "ListStragglers", stragglers, response);
  }
  grpc::ServerUnaryReactor* ListHangs(grpc::CallbackServerContext* context,
                                      const ncclwatch::v1::ListHangsRequest* request,
                                      ncclwatch::v1::ListHangsResponse* response) override {
    return Answer(context, "ListHangs", hangs, response);
  }
  grpc::ServerUnaryReactor* ListDegraded(grpc::CallbackServerContext* context,
                                         const ncclwatch::v1::ListDegradedRequest* request,
                                         ncclwatch::v1::ListDegradedResponse* response) override {
    return Answer(context, "ListDegraded", degraded, response);
  }
  grpc::ServerUnaryReactor* ListEvents(grpc::CallbackServerContext* context,
                                       const ncclwatch::v1::ListEventsRequest* request,
                                       ncclwatch::v1::ListEventsResponse* response) override {
    Record(&events_request_, *request);
    return Answer(context, "ListEvents", events, response);
  }
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const ncclwatch::v1::ListJobsRequest* request,
                                     ncclwatch::v1::ListJobsResponse* response) override {
    return Answer(context, "ListJobs", jobs, response);
  }
  grpc::ServerUnaryReactor* ListComms(grpc::CallbackServerContext* context,
                                      const ncclwatch::v1::ListCommsRequest* request,
                                      ncclwatch::v1::ListCommsResponse* response) override {
    return Answer(context, "ListComms", comms, response);
  }
  grpc::ServerUnaryReactor* QueryRange(grpc::CallbackServerContext* context,
                                       const ncclwatch::v1::QueryRangeRequest* request,
                                       ncclwatch::v1::QueryRangeResponse* response) override {
    Record(&query_request_, *request);
    return Answer(context, "QueryRange", query_range, response);
  }
  grpc::ServerUnaryReactor* GetTrace(grpc::CallbackServerContext* context,
                                     const ncclwatch::v1::GetTraceRequest* request,
                                     ncclwatch::v1::GetTraceResponse* response) override {
    Record(&trace_request_, *request);
    return Answer(context, "GetTrace", trace, response);
  }

  grpc::ServerWriteReactor<ncclwatch::v1::Event>* Watch(
      grpc::CallbackServerContext* context, const ncclwatch::v1::WatchRequest*) override {
    Count("Watch");
    if (!Authorized(context)) return new Writer({}, Unauthenticated());
    return new Writer(watch_events, watch_end);
  }

 private:
  // Writes `events` one at a time after the initial metadata, then finishes with `end` (if set);
  // finishes CANCELLED when the client cancels. Deletes itself when the call is done. What to do
  // next is decided under the lock and started outside it (gRPC may run reactions inline), with
  // HandOff/TakeOver marking the reactor's moves between threads for TSan (common/sync.h).
  class Writer final : public grpc::ServerWriteReactor<ncclwatch::v1::Event> {
   public:
    Writer(std::vector<ncclwatch::v1::Event> events, std::optional<grpc::Status> end)
        : events_(std::move(events)), end_(std::move(end)) {
      HandOff(this);
      StartSendInitialMetadata();
      Next();
    }
    void OnWriteDone(bool ok) override {
      TakeOver(this);
      {
        MutexLock lock(&mu_);
        writing_ = false;
        if (!ok) cancelled_ = true;
      }
      Next();
    }
    void OnCancel() override {
      TakeOver(this);
      {
        MutexLock lock(&mu_);
        cancelled_ = true;
      }
      Next();
    }
    void OnDone() override {
      TakeOver(this);
      delete this;
    }

   private:
    void Next() {
      const ncclwatch::v1::Event* to_write = nullptr;
      std::optional<grpc::Status> finish;
      {
        MutexLock lock(&mu_);
        if (writing_ || finished_) return;
        if (cancelled_) {
          finish = grpc::Status::CANCELLED;
        } else if (next_ < events_.size()) {
          writing_ = true;
          to_write = &events_[next_++];
        } else if (end_.has_value()) {
          finish = end_;
        }
        finished_ = finish.has_value();
      }
      HandOff(this);
      if (to_write != nullptr) StartWrite(to_write);
      if (finish.has_value()) Finish(*finish);
    }

    Mutex mu_;
    const std::vector<ncclwatch::v1::Event> events_;
    const std::optional<grpc::Status> end_;
    size_t next_ ABSL_GUARDED_BY(mu_) = 0;
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
    bool finished_ ABSL_GUARDED_BY(mu_) = false;
  };

  static grpc::Status Unauthenticated() {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong token");
  }

  bool Authorized(grpc::CallbackServerContext* context) const {
    if (token.empty()) return true;
    const auto& metadata = context->client_metadata();
    auto it = metadata.find("authorization");
    return it != metadata.end() &&
           std::string(it->second.data(), it->second.size()) == "Bearer " + token;
  }

  int Count(const std::string& method) {
    MutexLock lock(&mu_);
    return calls_[method]++;
  }

  template <typename Request>
  void Record(Request* slot, const Request& request) {
    MutexLock lock(&mu_);
    *slot = request;
  }

  // The `n`-th answer of `answers` (the last one repeating) for the n-th call of `method`.
  template <typename Response>
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const std::string& method,
                                   const std::vector<Response>& answers, Response* response) {
    const int n = Count(method);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (!Authorized(context)) {
      reactor->Finish(Unauthenticated());
    } else if (!unary_status.ok()) {
      reactor->Finish(unary_status);
    } else {
      if (!answers.empty()) {
        *response = answers[std::min<size_t>(static_cast<size_t>(n), answers.size() - 1)];
      }
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

  mutable Mutex mu_;
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
  ncclwatch::v1::ListEventsRequest events_request_ ABSL_GUARDED_BY(mu_);
  ncclwatch::v1::GetTraceRequest trace_request_ ABSL_GUARDED_BY(mu_);
  ncclwatch::v1::QueryRangeRequest query_request_ ABSL_GUARDED_BY(mu_);
};

// `service` served on 127.0.0.1, port 0, until destroyed.
class FakeQueryServer {
 public:
  explicit FakeQueryServer(FakeQuery* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
  }
  ~FakeQueryServer() { Shutdown(); }

  // "127.0.0.1:<port>"; port 0 if the server did not start.
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  std::unique_ptr<ncclwatch::v1::Query::Stub> NewStub() const {
    return ncclwatch::v1::Query::NewStub(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
  }
  // Stops serving; open calls are cancelled. Idempotent.
  void Shutdown() {
    if (server_ != nullptr) {
      server_->Shutdown();
      server_.reset();
    }
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace ncclwatch::cli

#endif  // NCCLWATCH_AGGREGATOR_CLI_FAKE_QUERY_TEST_UTIL_H_
