// Flags ranks that are consistently late to their communicator's collectives.
//
// Method (docs/detection.md): a collective ends at nearly the same moment on every rank, so a rank
// that arrives late spends less time inside the kernel. For each completed group,
//     lateness_r = max_j duration_j - duration_r
// is how much later rank r arrived than the earliest rank -- no clock alignment needed. Each rank
// keeps a window of its last `window` latenesses; it is flagged when the window median reaches
// `threshold_ns` (with at least `min_groups` observations) and cleared when the median falls below
// `threshold_ns * clear_ratio`. The median ignores one-off hiccups; the hysteresis stops flapping.
//
// Plain structs, no gRPC; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_STRAGGLER_H_
#define NCCLWATCH_AGGREGATOR_STRAGGLER_H_

#include <cstdint>
#include <map>
#include <vector>

#include "aggregator/correlator.h"

namespace ncclwatch::aggregator {

struct StragglerOptions {
  double threshold_ns = 1'000'000;  // 1 ms
  int window = 32;
  int min_groups = 8;
  double clear_ratio = 0.5;
};

struct RankScore {
  int rank = 0;
  double lateness_ns = 0;          // window median
  double arrived_last_fraction = 0;
  int observations = 0;
  bool flagged = false;
};

struct FlagChange {
  CommKey comm;
  RankScore score;  // score.flagged is the new state
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options = {}) : options_(options) {}

  // Feeds one completed collective; returns the ranks whose flag changed because of it.
  std::vector<FlagChange> Observe(const CompletedGroup& group);
  // Current scores of every rank of `comm` (empty if unknown).
  std::vector<RankScore> Scores(const CommKey& comm) const;
  void Forget(const CommKey& comm) { comms_.erase(comm); }

 private:
  struct RankWindow {
    std::vector<double> lateness;  // ring buffer of size <= window
    std::vector<bool> last;        // arrived last in that group
    size_t next = 0;
    bool flagged = false;
  };
  RankScore Score(int rank, const RankWindow& w) const;

  const StragglerOptions options_;
  std::map<CommKey, std::vector<RankWindow>> comms_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_STRAGGLER_H_
