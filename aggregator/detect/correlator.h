// Joins the sampled per-collective records of all ranks of a communicator on
// (job, commHash, collective, seqNumber). Plain structs, no gRPC; not thread-safe (the Analyzer
// serialises calls).
//
// A group completes when every rank reported the record, and is then handed back to the caller.
// Incomplete groups are dropped after `grace_ns` (e.g. a rank sampled with a larger stride, or a
// lost report), and at most `max_open_groups` per communicator are kept (oldest evicted first), so
// memory is bounded by configuration, not by the job's history.
#ifndef NCCLWATCH_AGGREGATOR_DETECT_CORRELATOR_H_
#define NCCLWATCH_AGGREGATOR_DETECT_CORRELATOR_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

// The class name of point-to-point exchanges: a joined Send/Recv pair is one "SendRecv" group.
inline constexpr char kP2pClass[] = "SendRecv";

// One collective as seen by every rank (index = rank), or one point-to-point exchange as seen by
// its two ends (index 0 the sender, 1 the receiver; `members` says who they are).
struct CompletedGroup {
  CommKey comm;
  std::string op;  // kP2pClass for an exchange
  uint64_t seq = 0;
  std::vector<uint64_t> duration_ns;
  std::vector<uint64_t> gpu_start_ns;
  std::vector<int64_t> own_time_ns;  // the plugin's own time before it; -1 when unknown
  // How long each rank's kernel waited for its peers (ABI v7 KernelPhase, initial sync, longest
  // over the channels); -1 when not measured.
  std::vector<int64_t> sync_wait_ns;
  // An exchange's two ends' communicator ranks (sender, receiver); empty for a collective.
  std::vector<int> members;
  int nranks = 0;  // the communicator's size

  // The communicator rank whose values are at index i.
  int RankAt(size_t i) const { return members.empty() ? static_cast<int>(i) : members[i]; }
};

struct CorrelatorOptions {
  int64_t grace_ns = 30'000'000'000;
  size_t max_open_groups = 4096;  // per communicator
};

class Correlator {
 public:
  explicit Correlator(CorrelatorOptions options = {}) : options_(options) {}

  // Adds rank `rank`'s record of (op, seq). Returns the group once all `nranks` ranks reported,
  // and nullptr until then: the correlator's own, reused by the next group that completes (no
  // allocation per group), so valid until the next Add or AddP2p; the caller may move from it.
  // A repeated record of the same rank is ignored (replays are harmless). `slot`, if given, is
  // where the communicator's caller keeps where its open groups are (detect/types.h: `comm` its
  // collectives', `rank` its exchanges'), so that the lookup by communicator (a hash of the job's
  // name and a cache miss at 16,384 ranks) is paid once, not per record.
  CompletedGroup* Add(const CommKey& comm, int nranks, const std::string& op, uint64_t seq,
                      int rank, uint64_t duration_ns, uint64_t gpu_start_ns, int64_t now_ns,
                      int64_t own_time_ns = -1, int64_t sync_wait_ns = -1,
                      CachedSlot* slot = nullptr);
  // Adds one end of a point-to-point exchange: rank `rank`'s Send to (`send`) or Recv from `peer`,
  // the seq-th of that direction between the two (SampleColumn.peer). Returns the exchange once
  // both ends reported (as Add does), as a group of op kP2pClass with members {sender, receiver}.
  CompletedGroup* AddP2p(const CommKey& comm, int nranks, bool send, int rank, int peer,
                         uint64_t seq, uint64_t duration_ns, uint64_t gpu_start_ns, int64_t now_ns,
                         int64_t own_time_ns = -1, int64_t sync_wait_ns = -1,
                         CachedSlot* slot = nullptr);
  // Drops incomplete groups first seen before now - grace. Returns how many were dropped.
  size_t Expire(int64_t now_ns);
  // Forgets a communicator entirely (e.g. its job ended).
  void Forget(const CommKey& comm);

  size_t open_groups() const;
  // The communicators whose tables of open groups are held (open or not: Expire frees a table
  // once it has opened no group for the grace period).
  size_t held_comms() const { return comms_.size() + exchanges_.size(); }
  uint64_t completed() const { return completed_; }
  uint64_t expired() const { return expired_; }
  // Records not joined because their communicator already has kMaxOpsPerComm collective names
  // (NCCL has about ten: only a client making names up reaches it).
  uint64_t refused() const { return refused_; }

  static constexpr size_t kMaxOpsPerComm = 64;

 private:
  // One rank's record, kept in arrival order: an open group costs what its ranks sent, not the
  // size its communicator claims (rank_set.h); the per-rank vectors are built once it completes.
  struct Arrival {
    int rank = 0;
    uint64_t duration_ns = 0;
    uint64_t gpu_start_ns = 0;
    int64_t own_time_ns = -1;
    int64_t sync_wait_ns = -1;
  };
  struct Group {
    int nranks = 0;
    // An exchange's two ends fit inline: joining them allocates nothing.
    absl::InlinedVector<Arrival, 2> arrivals;
    // The ranks in, for a group of more than kScanParties parties (a smaller one scans its
    // arrivals: an exchange or a tensor-parallel group costs no set).
    absl::flat_hash_set<int> seen;
    int64_t first_seen_ns = 0;
  };
  static constexpr int kScanParties = 32;
  // Entries of completed groups an age order may hold beyond twice its open ones before a new
  // group trims it.
  static constexpr size_t kOrderSlack = 64;
  // (op, seq), and for an exchange its sender and receiver (-1 for a collective). The op is its
  // index in the communicator's `ops`: a key of numbers only is hashed, compared and copied
  // without touching a string (at 16,384 ranks the string cost a tenth of the join).
  struct GroupKey {
    uint64_t seq = 0;
    int sender = -1;
    int receiver = -1;
    uint32_t op = 0;
    bool operator==(const GroupKey& o) const {
      return seq == o.seq && sender == o.sender && receiver == o.receiver && op == o.op;
    }
    template <typename H>
    friend H AbslHashValue(H h, const GroupKey& k) {
      return H::combine(std::move(h), k.seq, k.sender, k.receiver, k.op);
    }
  };
  struct CommGroups {
    // Hashed, not ordered: one hash per record where a tree compared keys a dozen times (the
    // join ran at 16 % of the aggregator's CPU at 16,384 ranks). `order` keeps the age order.
    absl::flat_hash_map<GroupKey, Group> groups;
    std::deque<std::pair<int64_t, GroupKey>> order;  // insertion order, for expiry and eviction
    // The collective names seen, in order of first use (GroupKey::op); at most kMaxOpsPerComm.
    absl::InlinedVector<std::string, 4> ops;
    // When a group was last opened. A communicator with none open is kept (its table keeps its
    // room, and every slot cached by every communicator stays valid) until it has opened none for
    // the grace period: a healthy job's exchanges all complete between two Expire walks, and
    // freeing them each second had every communicator look itself up and regrow its table again.
    int64_t last_opened_ns = 0;
  };
  void Trim(CommGroups& cg, int64_t older_than_ns, size_t max_groups);
  // Adds `arrival` (its rank: the party's index in the group) to the group of `parties` parties
  // that `key` names, with the collective `op` (its key's op is set here) or, for an exchange
  // (key.sender >= 0), kP2pClass; returns the group once every party is in, as per-party vectors.
  CompletedGroup* Join(const CommKey& comm, const std::string* op, GroupKey key, int parties,
                       const Arrival& arrival, int64_t now_ns, CachedSlot* slot);

  const CorrelatorOptions options_;
  CompletedGroup done_;      // the last group completed (Add): its vectors keep their room
  uint64_t generation_ = 1;  // raised whenever a communicator's groups are freed (CachedSlot)
  absl::node_hash_map<CommKey, CommGroups> comms_;  // walked only to expire
  // Exchanges, apart: each has its own max_open_groups, so that a communicator's many pairs
  // waiting for their other end never evict its collectives.
  absl::node_hash_map<CommKey, CommGroups> exchanges_;
  uint64_t completed_ = 0;
  uint64_t expired_ = 0;
  uint64_t refused_ = 0;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_CORRELATOR_H_
