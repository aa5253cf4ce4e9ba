// Flags ranks that are consistently late to their communicator's collectives.
//
// Method (docs/detection.md). Per completed collective, each rank's lateness -- how much later it
// arrived than the earliest rank:
//   - the GPU's own measure, when every rank reported how long its kernel waited for its peers
//     (ABI v7 KernelPhase, initial sync): lateness_r = max_j wait_j - wait_r. The last to arrive
//     waits least; no clock is compared and the kernel's data movement does not enter;
//   - else aligned GPU timestamps, when the ranks' clocks agree: lateness_r = start_r - min_j
//   start_j.
//     Clocks are taken to agree for a collective when its ranks' end times (start + duration)
//     lie within `align_tolerance_ns` of each other, since a collective ends at nearly the same
//     moment everywhere;
//   - otherwise, without any clock alignment: lateness_r = max_j duration_j - duration_r (the last
//     to arrive spends the least time inside the kernel).
// A point-to-point exchange (a Send and its Recv, joined by the correlator) is a group of two: the
// later end is late by the difference; its class is kP2pClass, every exchange of the communicator.
// Latenesses are kept per collective class, the operation (AllReduce, AllGather, ...) within the
// communicator: one communicator runs several kinds of collective per step, and a delay often
// precedes only one of them (a node slow before its node-local collective is late at the world
// collective that follows it, not at the others). Mixed in one window, a rank late at one
// collective in four would have a median of nothing.
// Each rank keeps, per class, a window of its last `window` latenesses, from the end of the class's
// warm-up (its first `warmup_groups` collectives). Its scores in a class:
//   - lateness: the window median;
//   - excess over its peers: lateness - the communicator's peer baseline, the lower quartile of
//     its ranks' latenesses (the punctual ranks; robust to up to 3/4 of them being slow);
//   - peer z-score: (lateness - median of the ranks' latenesses) / (1.4826 x their MAD);
//   - history ratio: lateness / the rank's own long-run lateness (a slow moving average, frozen
//     while flagged): about 1 for a rank that was always this late, well above 1 for a new fault.
// A rank is flagged in a class when its excess there reaches `threshold_ns` (with at least
// `min_groups` observations) and cleared when it falls below `threshold_ns * clear_ratio`; it is
// flagged in the communicator while any class flags it. The medians ignore
// one-off hiccups, the peer baseline ignores lateness every rank shares (host jitter), the
// hysteresis stops flapping.
//
// Plain structs, no gRPC; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_DETECT_STRAGGLER_H_
#define NCCLWATCH_AGGREGATOR_DETECT_STRAGGLER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "aggregator/detect/correlator.h"
#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

struct StragglerOptions {
  double threshold_ns = 1'000'000;  // 1 ms of excess lateness
  // The first collectives of each (communicator, class) enter no window (types.h). Left in, the
  // warm-up holds a window's median up for as many collectives as it filled (steps, where a
  // class runs a few collectives a step).
  int warmup_groups = kWarmupCollectives;
  int window = 32;
  int min_groups = 8;
  double clear_ratio = 0.5;
  double align_tolerance_ns = 200'000;  // end times this close: the clocks agree
  double history_alpha = 1.0 / 256;     // weight of one collective in the own-history average
};

// What a collective's latenesses were computed from, the most direct first.
enum class LatenessBasis { kKernelDurations, kAlignedClocks, kSyncWait };

struct RankScore {
  int rank = 0;
  std::string op;               // the collective class scored (the worst one, see Scores)
  double lateness_ns = 0;       // window median
  double peer_baseline_ns = 0;  // lower quartile of the communicator's ranks' latenesses
  double excess_ns = 0;         // lateness - peer baseline: what the flag is judged on
  double peer_z = 0;            // robust z-score among the communicator's ranks
  double history_ratio = 1;     // lateness / own long-run lateness
  double arrived_last_fraction = 0;
  int observations = 0;
  bool clocks_aligned = false;  // the latest collective was judged on aligned GPU timestamps
  LatenessBasis basis = LatenessBasis::kKernelDurations;  // of the latest collective
  bool flagged = false;  // in the communicator: some class flags the rank
};

struct FlagChange {
  CommKey comm;
  RankScore score;  // score.flagged is the new state
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options = {}) : options_(options) {}
  const StragglerOptions& options() const { return options_; }

  // Feeds one completed collective; returns the ranks whose flag (in the communicator) changed
  // because of it, each scored in the group's class. `slot`, if given, is where the
  // communicator's caller keeps where its state is (detect/types.h), found once, not per group.
  // `*class_flags_changed`, if given, is set when a rank's flag in the group's class changed,
  // whether or not its flag in the communicator did.
  std::vector<FlagChange> Observe(const CompletedGroup& group, CachedSlot* slot = nullptr,
                                  bool* class_flags_changed = nullptr);
  // Current scores of every rank of `comm` (empty if unknown), each in its worst class: the
  // flagged class with the largest excess, else the class with the largest excess.
  std::vector<RankScore> Scores(const CommKey& comm) const;
  // The scores of the ranks flagged or at least `threshold_ns` late (lateness_ns, the window
  // median) in some class, by rank, each in its worst class: what the detection series export,
  // without scoring every other rank. Classes for which `skip` (if set) returns true are left
  // out, flags included (a rank flagged only there is not flagged in the answer).
  using ClassFilter = std::function<bool(const std::string& op)>;
  std::vector<RankScore> Notable(const CommKey& comm, const ClassFilter& skip = nullptr) const;
  // Notable's flagged ranks only: what pages, without scoring the late ranks that are not flagged
  // (the tick asks it of every communicator with a flag, thousands in a large job).
  std::vector<RankScore> Flagged(const CommKey& comm, const ClassFilter& skip) const;
  // Rank `rank`'s lateness (window median) in class `op` of `comm`, or nullopt when that class
  // has too few observations of it (fewer than `min_groups`) or is unknown.
  std::optional<double> LatenessIn(const CommKey& comm, const std::string& op, int rank) const;
  // Whether a rank of `comm` is flagged in a class other than `op` (constant time in the ranks).
  bool FlaggedBesides(const CommKey& comm, std::string_view op) const;
  void Forget(const CommKey& comm) {
    comms_.erase(comm);
    ++generation_;
  }

 private:
  struct RankWindow {
    std::vector<double> lateness;  // ring buffer of size <= window
    std::vector<double> sorted;    // the same values, ascending (SlideMedian)
    std::vector<bool> last;        // arrived last in that group
    size_t next = 0;
    double median = 0;    // of `lateness`, refreshed on every observation
    double history = -1;  // own long-run lateness; < 0 until the first observation
    bool flagged = false;
  };
  // Peer statistics of a communicator: lower quartile, median and MAD of the ranks' medians.
  struct PeerStats {
    double baseline = 0;
    double median = 0;
    double mad = 0;
  };
  struct ClassWindows {
    std::string op;
    std::vector<RankWindow> ranks;
    LatenessBasis basis = LatenessBasis::kKernelDurations;  // of the latest group
    // Point-to-point exchanges (two ranks a group) reuse the peer statistics for nranks / 2
    // exchanges: a communicator's n ranks move in about that many, and recomputing them for
    // every exchange would cost O(n) per pair (O(n^3) a step of an all-to-all).
    PeerStats peers;
    int exchanges_since_peers = -1;  // -1: never computed
    int flagged = 0;                 // ranks flagged in this class
    int64_t seen = 0;                // groups observed, warm-up included
  };
  struct CommWindows {
    std::vector<ClassWindows> classes;  // a handful: the operations the communicator runs
    std::vector<uint8_t> flagged_in;    // by rank: how many classes flag it
  };
  // `scratch` holds the ranks' medians while they are computed (its room is reused).
  PeerStats Peers(const ClassWindows& c, std::vector<double>* scratch) const;
  RankScore Score(int rank, const ClassWindows& c, const PeerStats& peers, bool flagged) const;
  // Which ranks Worst scores: every one (Scores), the notable ones, or the flagged ones.
  enum class Ranks { kAll, kNotable, kFlagged };
  // The ranks of `c` asked for, each scored in its worst class.
  std::vector<RankScore> Worst(const CommWindows& c, Ranks which,
                               const ClassFilter& skip = nullptr) const;
  // Per-rank lateness of one group, from the most direct basis it allows, into *out (resized to
  // the group's ranks); sets *basis.
  void Lateness(const CompletedGroup& group, LatenessBasis* basis, std::vector<double>* out) const;

  const StragglerOptions options_;
  uint64_t generation_ = 1;  // raised whenever a communicator's state is freed (CachedSlot)
  absl::node_hash_map<CommKey, CommWindows> comms_;
  // Observe's scratch, kept between calls: a group's lateness and its class's medians cost no
  // allocation (each of the five exchanges a rank-second at 16,384 ranks paid for two).
  std::vector<double> lateness_;
  std::vector<double> medians_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_STRAGGLER_H_
