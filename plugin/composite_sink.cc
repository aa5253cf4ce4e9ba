#include "plugin/composite_sink.h"

#include <algorithm>
#include <utility>

namespace ncclwatch::plugin {

CompositeSink::CompositeSink(std::vector<ReportSink*> sinks) : sinks_(std::move(sinks)) {
  for (ReportSink* sink : sinks_) {
    if (sink->wants_operations()) operation_sinks_.push_back(sink);
  }
}

void CompositeSink::Submit(ncclwatch::v1::RankReport report) {
  if (sinks_.empty()) return;
  for (size_t i = 0; i + 1 < sinks_.size(); ++i) sinks_[i]->Submit(report);
  sinks_.back()->Submit(std::move(report));
}

bool CompositeSink::Drain(std::chrono::milliseconds timeout) {
  // One deadline for all: the caller (the last finalize, before NCCL unloads the library) waits
  // `timeout` at most (to the millisecond), whatever the number of sinks.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool all = true;
  for (ReportSink* sink : sinks_) {
    // Rounded up: a sink that follows sinks which returned at once gets the whole `timeout`.
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    all = sink->Drain(std::max(left, std::chrono::milliseconds(0))) && all;
  }
  return all;
}

uint64_t CompositeSink::outages() const {
  uint64_t n = 0;
  for (const ReportSink* sink : sinks_) n += sink->outages();
  return n;
}

uint64_t CompositeSink::dropped() const {
  uint64_t n = 0;
  for (const ReportSink* sink : sinks_) n += sink->dropped();
  return n;
}

void CompositeSink::OnOperation(const CommState& comm, const Completion& c,
                                int64_t drained_unix_ns) {
  for (ReportSink* sink : operation_sinks_) sink->OnOperation(comm, c, drained_unix_ns);
}

void CompositeSink::OnCommunicatorFinalized(const CommState& comm) {
  for (ReportSink* sink : sinks_) sink->OnCommunicatorFinalized(comm);
}

void CompositeSink::OnRoundEnd() {
  for (ReportSink* sink : sinks_) sink->OnRoundEnd();
}

}  // namespace ncclwatch::plugin
