// Lateness that no root cause explains (docs/detection.md, "Every symptom is reported").
//
// Where the plugin reports own times, lateness is a consequence: it pages only through the GPU
// the own-time analysis finds slow itself (verdicts.h). Some faults leave no such GPU: a whole node
// whose extra time falls before its node-local collectives is slow in every member of its node
// communicator alike, so no member stands out by its own time, yet the world communicator waits
// for the node at every step. Such a symptom must not vanish. A GPU with a rank flagged late, and
// late beyond its family (below) for `after_ns`, in a job whose root-cause analysis names nobody
// (no GPU, no node, no hang), pages by itself, marked "origin not found": as a slow node when most
// of a node's GPUs are such GPUs (the node rule of verdicts.h), else as a late rank where it is
// latest; once per GPU and node, however many communicators show it. A late GPU that is punctual
// in a communicator where another late GPU is late waited for that one there: its lateness is a
// consequence and does not page. A page ends when its lateness clears, or is replaced when a root
// cause of the job is found.
//
// Lateness that is nobody's fault must not page this way. Pipeline drains and stage imbalance make
// some ranks of cross-stage communicators (embedding, model-parallel) late by design, from the
// first step and identically in every replica. So only lateness beyond the family counts: the
// communicators of the job with the same size and node span (CommFamilies) are the same group in
// the other replicas, and the lower quartile of the rank's lateness at the same collective across
// them is what the design costs. A communicator without a family (the world) has no design
// reference and is judged on its lateness alone.
//
// Plain structs; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_ROOTCAUSE_UNEXPLAINED_H_
#define NCCLWATCH_AGGREGATOR_ROOTCAUSE_UNEXPLAINED_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

struct UnexplainedOptions {
  // How long a rank must be late beyond its family, with no root cause in its job, before it
  // pages. Long enough for the own-time analysis, which sees a slow GPU about as soon as lateness
  // does, to name it first (its verdict is confirmed in 0.5 s).
  int64_t after_ns = 1'500'000'000;
  // Where its communicator can tell (4 ranks or more), a rank must also be this far outside its
  // peers (robust z-score of its lateness) to page, unless half the ranks or more are late and
  // every rank the communicator has on its node is (a slow node of a two-node communicator):
  // flags in a healthy 1,024-rank job reach z 4.4 by chance (scripts/bench --scale).
  double min_peer_z = 5.0;
  // A late GPU not late itself in an exchange communicator (Send/Recv groups) where a peer has
  // own-time evidence on its way to a verdict, or is flagged late beyond its family, likely waited
  // for that peer there: the peer, whose exchange lateness never pages by itself, is the likelier
  // origin, and its own time in the exchange class (which settles more slowly than a
  // collective's) names it if it is slow. Such a GPU pages this much later than `after_ns`, so
  // that verdict comes first; if none does, it still pages.
  int64_t exchange_hold_ns = 1'500'000'000;
};

// The communicators of each job by size and node span: the same group in the job's other replicas.
// Updated when a communicator gains a member or goes; O(log n) per change.
class CommFamilies {
 public:
  // `comm` has `nranks` ranks on `n_nodes` nodes (it may have moved from another family).
  // Returns whether a family changed.
  bool Set(const CommKey& comm, int nranks, int n_nodes);
  // Returns whether a family changed (`comm` was a member of one).
  bool Forget(const CommKey& comm);
  // Every member of `comm`'s family, `comm` included (empty when unknown).
  const std::set<CommKey>& FamilyOf(const CommKey& comm) const;
  size_t families() const { return families_.size(); }

 private:
  using Key = std::tuple<std::string, int, int>;  // job, nranks, n_nodes
  std::map<Key, std::set<CommKey>> families_;
  absl::flat_hash_map<CommKey, Key> of_;
};

// A GPU (process) late beyond its family in some communicator, as the paging decision sees it.
struct LateGpu {
  int id = 0;            // the caller's index of it
  std::string node;      // "" when unknown
  int64_t since_ns = 0;  // late beyond its family since (the earliest of its ranks)
};

// What pages now in one job: whole nodes (node -> the ids of its late GPUs), and GPUs on their own.
struct UnexplainedPages {
  std::vector<std::pair<std::string, std::vector<int>>> nodes;
  std::vector<int> gpus;
  bool empty() const { return nodes.empty() && gpus.empty(); }
};

struct NodeRule {
  int min_gpus = 2;       // a node pages when at least this many of its GPUs are late ...
  double fraction = 0.5;  // ... and at least this share of the GPUs the job has on it
};

// Which of a job's late GPUs page at `now_ns`. A GPU is ready once it has been late beyond its
// family for `after_ns`. A node pages as a whole when its late GPUs meet `rule` against
// `gpus_on_node` (every GPU of the job on it) and all of them are ready; while some are not ready
// yet, the node waits for them rather than paging GPU by GPU. Other ready GPUs page on their own.
UnexplainedPages DecideUnexplained(const std::vector<LateGpu>& late,
                                   const std::function<int(const std::string&)>& gpus_on_node,
                                   const NodeRule& rule, int64_t now_ns, int64_t after_ns);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ROOTCAUSE_UNEXPLAINED_H_
