// A ReportSink that fans every call out to several sinks, in the spirit of dynolog's
// CompositeLogger: the plugin's one sink when offline mode writes files beside the agent stream.
//
//   Submit                   every sink, in order; each but the last gets a copy, the last one
//                            the original (put the sink that keeps reports, the agent client, last)
//   OnOperation              only the sinks whose wants_operations() was true at construction
//   OnCommunicatorFinalized  every sink, in order
//   OnRoundEnd               every sink, in order
//   Drain                    every sink in order, within one shared deadline; true if all were
//   dropped, outages         the sums over the sinks (a sink that never drops adds 0)
//   wants_operations         whether any sink wants them
//
// Ownership: the sinks are not owned and must outlive the composite. Thread safety: as the sinks
// (see report_sink.h); the composite adds no state of its own after construction.
#ifndef NCCLWATCH_PLUGIN_COMPOSITE_SINK_H_
#define NCCLWATCH_PLUGIN_COMPOSITE_SINK_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include "plugin/report_sink.h"

namespace ncclwatch::plugin {

class CompositeSink : public ReportSink {
 public:
  // `sinks`: at least one, none null.
  explicit CompositeSink(std::vector<ReportSink*> sinks);

  void Submit(ncclwatch::v1::RankReport report) override;
  bool Drain(std::chrono::milliseconds timeout) override;
  uint64_t dropped() const override;
  uint64_t outages() const override;

  bool wants_operations() const override { return !operation_sinks_.empty(); }
  void OnOperation(const CommState& comm, const Completion& c, int64_t drained_unix_ns) override;
  void OnCommunicatorFinalized(const CommState& comm) override;
  void OnRoundEnd() override;

 private:
  const std::vector<ReportSink*> sinks_;
  std::vector<ReportSink*> operation_sinks_;  // those that wanted operations at construction
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_COMPOSITE_SINK_H_
