// Where the flusher hands finished reports. The production sink is AgentClient (gRPC stream to the
// node agent); tests use an in-memory sink.
#ifndef NCCLWATCH_PLUGIN_REPORT_SINK_H_
#define NCCLWATCH_PLUGIN_REPORT_SINK_H_

#include <chrono>
#include <cstdint>

#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch::plugin {

class ReportSink {
 public:
  virtual ~ReportSink() = default;
  // Takes a report for delivery. Never blocks on the network; may drop (and count) when full.
  virtual void Submit(ncclwatch::v1::RankReport report) = 0;
  // Waits until everything submitted so far has been delivered (for AgentClient: written and the
  // stream closed gracefully, so the agent has read it), or `timeout` passes, or delivery is
  // currently impossible (no agent). Returns true if everything was delivered.
  virtual bool Drain(std::chrono::milliseconds timeout) = 0;
  // Reports discarded so far.
  virtual uint64_t dropped() const = 0;
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_REPORT_SINK_H_
