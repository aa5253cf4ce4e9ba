// A process's own time before each of its operations: how long its GPU worked on something else
// (compute, copies) between the end of its previous NCCL operation, in any communicator, and the
// start of this one. A rank that is late because it waited for a peer in an earlier collective
// arrives late with a normal own time; a rank that is slow itself shows a longer own time. This is
// what lets the aggregator tell a delay's origin from its consequences (docs/detection.md).
//
// Every communicator of a process on one GPU shares that GPU's %globaltimer, so starts and ends of
// different communicators compare directly. Operations may be observed out of order (the flusher
// drains one ring per communicator): the own time of an operation is its start minus the latest end
// at or before that start (give or take kOverlapNs) among the last kHistory operations seen,
// whatever order they came in.
//
// Thread safety: none; the flusher owns one tracker per CUDA device and uses it under its lock.
#ifndef NCCLWATCH_PLUGIN_OWN_TIME_H_
#define NCCLWATCH_PLUGIN_OWN_TIME_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace ncclwatch::plugin {

class OwnTimeTracker {
 public:
  // Enough for every operation that can overlap the one being measured (streams in flight at once)
  // plus the reordering of one drain round.
  static constexpr size_t kHistory = 64;

  // An end this far after a start still counts as before it: the channels of one kernel start and
  // stop a few microseconds apart, so the next kernel's first channel can start before the
  // previous kernel's last channel stopped.
  static constexpr uint64_t kOverlapNs = 100'000;
  // Point-to-point operations that start within this of each other belong to one launch (the
  // Send and Recv of a grouped exchange, the all-to-all of an expert-parallel dispatch: one
  // kernel, its tasks' channels starting microseconds apart): the own time before them is the
  // same, measured from what ended before the launch. Without this, a task whose sibling moved
  // its data within kOverlapNs would get an own time of 0. Collectives are measured as before:
  // a short collective right before another (a scalar all-reduce) is the other's predecessor.
  // (Two separate exchanges' kernels this close are taken for one launch: the second's own time
  // then includes the first's, at most a kernel of under 20 us.)
  static constexpr uint64_t kSameLaunchNs = 20'000;

  // Records an operation that ran on the GPU from `start_ns` to `stop_ns` and returns its own time:
  // start_ns minus the latest end <= start_ns + kOverlapNs seen so far among the operations that
  // started more than kSameLaunchNs before it when both are point-to-point (0 if that end is after
  // the start), or -1 if no such end is known.
  int64_t Observe(uint64_t start_ns, uint64_t stop_ns, bool p2p = false);
  // Records an operation that started at `start_ns` and ended who knows when (its timestamps were
  // bogus): an operation whose latest earlier end is this one gets -1, not a made-up own time.
  void ObserveUnknownEnd(uint64_t start_ns);

 private:
  void Record(uint64_t start_ns, uint64_t end_ns, bool unknown, bool p2p);
  std::array<uint64_t, kHistory> starts_{};  // ring of the most recent operations, arrival order
  std::array<uint64_t, kHistory> ends_{};
  std::array<bool, kHistory> p2p_{};
  std::array<bool, kHistory> unknown_{};  // that end is only a lower bound (ObserveUnknownEnd)
  size_t next_ = 0;
  size_t size_ = 0;
};

}  // namespace ncclwatch::plugin

#endif  // NCCLWATCH_PLUGIN_OWN_TIME_H_
