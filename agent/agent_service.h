// The agent's gRPC service for plugins: one client stream per rank process
// (ncclwatch.v1.Agent/StreamReports). Each report is validated, stamped with this node's name and
// handed to the Forwarder. Rejections are counted by reason and never end the stream.
//
// Reports stay in the bytes their plugin serialized: the stream is read raw, a report is decoded
// (on a per-thread arena) only to be validated, and the agent's identity fields are appended as a
// second, partial `identity` field, which protobuf merges into the first when the aggregator
// decodes it. Nothing is re-encoded, which halves the agent's CPU per report.
#ifndef NCCLWATCH_AGENT_AGENT_SERVICE_H_
#define NCCLWATCH_AGENT_AGENT_SERVICE_H_

#include <string>

#include "agent/forwarder.h"
#include "common/metrics.h"
#include "ncclwatch/v1/report.grpc.pb.h"

namespace ncclwatch::agent {

// Plain handler, callable without gRPC (tests); the service below adapts streams onto it.
class ReportHandler {
 public:
  ReportHandler(std::string node, Forwarder& forwarder, MetricRegistry& metrics);
  // Takes one serialized RankReport; returns true if it was accepted.
  bool Handle(std::string report);
  void StreamOpened();
  void StreamClosed();

 private:
  void Reject(const std::string& reason);

  const std::string node_;
  std::string node_stamp_;  // a serialized RankReport holding only identity.node
  Forwarder& forwarder_;
  MetricRegistry& metrics_;
  Counter* received_;
  Counter* accepted_;
  Gauge* streams_;
};

class AgentService final
    : public ncclwatch::v1::Agent::WithRawCallbackMethod_StreamReports<
          ncclwatch::v1::Agent::Service> {
 public:
  explicit AgentService(ReportHandler& handler) : handler_(handler) {}
  grpc::ServerReadReactor<grpc::ByteBuffer>* StreamReports(grpc::CallbackServerContext* context,
                                                           grpc::ByteBuffer* summary) override;

 private:
  ReportHandler& handler_;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_AGENT_SERVICE_H_
