// Finds communicators whose bandwidth fell below what the same kind of communicator normally
// achieves, and, when the network is the cause, the node behind it.
//
// Method (docs/detection.md):
// - A communicator's class is `nvlink` (all ranks on one node) or `hybrid` (several nodes: the
//   network is in the path).
// - What is judged is the collective, joined across all its ranks (correlator.h): every rank's
//   kernel time includes its wait for the last rank to arrive, and the last to arrive waits for
//   nobody, so the shortest kernel of a sampled collective is its time on the wire. Collectives
//   smaller than `min_message_bytes` are latency-bound (a few bytes of gradient norm, a barrier)
//   and never judged: their bandwidth moves with latency, not with the wire.
// - A communicator's value per (collective, message-size bucket) and window of `window_ns`
//   (about one flush interval) is the best bus bandwidth of the collectives that ran in it: one
//   collective slowed by a passing burst of traffic is not a degraded wire. Windows are cut on
//   the communicator's own clock (when each collective ran, not when it reached the aggregator):
//   reports arrive in bursts, one per flush, and a burst a little early or late would otherwise
//   share a window with the previous one, which then spans the moment a wire slowed.
// - Baseline per (class, collective, message-size bucket, nranks): the median of the last
//   `baseline_window` collectives of healthy windows of every communicator of that key, learned
//   online; judged only after `min_baseline` values. (Single collectives, not window bests: the
//   baseline is learned within a window or two, and sits at or below what a healthy window's
//   best reaches.)
// - A window is low when its value is below (1 - fraction) x baseline. A communicator is degraded
//   for that key after `intervals` low windows in a row, and recovers after as many windows back
//   above (1 - fraction/2) x baseline. Low windows never feed the baseline, nor do the low
//   collectives of a window that is not (one spanning the moment the wire slowed). A window whose
//   first `early_collectives` are all low is judged low at once rather than when it closes.
//   (Per-rank interval statistics were judged before: with one rank waiting for another in
//   every interval, a rank's new value beside a peer's older one could make every rank look low
//   at once, and in a large communicator "half of its ranks low" was the waiting half.)
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
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/container/btree_map.h"
#include "aggregator/detect/indexed_map.h"
#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

struct DegradedOptions {
  double fraction = 0.2;     // flag below (1 - fraction) x baseline
  int intervals = 1;         // consecutive low windows (K)
  int baseline_window = 64;  // healthy values kept per baseline key
  int min_baseline = 8;      // values needed before judging
  // Operations smaller than this are latency-bound: not judged on bandwidth at all.
  uint64_t min_message_bytes = 1 << 20;
  int64_t window_ns = 1'000'000'000;  // collectives judged together (about a flush interval)
  // A window this many of whose collectives are all low is judged low at once, before it closes.
  int early_collectives = 8;
};

struct DegradedView {
  CommKey comm;
  bool hybrid = false;
  std::string op;
  std::string message_size;
  double bus_gbs = 0;  // the last window's value: its best collective's bus bandwidth
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

  // Takes who reported: the communicator's size, class and the node of each of its ranks. Called
  // for a rank's first report and when its process or node changes (Analyzer::Ingest), not for
  // every report.
  void Observe(const CommKey& comm, const RankInterval& report);
  // Takes one sampled collective of `comm` joined across all its `nranks` ranks: `bytes` its
  // message size (NCCL's count x type size), `fastest_ns` the shortest of its ranks' kernel
  // times, `ran_at_ns` when it ran on the communicator's own clock (one rank's kernel start, the
  // same rank's for every collective of `comm`), which places it in a window. Returns what
  // started or ended because of it.
  std::vector<DegradedChange> ObserveCollective(const CommKey& comm, int nranks,
                                                std::string_view op, uint64_t bytes,
                                                uint64_t fastest_ns, int64_t ran_at_ns);
  void Forget(const CommKey& comm);

  // Communicators degraded now, each described by its worst key.
  std::vector<DegradedView> Degraded() const;
  std::vector<SuspectView> Suspects() const;
  bool IsDegraded(const CommKey& comm) const;
  bool IsHybrid(const CommKey& comm) const;

 private:
  using BaselineKey = std::tuple<bool, std::string, std::string, int>;  // hybrid, op, size, n
  struct KeyState {
    int64_t window_start_ns = 0;
    double window_best = 0;             // the best collective of the open window; 0: no window open
    std::vector<double> window_values;  // its collectives (at most baseline_window)
    bool window_judged = false;         // judged low before it closed
    int64_t last_ns = 0;                // when its latest collective was joined
    double latest_gbs = 0;              // the value of the last closed window
    int low_streak = 0;
    int ok_streak = 0;
    bool degraded = false;
  };
  struct CommState {
    bool hybrid = false;
    int nranks = 0;
    absl::btree_map<int, std::string> node_of_rank;
    std::map<std::pair<std::string, std::string>, KeyState> keys;  // (op, size)
    bool trending_low = false;  // at the last report: see TrendingLow()
    bool degraded() const;
    // Some key's last window was low: on its way to degraded.
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
  // Judges the closed window of `ks` (its best collective) against the key's baseline.
  void JudgeWindow(const CommState& cs, const std::pair<std::string, std::string>& op_size,
                   KeyState& ks);
  // Ends the open window of `ks`, judging it unless it was judged early.
  void CloseWindow(const CommState& cs, const std::pair<std::string, std::string>& op_size,
                   KeyState& ks);
  std::map<std::string, int> ComputeSuspects(const std::string& job_id) const;
  void UpdateSuspects(const std::string& job_id, std::vector<DegradedChange>* changes);

  const DegradedOptions options_;
  IndexedMap<CommKey, CommState> comms_;
  std::map<BaselineKey, Baseline> baselines_;
  std::map<std::string, std::map<std::string, int>> suspects_;  // job -> node -> comms
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_DEGRADED_H_
