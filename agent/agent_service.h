// The agent's gRPC service for plugins: one client stream per rank process
// (ncclwatch.v1.Agent/StreamReports). Each report is validated, stamped with this node's name and
// handed to the Forwarder. Rejections are counted by reason and never end the stream.
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
  // Returns true if the report was accepted.
  bool Handle(ncclwatch::v1::RankReport report);
  void StreamOpened();
  void StreamClosed();

 private:
  const std::string node_;
  Forwarder& forwarder_;
  MetricRegistry& metrics_;
  Counter* received_;
  Counter* accepted_;
  Gauge* streams_;
};

class AgentService final : public ncclwatch::v1::Agent::CallbackService {
 public:
  explicit AgentService(ReportHandler& handler) : handler_(handler) {}
  grpc::ServerReadReactor<ncclwatch::v1::RankReport>* StreamReports(
      grpc::CallbackServerContext* context, ncclwatch::v1::StreamSummary* summary) override;

 private:
  ReportHandler& handler_;
};

}  // namespace ncclwatch::agent

#endif  // NCCLWATCH_AGENT_AGENT_SERVICE_H_
