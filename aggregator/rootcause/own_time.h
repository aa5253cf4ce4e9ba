// Which GPUs are slow themselves: the origin half of job-level root cause (docs/detection.md).
//
// Input: every collective the correlator joined, with each rank's own time before it (the plugin's
// SampleColumn.own_time_ns: GPU start minus the end of the process's previous operation, in any
// communicator). In synchronous training a rank that waited for a peer arrives late at its next
// collective with a normal own time; only the origin of a delay spends longer on its own work.
// Lateness spreads across communicators; own time does not.
//
// Method, per communicator c, collective class k = (op, bytes) and communicator rank r:
//   - per collective: excess_r = own_r - the smallest own time of its ranks (ranks that do the
//     same step at the same moment are compared like with like; unlike a quantile, the minimum
//     does not move when one member of a small communicator slows down);
//   - the first `warmup_groups` collectives of each (c, k) are warm-up: not judged;
//   - E(c,k,r): the median of r's last `window` excesses (one-off hiccups and job-wide stalls,
//     which every rank takes, vanish in it), once it holds `min_groups` of them;
//   - design D(c,k,r): what is nobody's fault. Communicators of one job with the same class, size
//     and node span form a family (the DP groups of every stage and TP position, the model-parallel
//     groups of every replica, ...); a rank's counterparts are the ranks at its index in the other
//     members of the family, on other nodes. Design differences (pipeline drains, stage imbalance)
//     are the same in every replica, so D = the smallest counterpart E. A communicator without
//     counterparts (the world) compares r with its own members on other nodes: D = the largest E
//     not clearly above r's (within half the threshold), which is what a replica of r shows;
//   - change in time C(c,k,r): E against the lowest E the rank has had since warm-up (its own
//     past; kept relative to the class's typical smallest own time, so that a job slowing down as
//     a whole scales its design differences without growth, and windows of other phases of the
//     step compare alike), minus the lower quartile of what the communicator's ranks' E grew by
//     the same way. A GPU whose own time grew and stayed grown while its peers' did not is slow
//     even where its replicas slowed alike (a fault every replica shares: D cancels it), or where
//     it drifts slower bit by bit. It cannot see a rank that was its communicator's fastest grow
//     (its E stays 0): that one shows in its other communicators;
//   - fault F = max(E - D, C). A rank is slow itself when F >= max(min_excess_ns, relative * its
//     typical own time); it stays so until F < clear_ratio of that. A GPU (process) is slow when
//     any of its communicator ranks is, with the largest F as its evidence. Evidence without
//     counterparts is weaker (in the world of a 3D job, a replica that is slow itself hides the
//     design of the others): it does not count when a smaller multi-node communicator of the same
//     process (its DP group) finds the process not slow.
// Counterparts and members on the rank's own node are never used as the design reference: a slow
// node slows all of them alike.
//
// Point-to-point exchanges (a Send and its Recv, CompletedGroup::members; no change in time,
// own or job-wide: their windows mix the step's phases, see Judge) are groups of two in
// one class per communicator (kP2pClass, every message size: what precedes an exchange does not
// depend on its size), compared the same way: the end that spent longer on its own work before
// the exchange has the excess. Their warm-up is `warmup_groups` x nranks / 2 exchanges (about
// warmup_groups per rank), and the change in time's peer growth is refreshed every nranks / 2
// exchanges, so that an exchange costs O(log n). Without counterparts an exchange's ends are
// compared with each other only from two of its reports' flush intervals (at least 2 s) after
// its class first appears (by then every node has reported it, and with it the replicas'
// classes: a pipeline exchange's stages are not alike); before that the comparison is
// provisional evidence, which only holds origin-not-found pages (ExchangePeerBuilding).
//
// A node's GPUs that all slow down together, where the node holds one stage of every replica:
// every comparison above is with ranks on the same node (its TP and DP groups) or with ranks that
// never wait before their collectives (the pipeline exchanges follow the TP all-reduce at once),
// and all of them grew alike. What did not grow is the rest of the job. So each class also keeps
// the mean own time of its fastest rank (a moving average, weight 1/64, of values clipped at 3x
// the window median: a window median of a class holding two phases of the step jumps between
// them, and a job-wide stall must not move a mean) and its lowest since it settled, and
// the job keeps how much its classes grew, typically (the lower quartile of mean / lowest over its
// classes, refreshed after 256 of its collectives or one per communicator it has, whichever is
// more, over its own communicators: robust to up to three quarters of them growing). A class that
// grew a threshold beyond that gives each of its ranks evidence F = mean - lowest x the job's
// growth: its fastest rank grew, so all of them did, while the job as a whole did not. A job
// slowing down as a whole (longer sequences, an evaluation phase) grows every class alike; a single
// slow GPU does not move its classes' fastest rank.
//
// Workload, not fault: with mixture-of-experts routing (or variable sequence lengths) the rank
// with the most work changes from collective to collective. Its own time is long whenever it is
// the busy one; in a small group (two-way expert parallelism) that is half the time, and a window
// median of half long, half short values lands on either side by chance: innocent GPUs would be
// judged slow. So each rank keeps how often it is a threshold above the group's fastest, as moving
// averages. A class takes turns when in most of its collectives a rank is that busy while another
// that was busy lately (turns_low) is not: the busy ones are busy apart, not together as a slow
// node's GPUs are. From then on it is imbalanced by its data,
// and a rank's evidence there counts only while its slow average is at least imbalance_share: a
// GPU slow at everything is late nearly every time, a rank that takes its turn is not. Such
// classes are reported as a property of the job (Imbalances: how long a collective waits for its
// busiest rank), never as a page.
//
// Cost: a collective of n ranks costs O(n) (windows; each family slot's smallest E on another node,
// MinElsewhere, at O(1) amortised per move), plus O(n log n) in a class whose ranks have no
// counterparts (its judged ranks sorted, built the first time one is asked for), whatever the
// number of communicators in a family.
// Memory: per (communicator, class, rank) one window; classes per communicator are capped.
// Plain structs, no protobuf or gRPC; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_ROOTCAUSE_OWN_TIME_H_
#define NCCLWATCH_AGGREGATOR_ROOTCAUSE_OWN_TIME_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/types/span.h"
#include "aggregator/detect/types.h"
#include "aggregator/rootcause/min_elsewhere.h"
#include "aggregator/rootcause/process_index.h"

namespace ncclwatch::aggregator {

struct OwnTimeOptions {
  // The first collectives of each (communicator, class) are not judged: warm-up (types.h).
  int warmup_groups = kWarmupCollectives;
  int window = 16;
  int min_groups = 8;
  double min_excess_ns = 300'000;  // 0.3 ms: above the own-time jitter of a healthy step
  double relative = 0.15;          // and 15% of the rank's typical own time
  double clear_ratio = 0.5;
  size_t max_classes_per_comm = 16;
  // Data-dependent imbalance (see "Workload, not fault" above): per rank, how often it is a
  // threshold above its group's fastest, as two moving averages; a class where two ranks or more
  // are so only some of the time is imbalanced by its data, and there a rank's evidence counts
  // only while its long average is at least `imbalance_share`.
  double share_alpha_fast = 1.0 / 16;  // finds the turns soon
  double share_alpha_slow = 1.0 / 64;  // judges who is late every time (0.75 is 5.6 sigma
                                       // from the 0.5 of two ranks taking turns); also the
                                       // weight of the classes' mean own time (JobGrowth)
  double turns_low = 0.15;  // a rank above the threshold this often lately is "recently busy"
  double turns_rate = 0.5;  // a class takes turns when this share of its collectives (moving
                            // average, share_alpha_fast) has a busy rank while a recently busy
                            // one is not
  double imbalance_share = 0.75;
};

// A class whose ranks take turns being the slowest: what the analysis learnt about it.
struct WorkloadImbalance {
  CommKey comm;
  std::string op;
  uint64_t bytes = 0;
  double wait_ns = 0;      // how long a collective typically waits for its busiest rank
  double own_time_ns = 0;  // the typical own time of its fastest rank before it
};

// One joined collective, as the own-time analysis needs it.
// Borrowed, not copied (a group is observed for every joined collective and exchange): `comm`
// and `op` must outlive the call.
struct OwnTimeGroup {
  const CommKey& comm;
  std::string_view op;
  uint64_t bytes = 0;
  int n_nodes = 0;
  std::vector<int64_t> own_time_ns;  // per communicator rank (per member); -1 when unknown
  int64_t now_ns = 0;                // when it was joined (for `since`)
  // A point-to-point exchange: the communicator ranks of its two ends, whose own times
  // own_time_ns holds in that order (CompletedGroup::members, which must outlive Observe); empty
  // for a collective.
  absl::Span<const int> members;
  // The flush interval of the report that completed it (interval_end - interval_start); 0 when
  // unknown. Sets how long an exchange class waits for its counterparts (own_time.cc).
  int64_t report_interval_ns = 0;
};

// A GPU's verdict and the evidence behind it.
struct SlowProcess {
  ProcessKey process;
  std::string node;
  bool slow = false;
  CommKey comm;    // where the evidence is strongest
  int rank = -1;   // the process's rank there
  std::string op;  // and the collective class
  uint64_t bytes = 0;
  double excess_ns = 0;    // F: own time beyond the design reference, or its growth (C)
  bool changed = false;    // F is the growth of its own time while its peers' did not grow
  double own_time_ns = 0;  // the typical own time of the rank's peers there
  int64_t since_ns = 0;    // when the verdict last changed
};

class OwnTimeAnalyzer {
 public:
  explicit OwnTimeAnalyzer(OwnTimeOptions options = {}) : options_(options) {}
  // Slots point into comms_ and its nodes: not copyable.
  OwnTimeAnalyzer(const OwnTimeAnalyzer&) = delete;
  OwnTimeAnalyzer& operator=(const OwnTimeAnalyzer&) = delete;

  // Who rank `rank` of `comm` (of `nranks` ranks) is and on which node it runs. Call when the rank
  // first reports and whenever its identity changes; a communicator is judged once all its ranks
  // are known.
  void SetMember(const CommKey& comm, int nranks, int rank, const ProcessKey& process,
                 const std::string& node);
  // Feeds one joined collective; returns the processes whose verdict changed.
  // `slot`, if given, is where the communicator's caller keeps where its state is
  // (detect/types.h), found once, not per collective.
  std::vector<SlowProcess> Observe(const OwnTimeGroup& group, CachedSlot* slot = nullptr);
  // Every process of `job_id` (all jobs if empty) that is slow now.
  std::vector<SlowProcess> Slow(const std::string& job_id) const;
  bool IsSlow(const ProcessKey& p) const;
  // The process's verdict and its strongest evidence now (slow false, rank -1 if unknown).
  SlowProcess View(const ProcessKey& p) const;
  // As View, but with the figures of the evidence `kept` names (its communicator, class and rank)
  // while that still gives the process evidence at or above its threshold: a finding's answer
  // then cites the same collective from one query to the next, its numbers fresh.
  SlowProcess ViewKeeping(const SlowProcess& kept) const;
  // Whether a rank of `comm` other than `rank` has own-time evidence in the communicator's
  // exchanges of at least clear_ratio of its threshold: a peer that spends longer on its own work
  // before their exchanges, not (yet) long enough to be found slow.
  bool ExchangePeerBuilding(const CommKey& comm, int rank) const;
  // How many processes (GPUs) of `job_id` the analysis knows on `node`.
  int ProcessesOnNode(const std::string& job_id, const std::string& node) const;
  // The classes of `comm` whose ranks take turns being the busiest: data-dependent imbalance, a
  // workload property.
  std::vector<WorkloadImbalance> Imbalances(const CommKey& comm) const;
  // Whether class `op` (any size) of `comm` is imbalanced by its data.
  bool Imbalanced(const CommKey& comm, const std::string& op) const;
  // Drops a communicator (its job ended, or it was re-created); returns the processes that are
  // no longer slow without its evidence.
  std::vector<SlowProcess> Forget(const CommKey& comm);

 private:
  struct ClassKey {
    std::string op;
    uint64_t bytes;
    bool operator<(const ClassKey& o) const {
      return std::tie(op, bytes) < std::tie(o.op, o.bytes);
    }
  };
  // A family member's slot: rank `index` of the family's communicators.
  struct SlotKey {
    std::string job_id;
    std::string op;
    uint64_t bytes;
    int nranks;
    int n_nodes;
    int index;
    bool operator<(const SlotKey& o) const {
      return std::tie(job_id, op, bytes, nranks, n_nodes, index) <
             std::tie(o.job_id, o.op, o.bytes, o.nranks, o.n_nodes, o.index);
    }
  };
  // The judged E of every communicator at one slot, and how many are not judged yet: a rank's
  // design reference is the smallest E on another node (its own communicator's member is on its
  // node), which MinElsewhere keeps at O(1) per move of a member.
  struct Slot {
    MinElsewhere judged;
    int unjudged = 0;
  };
  struct Ring {
    std::vector<double> values;  // <= window
    std::vector<double> sorted;  // the same, ascending (SlideMedian)
    size_t next = 0;
    double median = 0;
    void Push(double v, int window);
  };
  struct Evidence;
  struct ClassState {
    std::vector<Ring> excess;  // per rank
    // Per rank, its slot in slots_ (looked up once: a map node, kept while any member counts in
    // it, and every rank of this class does until Forget), and its place among the slot's members
    // (the slot's MinElsewhere holds its address: sized once, never moved).
    std::vector<Slot*> slots;
    std::vector<int> slot_index;
    // Per rank, its entry in its process's evidence (a map node, kept until Forget takes this
    // communicator out, or until the rank's process changes): written at every collective
    // without building and comparing the (communicator, class, rank) key.
    std::vector<Evidence*> evidence;
    Ring base;  // the smallest own time of each collective
    int n_nodes = 0;
    int64_t first_ns = 0;             // OwnTimeGroup::now_ns of its first collective
    int64_t counterpart_wait_ns = 0;  // from first_ns: see kMinCounterpartWaitNs (own_time.cc)
    // The judged ranks by E (for the reference without counterparts), built the first time a
    // rank of the class has none (a class whose ranks all have counterparts, or that is on one
    // node, never pays for it), and how many ranks are not judged yet.
    mutable absl::btree_multiset<std::pair<double, int>> judged;
    mutable bool indexed = false;
    int unjudged = 0;
    // Change in time: per rank the lowest E / base.median since it was first judged (+inf
    // before), and the lower quartile of the judged ranks' growth above theirs, as of the latest
    // collective.
    std::vector<double> past;
    double peer_growth = 0;
    int64_t seen = 0;  // collectives observed, warm-up included
    // Data-dependent imbalance: per rank, the moving averages of "a threshold above the group's
    // fastest" (fast and slow), whether the class was ever seen taking turns (it stays so: a
    // workload property), and the moving average of the largest excess of each group.
    std::vector<float> share_fast;
    std::vector<float> share_slow;
    double turn_rate = 0;
    bool turns = false;
    // The job-wide change in time (JobGrowth): the mean smallest own time (a moving average:
    // a window median of a class that holds two phases of the step, forward and backward, jumps
    // between them), how many collectives it holds, and its lowest since it settled (+inf before).
    double base_mean = 0;
    int64_t base_n = 0;
    double base_past = std::numeric_limits<double>::infinity();
    double wait_ns = 0;
    // Exchanges since peer_growth was last computed (point-to-point classes refresh it every
    // nranks / 2 exchanges, about once per rank's move, instead of at O(nranks) per exchange).
    int exchanges_since_growth = 0;
  };
  struct ProcessState;
  struct JobGrowth;
  struct CommState {
    CommState() = default;
    // Not copyable: exchange_class points into its own `classes`.
    CommState(const CommState&) = delete;
    CommState& operator=(const CommState&) = delete;
    CommState(CommState&&) = default;
    CommState& operator=(CommState&&) = default;
    int nranks = 0;
    // The members known so far, until every rank is: only then are the per-rank vectors built, so
    // a communicator costs what its ranks report, not the size it claims (detect/rank_set.h).
    std::map<int, std::pair<ProcessKey, std::string>> pending;
    std::vector<ProcessKey> processes;  // index = rank, once complete
    // Their states in processes_, each held (ProcessState::members) while this names it: a
    // completed collective reaches every member's evidence without a lookup by process.
    std::vector<ProcessState*> states;
    std::vector<std::string> nodes;
    // Their hashes: "on the same node" is asked of every judged rank of every collective, and
    // compared as numbers (two node names of one hash would count as one node).
    std::vector<uint64_t> node_hashes;
    std::map<ClassKey, ClassState> classes;
    // Its exchanges' class, once it has one (a node of `classes`: it stays where it is when the
    // state moves, and classes are never erased one by one).
    std::pair<const ClassKey, ClassState>* exchange_class = nullptr;
    // The job's growth (JobGrowth), kept in job_growth_ while any communicator of the job is.
    JobGrowth* growth = nullptr;
    bool complete() const { return !processes.empty(); }
    // The node of `rank`, nullptr while it is not known.
    const std::string* NodeOf(int rank) const;
  };
  struct Evidence {
    double fault_ns = 0;
    double threshold_ns = 0;
    double own_time_ns = 0;
    bool replicas = false;  // the design reference came from counterparts, or F is C
    bool changed = false;   // F is C: the rank's own time grew since its past
    int nranks = 0;         // of the communicator
    bool multi_node = false;
    // An exchange's ends compared with each other before its counterparts could have arrived
    // (Judge): read by ExchangePeerBuilding, never by a verdict.
    bool provisional = false;
  };
  struct ProcessState {
    std::string node;
    bool slow = false;
    int64_t since_ns = 0;
    int members = 0;  // ranks of complete communicators that hold this state (CommState::states)
    // Nothing holds it and it says nothing: forgotten.
    bool Unused() const { return members == 0 && evidence.empty() && !slow; }
    // Latest evidence per (communicator, class, rank).
    std::map<std::tuple<CommKey, ClassKey, int>, Evidence> evidence;
  };

  static SlotKey SlotOf(const CommKey& comm, const ClassKey& k, int nranks, int n_nodes, int r) {
    return SlotKey{comm.job_id, k.op, k.bytes, nranks, n_nodes, r};
  }
  // Adds one excess to rank r's window and keeps its slot and the class's sorted index in step.
  void Push(ClassState& st, int r, double excess_ns);
  // F and its threshold for rank r of a communicator `cs` in class `k`; false if not judged yet.
  bool Judge(const CommState& cs, const ClassKey& k, const ClassState& st, int r, int64_t now_ns,
             Evidence* out) const;
  // D for rank r (see the method above); false while the ranks it needs have too few collectives.
  // Without counterparts, a member within `tolerance_ns` above r still counts as a replica of r.
  // *counterparts tells whether the reference came from the family's other communicators.
  bool DesignReference(const CommState& cs, const ClassState& st, int r, double tolerance_ns,
                       double* reference_ns, bool* counterparts) const;
  // The process's verdict from its evidence, with hysteresis on its current one. Evidence counts
  // always with counterparts; without, unless a smaller multi-node communicator of the process
  // finds it not slow (see the method above). `best`, if not null, gets the counted evidence
  // furthest above its threshold.
  // All that Verdict reads of one piece of evidence: whether it reaches its threshold, and the
  // clearing ratio of it, whether it counts without a smaller communicator's say, whether it is
  // multi-node, and its communicator's size. Equal standings give equal verdicts.
  std::tuple<bool, bool, bool, bool, int> Standing(const Evidence& e) const;
  bool Verdict(const ProcessState& ps,
               const std::pair<const std::tuple<CommKey, ClassKey, int>, Evidence>** best) const;
  SlowProcess ViewOf(const ProcessKey& p, const ProcessState& ps) const;
  // Fills what `v` cites (communicator, class, rank, figures, node) from one piece of evidence.
  void Cite(const std::pair<const std::tuple<CommKey, ClassKey, int>, Evidence>& e,
            SlowProcess* v) const;
  // The state of `p`, held for a communicator's rank; Release lets it go, and forgets it once no
  // rank holds it and it has neither evidence nor a slow verdict.
  ProcessState* Hold(const ProcessKey& p);
  void Release(const ProcessKey& p, ProcessState* ps);

  // How much the own times of a job's classes grew, typically: the lower quartile over its
  // classes of base_mean / base_past, refreshed after kJobGrowthRefresh collectives of the job or
  // as many as it has communicators, whichever is more (+inf: not known, fewer than 4 classes to
  // compare).
  struct JobGrowth {
    double ratio = std::numeric_limits<double>::infinity();
    int64_t since_refresh = 0;
    std::set<CommKey> comms;  // the job's in comms_: the growth is forgotten with the last
  };
  void RefreshJobGrowth(JobGrowth& growth) const;

  const OwnTimeOptions options_;
  uint64_t generation_ = 1;  // raised whenever a communicator's state is freed (CachedSlot)
  absl::node_hash_map<CommKey, CommState> comms_;
  std::map<std::string, JobGrowth> job_growth_;
  std::map<SlotKey, Slot> slots_;
  // A node map: CommState::states point into it.
  std::map<ProcessKey, ProcessState> processes_;
  std::vector<double> growth_;  // Observe's scratch: the ranks' growth, room kept between calls
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ROOTCAUSE_OWN_TIME_H_
