// Finds collectives that stopped making progress, and the ranks responsible.
//
// Method (docs/detection.md): every report lists the rank's oldest operations still in flight
// (enqueued, kernel not finished) with their age. Ranks that reached a collective keep it in
// flight until every rank has joined, so when the oldest collective in flight on some rank is older
// than `threshold_ns`:
//   - the ranks that list that (op, seq) in flight have arrived; every other rank of the
//     communicator never reached it and is named missing (MISSING_RANKS);
//   - if every rank lists it, all arrived and none finished: the network or NVLink fabric is stuck
//     (NO_PROGRESS).
// The verdict is given once every rank has reported since the collective crossed the threshold
// (or went silent), so it names the right ranks the first time.
// Point-to-point operations have no sequence number: a Send or Recv stuck on rank r with peer q
// names q missing when q has no counterpart (a Recv from r, a Send to r) in flight; the hang is
// then reported as op kP2pHangOp ("SendRecv"), seq 0.
// A rank whose reports stopped (without a final report) while the other ranks of its communicator
// went on reporting for `silent_after_ns` is flagged silent, and is counted as missing from any
// hang of its communicator: what it last said is stale.
//
// The aggregator's clock is used throughout: an operation's enqueue time is estimated as the
// report's arrival time minus the age the plugin measured, so no clock alignment is needed.
//
// Plain structs, no gRPC; not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_DETECT_HANG_H_
#define NCCLWATCH_AGGREGATOR_DETECT_HANG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "aggregator/detect/indexed_map.h"
#include "aggregator/detect/types.h"

namespace ncclwatch::aggregator {

// The op a point-to-point hang is reported under (Send/Recv have no seqNumber).
inline constexpr char kP2pHangOp[] = "SendRecv";

struct HangOptions {
  int64_t threshold_ns = 10'000'000'000;    // a collective stuck this long is a hang
  int64_t silent_after_ns = 5'000'000'000;  // a rank without reports this long is silent
};

enum class HangKind { kMissingRanks, kNoProgress };

struct HangView {
  CommKey comm;
  std::string op;
  uint64_t seq = 0;
  HangKind kind = HangKind::kMissingRanks;
  // Ranks that never reached the collective, or went silent: every reporting rank among them,
  // and at most kMaxNamedRanks of those that never reported at all; ascending.
  std::vector<int> missing;
  int missing_count = 0;    // all of them, named or not
  int arrived = 0;          // ranks that have it in flight
  int64_t enqueued_ns = 0;  // earliest enqueue among the arrived ranks (aggregator clock)
  int64_t since_ns = 0;     // when the hang was declared
};

struct SilentView {
  CommKey comm;
  int rank = 0;
  int64_t last_report_ns = 0;
  int64_t since_ns = 0;
};

// A hang or a silent rank that started or ended at an Evaluate().
struct HangChange {
  bool start = true;
  bool silent = false;  // a SilentView change, else a HangView change
  HangView hang;
  SilentView rank;
};

class HangDetector {
 public:
  explicit HangDetector(HangOptions options = {}) : options_(options) {}

  // Records what rank `report.rank` has in flight, as of `now_ns` (arrival time). `slot`, when
  // given, caches where the rank's state is between its reports (the registry keeps one per rank):
  // valid until a rank or communicator is added or dropped here, it spares two lookups a report.
  void Update(const CommKey& comm, const RankInterval& report, int64_t now_ns,
              CachedSlot* slot = nullptr);
  // Re-evaluates every communicator at `now_ns`; returns what started or ended.
  std::vector<HangChange> Evaluate(int64_t now_ns);
  // The aggregator listens again from `listening_ns`; its agents may take until `heard_from_ns`
  // to reconnect. The silence of a rank last heard before `listening_ns` (known from the replay)
  // counts from `heard_from_ns` at the earliest, so that a restart singles out nobody; ranks heard
  // live are judged as always, and a rank already silent stays so.
  void StartListening(int64_t listening_ns, int64_t heard_from_ns) {
    listening_ns_ = listening_ns;
    heard_from_ns_ = heard_from_ns;
  }
  // Drops a communicator that is gone (its job ended long ago); nothing is reported for it.
  void Forget(const CommKey& comm) {
    comms_.erase(comm);
    ++generation_;
  }

  std::vector<HangView> Hangs() const;
  std::vector<SilentView> Silent() const;
  // Whether `comm` has a hang now, and whether `rank` of it is missing from it / silent.
  bool Hung(const CommKey& comm) const;
  bool Missing(const CommKey& comm, int rank) const;
  bool IsSilent(const CommKey& comm, int rank) const;
  // Whether any rank of `comm` is silent; how many are.
  bool AnySilent(const CommKey& comm) const;
  int SilentRanks(const CommKey& comm) const;

  // An operation a rank had in flight at its last report.
  struct InFlight {
    std::string op;
    uint64_t seq = 0;  // collectives
    bool p2p = false;
    int peer = -1;  // p2p
    int64_t enqueued_ns = 0;
    bool started = true;  // its kernel started on the GPU
  };
  // What `rank` of `comm` had in flight at its last report, oldest first (empty when unknown,
  // finalized or silent).
  std::vector<InFlight> InFlightOf(const CommKey& comm, int rank) const;

 private:
  // 64 bytes: one cache line.
  struct RankState {
    bool seen = false;
    bool finalized = false;
    bool silent = false;
    uint8_t reports = 0;  // reports seen, modulo 256 (a multiple of kTransitWindow)
    // How much longer than the rank's quickest recent report the last one took to come, in µs
    // (at most the hang threshold): a report that waited in its agent's queue or spool tells
    // where the rank stood that much earlier. The plugin's clock never meets the aggregator's:
    // only differences of one rank's own reports' transit times count.
    int32_t late_us = 0;
    int64_t last_report_ns = 0;
    // The quickest (arrival - interval end) of the reports of this window and of the last one
    // (kTransitWindow reports each): the clocks' offset plus the shortest delivery, followed as
    // they drift or step.
    int64_t quickest_transit_ns[2] = {INT64_MAX, INT64_MAX};
    std::vector<InFlight> in_flight;  // at the last report, oldest first
    int64_t silent_since_ns = 0;
    // When the last report was taken, on the aggregator's clock.
    int64_t as_of_ns() const { return last_report_ns - int64_t{late_us} * 1000; }
  };
  struct CommState {
    int nranks = 0;
    absl::btree_map<int, RankState> ranks;  // the ranks that reported (rank_set.h)
    int silent_ranks = 0;                   // of them, silent
    // Lower bounds, exact at the last scan and only ever lowered since, of the oldest report of a
    // reporting rank and of the oldest operation in flight: while neither is old enough, no rank
    // can be silent and no operation hung, and Evaluate skips the communicator's ranks (a tick
    // walked all of them, 5 % of the aggregator's CPU at 16,384 ranks).
    int64_t oldest_report_ns = 0;
    int64_t oldest_enqueued_ns = INT64_MAX;
    bool hung = false;
    HangView hang;
  };
  static constexpr uint8_t kTransitWindow = 32;
  static_assert(sizeof(RankState) == 64, "one cache line");
  bool FindHang(const CommKey& key, const CommState& cs, int64_t now_ns, HangView* out) const;
  // The rank's stuck point-to-point operation has no counterpart in flight on its peer.
  bool PeerMissing(const CommState& cs, int rank, const InFlight& op) const;

  const HangOptions options_;
  IndexedMap<CommKey, CommState> comms_;
  uint64_t generation_ = 1;  // raised whenever a cached Slot may point at moved or freed state
  std::vector<HangChange> pending_;  // ends caused by Update, reported by the next Evaluate
  int64_t listening_ns_ = 0;
  int64_t heard_from_ns_ = 0;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_HANG_H_
