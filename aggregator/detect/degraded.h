// Finds communicators whose bandwidth fell below what the same kind of communicator normally
// achieves, and, when the network is the cause, the node behind it.
//
// Method (docs/detection.md):
// - A communicator's class is `nvlink` (all ranks on one node) or `hybrid` (several nodes: the
//   network is in the path).
// - A rank's value for an interval is the bus bandwidth of its fastest operation of each
//   (collective, message-size bucket): kernel times include waiting for late peers, and the
//   operation that waited least is the best view of the wire. Buckets whose operations average
//   less than `min_message_bytes` are latency-bound (a few bytes of gradient norm, a barrier) and
//   never judged: their bandwidth moves with latency, not with the wire.
// - Baseline per (class, collective, message-size bucket, nranks): the median of the last
//   `baseline_window` healthy rank values of every communicator of that key, learned online;
//   judged only after `min_baseline` values. A value feeds the baseline only if it is not low and
//   within `fraction` of the best current value of its communicator (a rank that waited on every
//   operation does not teach the baseline).
// - A rank's interval is low when its value is below (1 - fraction) x baseline. A communicator is
//   degraded for that key when every reporting rank (all ranks of a communicator of up to 8, at
//   least half of a larger one) had
//   `intervals` low intervals in a row -- one rank still at full speed means the others were
//   waiting for peers, not for the wire; it recovers when any rank had as many intervals back
//   above (1 - fraction/2) x baseline. Low intervals never feed the baseline.
// - Network suspects of a job: the nodes common to every degraded hybrid communicator, minus the
//   nodes of its healthy hybrid communicators, provided no NVLink-only communicator on those nodes
//   is degraded or trending low and the set is smaller than all of the job's hybrid nodes
//   (otherwise the evidence does not single anything out).
//
// Plain structs, no gRPC; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_DETECT_DEGRADED_H_
#define NCCLWATCH_AGGREGATOR_DETECT_DEGRADED_H_

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

struct DegradedOptions {
  double fraction = 0.2;     // flag below (1 - fraction) x baseline
  int intervals = 1;         // consecutive low intervals (K)
  int baseline_window = 64;  // healthy values kept per baseline key
  int min_baseline = 8;      // values needed before judging
  // Operations smaller than this are latency-bound: not judged on bandwidth at all.
  uint64_t min_message_bytes = 1 << 20;
};

struct DegradedView {
  CommKey comm;
  bool hybrid = false;
  std::string op;
  std::string message_size;
  double bus_gbs = 0;  // median of the ranks' latest values
  double baseline_gbs = 0;
  std::set<std::string> nodes;
};

struct SuspectView {
  std::string job_id;
  std::string node;
  int degraded_comms = 0;  // hybrid communicators through this node that degraded
};

struct DegradedChange {
  bool start = true;
  bool node = false;  // a SuspectView change, else a DegradedView change
  DegradedView comm;
  SuspectView suspect;
};

class DegradedDetector {
 public:
  explicit DegradedDetector(DegradedOptions options = {}) : options_(options) {}

  // Takes one report's statistics; returns what started or ended because of it.
  std::vector<DegradedChange> Observe(const CommKey& comm, const RankInterval& report);
  void Forget(const CommKey& comm);

  // Communicators degraded now, each described by its worst key.
  std::vector<DegradedView> Degraded() const;
  std::vector<SuspectView> Suspects() const;
  bool IsDegraded(const CommKey& comm) const;
  bool IsHybrid(const CommKey& comm) const;

 private:
  using BaselineKey = std::tuple<bool, std::string, std::string, int>;  // hybrid, op, size, n
  struct RankTrack {
    double latest_gbs = 0;
    int low_streak = 0;
    int ok_streak = 0;
  };
  struct KeyState {
    std::map<int, RankTrack> ranks;
    bool degraded = false;
  };
  struct CommState {
    bool hybrid = false;
    int nranks = 0;
    std::map<int, std::string> node_of_rank;
    std::map<std::pair<std::string, std::string>, KeyState> keys;  // (op, size)
    bool trending_low = false;  // at the last report: see TrendingLow()
    bool degraded() const;
    // Some key has all of its ranks in a low interval right now: on its way to degraded.
    bool TrendingLow() const;
  };
  struct Baseline {
    std::deque<double> values;
    double Median() const;
  };
  std::set<std::string> Nodes(const CommState& cs) const;
  // The key furthest below its baseline (among the degraded ones if `degraded_only`).
  DegradedView Worst(const CommKey& key, const CommState& cs, bool degraded_only) const;
  DegradedView View(const CommKey& key, const CommState& cs, const std::string& op,
                    const std::string& size, const KeyState& ks) const;
  std::map<std::string, int> ComputeSuspects(const std::string& job_id) const;
  void UpdateSuspects(const std::string& job_id, std::vector<DegradedChange>* changes);

  const DegradedOptions options_;
  std::map<CommKey, CommState> comms_;
  std::map<BaselineKey, Baseline> baselines_;
  std::map<std::string, std::map<std::string, int>> suspects_;  // job -> node -> comms
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_DEGRADED_H_
