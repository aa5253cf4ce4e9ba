#include "agent/agent_service.h"

#include "common/log.h"
#include "proto/validate.h"

namespace ncclwatch::agent {

ReportHandler::ReportHandler(std::string node, Forwarder& forwarder, MetricRegistry& metrics)
    : node_(std::move(node)),
      forwarder_(forwarder),
      metrics_(metrics),
      received_(metrics.GetCounter("ncclwatch_agent_reports_received_total",
                                   "Reports received from plugins.")),
      accepted_(metrics.GetCounter("ncclwatch_agent_reports_accepted_total",
                                   "Reports that passed validation and were queued.")),
      streams_(metrics.GetGauge("ncclwatch_agent_plugin_streams",
                                "Plugin streams currently connected.")) {
  // Pre-create the common rejection reasons so dashboards see zeros, not gaps.
  for (const char* reason : {"bad_rank", "bad_nranks", "too_large"}) {
    metrics.GetCounter("ncclwatch_agent_reports_rejected_total",
                       "Reports rejected by validation, by reason.", {{"reason", reason}});
  }
}

bool ReportHandler::Handle(ncclwatch::v1::RankReport report) {
  received_->Increment();
  ReportVerdict verdict = ValidateReport(report);
  if (!verdict.ok) {
    metrics_
        .GetCounter("ncclwatch_agent_reports_rejected_total",
                    "Reports rejected by validation, by reason.", {{"reason", verdict.reason}})
        ->Increment();
    LogDebug("rejected report from pid %d: %s", report.identity().pid(), verdict.detail);
    return false;
  }
  report.mutable_identity()->set_node(node_);
  forwarder_.Enqueue(std::move(report));
  accepted_->Increment();
  return true;
}

void ReportHandler::StreamOpened() { streams_->Add(1); }
void ReportHandler::StreamClosed() { streams_->Add(-1); }

namespace {

// One per plugin stream: read, hand over, read again; deletes itself when gRPC is done with it.
class ReportReader final : public grpc::ServerReadReactor<ncclwatch::v1::RankReport> {
 public:
  ReportReader(ReportHandler& handler, ncclwatch::v1::StreamSummary* summary)
      : handler_(handler), summary_(summary) {
    handler_.StreamOpened();
    StartRead(&report_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the plugin closed its side (or the stream broke)
      Finish(grpc::Status::OK);
      return;
    }
    if (handler_.Handle(std::move(report_))) {
      summary_->set_accepted(summary_->accepted() + 1);
    } else {
      summary_->set_rejected(summary_->rejected() + 1);
    }
    report_.Clear();
    StartRead(&report_);
  }

  void OnDone() override {
    handler_.StreamClosed();
    delete this;
  }

 private:
  ReportHandler& handler_;
  ncclwatch::v1::StreamSummary* summary_;
  ncclwatch::v1::RankReport report_;
};

}  // namespace

grpc::ServerReadReactor<ncclwatch::v1::RankReport>* AgentService::StreamReports(
    grpc::CallbackServerContext*, ncclwatch::v1::StreamSummary* summary) {
  return new ReportReader(handler_, summary);
}

}  // namespace ncclwatch::agent
