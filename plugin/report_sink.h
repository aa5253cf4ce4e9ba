// Where the flusher hands what it produces. Every sink takes finished reports (Submit); a sink may
// also observe the flusher's work as it happens through the optional hooks below, whose defaults
// do nothing. The production sink is AgentClient (gRPC stream to the node agent); in offline mode
// (NCCLWATCH_DUMP_DIR) a CompositeSink (composite_sink.h) puts the OfflineDump beside it. Tests
// use in-memory sinks.
//
// Thread safety: the flusher makes every call under its own lock, so a sink sees one call at a
// time, from the flusher thread or from a thread finalizing communicators (NCCL's finalize, or
// process exit); never from an event callback. Drain() and dropped() may also be called by the
// plugin's lifecycle from other threads: implementations make those two thread-safe.
#ifndef NCCLWATCH_PLUGIN_REPORT_SINK_H_
#define NCCLWATCH_PLUGIN_REPORT_SINK_H_

#include <chrono>
#include <cstdint>

#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch::plugin {

class CommState;    // recorder.h
struct Completion;  // hot_path.h

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
  // Times delivery became impossible (the agent could not be reached) so far.
  virtual uint64_t outages() const { return 0; }

  // --- Optional hooks (default: no-ops) --------------------------------------------------------

  // Whether the sink wants OnOperation. The flusher asks once, when it is built, and makes no
  // per-operation call at all when the answer is false: the answer must not change afterwards.
  virtual bool wants_operations() const { return false; }
  // One completed operation of `comm` (timed or not), in ring order, as the flusher drains it;
  // before the report that counts it is submitted. `drained_unix_ns` is the wall-clock time of the
  // drain (read once per communicator and drain). `comm` and `c` are valid during the call only.
  virtual void OnOperation(const CommState& comm, const Completion& c, int64_t drained_unix_ns) {}
  // `comm` was finalized: its last operations and its final report were delivered above, and
  // nothing of it follows. `comm` is valid during the call only (its address may be reused).
  virtual void OnCommunicatorFinalized(const CommState& comm) {}
  // A reporting round ended: one periodic report per live communicator was just submitted.
  virtual void OnRoundEnd() {}
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_REPORT_SINK_H_
