// What the detectors are fed: plain structs, no protobuf or gRPC (docs/detection.md).
//
// The analyzer turns each validated RankReport into a RankInterval before any detector sees it, so
// the detectors can be driven, tested and benchmarked without the wire format.
#ifndef NCCLWATCH_AGGREGATOR_DETECT_TYPES_H_
#define NCCLWATCH_AGGREGATOR_DETECT_TYPES_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace ncclwatch::aggregator {

// A communicator of a job: the key every detector's state is kept under.
struct CommKey {
  std::string job_id;
  uint64_t comm_hash = 0;
  bool operator<(const CommKey& o) const {
    return std::tie(job_id, comm_hash) < std::tie(o.job_id, o.comm_hash);
  }
  // The hash first: the job's name only decides between communicators of one hash.
  bool operator==(const CommKey& o) const { return comm_hash == o.comm_hash && job_id == o.job_id; }
  // The detectors that never walk their communicators in order keep them in hash maps: one hash
  // and one comparison per lookup instead of a dozen string comparisons, for every report.
  template <typename H>
  friend H AbslHashValue(H h, const CommKey& k) {
    return H::combine(std::move(h), k.job_id, k.comm_hash);
  }
};

// A job's first steps (compilation, allocator growth, connection set-up) are slow, uneven and
// nobody's fault: the first collectives of each (communicator, class) are its warm-up, which
// neither the lateness windows nor the own-time analysis take in.
inline constexpr int kWarmupCollectives = 16;

// How many groups of a class move each of its `nranks` ranks once: one collective, or nranks / 2
// point-to-point exchanges (two ranks each).
inline int64_t GroupsPerMove(bool exchange, int64_t nranks) {
  return exchange ? std::max<int64_t>(1, nranks / 2) : 1;
}

// Where a detector keeps one rank's state, cached by its caller between the rank's reports so
// that the detector need not look the rank up again (SeriesTable::AddReport, HangDetector::Update).
// Valid while the detector's generation is still `generation`: it raises it whenever state may
// have moved or gone.
struct CachedSlot {
  void* comm = nullptr;
  void* rank = nullptr;
  uint64_t generation = 0;
};

// One operation still in flight (enqueued, kernel not finished) when the rank reported.
struct InFlightOp {
  std::string_view op;  // "AllReduce", "Send", ...
  uint64_t seq = 0;     // collectives; 0 for point-to-point
  bool p2p = false;
  int peer = -1;        // point-to-point: the other rank
  uint64_t age_ns = 0;  // time since it was enqueued, on the rank's clock
  bool started = true;  // a channel of its kernel started on the GPU (false: queued behind others)
};

// The interval statistics of one (operation, message-size bucket[, algorithm]) of the rank.
struct OpStats {
  std::string_view op;
  std::string_view message_size;  // Inspector's bucket label, e.g. "16-17MB"
  bool p2p = false;
  uint64_t count = 0;           // timed operations
  uint64_t bytes = 0;           // their bytes
  double exec_time_us_min = 0;  // the fastest one's execution time
};

// One rank's report of one interval, as the detectors need it. The string views point into the
// caller's report and are valid only during the call that takes the RankInterval; detectors copy
// what they keep.
struct RankInterval {
  int rank = 0;
  int nranks = 0;
  int n_nodes = 0;
  std::string_view node;
  bool final = false;           // the rank's communicator was finalized: its last report
  int64_t interval_end_ns = 0;  // when the report was taken, on the plugin's clock; 0: unknown
  std::vector<InFlightOp> in_flight;  // oldest first
  std::vector<OpStats> stats;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_TYPES_H_
