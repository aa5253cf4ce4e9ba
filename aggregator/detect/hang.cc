#include "aggregator/detect/hang.h"

#include <algorithm>
#include <set>

#include "aggregator/detect/rank_set.h"

namespace ncclwatch::aggregator {

void HangDetector::Update(const CommKey& comm, const RankInterval& report, int64_t now_ns,
                          CachedSlot* slot) {
  const bool cached = slot != nullptr && slot->generation == generation_ && slot->comm != nullptr &&
                      static_cast<CommState*>(slot->comm)->nranks == report.nranks;
  CommState& cs = cached ? *static_cast<CommState*>(slot->comm) : comms_[comm];
  if (cs.nranks != report.nranks) {
    // New communicator, or re-created with another size under the same hash: start over, and
    // close what was open about the old one.
    if (cs.hung) pending_.push_back(HangChange{false, false, cs.hang, {}});
    for (const auto& [r, rs] : cs.ranks) {
      if (!rs.silent) continue;
      HangChange end{false, true, {}, {}};
      end.rank = SilentView{comm, r, rs.last_report_ns, rs.silent_since_ns};
      pending_.push_back(std::move(end));
    }
    cs = CommState{};
    cs.nranks = report.nranks;
    ++generation_;
  }
  RankState* found = cached ? static_cast<RankState*>(slot->rank) : nullptr;
  if (found == nullptr) {
    auto [it, added] = cs.ranks.try_emplace(report.rank);
    if (added) ++generation_;  // a btree insert may move its other ranks' states
    found = &it->second;
    if (slot != nullptr) *slot = CachedSlot{&cs, found, generation_};
  }
  RankState& rs = *found;
  rs.seen = true;
  rs.last_report_ns = now_ns;
  rs.late_us = 0;
  if (report.interval_end_ns > 0) {
    const int64_t transit = now_ns - report.interval_end_ns;
    if (++rs.reports % kTransitWindow == 0) {
      rs.quickest_transit_ns[1] = rs.quickest_transit_ns[0];
      rs.quickest_transit_ns[0] = INT64_MAX;
    }
    rs.quickest_transit_ns[0] = std::min(rs.quickest_transit_ns[0], transit);
    const int64_t late = transit - std::min(rs.quickest_transit_ns[0], rs.quickest_transit_ns[1]);
    rs.late_us = static_cast<int32_t>(
        std::min({late, options_.threshold_ns, int64_t{2'000'000'000'000}}) / 1000);
  }
  cs.oldest_report_ns = std::min(cs.oldest_report_ns, now_ns);
  rs.finalized = report.final;
  if (rs.finalized) {
    rs.in_flight.clear();
    return;
  }
  // Written over the last report's entries (their strings keep their room): nearly every report
  // has about as many operations in flight as the one before.
  rs.in_flight.resize(report.in_flight.size());
  for (size_t i = 0; i < report.in_flight.size(); ++i) {
    const InFlightOp& op = report.in_flight[i];
    InFlight& mine = rs.in_flight[i];
    mine.op.assign(op.op);
    mine.seq = op.p2p ? 0 : op.seq;
    mine.p2p = op.p2p;
    mine.peer = op.peer;
    mine.enqueued_ns = now_ns - static_cast<int64_t>(op.age_ns);
    mine.started = op.started;
    cs.oldest_enqueued_ns = std::min(cs.oldest_enqueued_ns, mine.enqueued_ns);
  }
}

bool HangDetector::PeerMissing(const CommState& cs, int rank, const InFlight& op) const {
  if (op.peer < 0 || op.peer >= cs.nranks) return false;
  auto found = cs.ranks.find(op.peer);
  if (found == cs.ranks.end()) return true;  // it never reported
  const RankState& peer = found->second;
  if (!peer.seen || peer.finalized || peer.silent) return true;
  const std::string counterpart = op.op == "Send" ? "Recv" : "Send";
  return std::none_of(peer.in_flight.begin(), peer.in_flight.end(), [&](const InFlight& c) {
    return c.p2p && c.peer == rank && c.op == counterpart;
  });
}

bool HangDetector::FindHang(const CommKey& key, const CommState& cs, int64_t now_ns,
                            HangView* out) const {
  const InFlight* oldest = nullptr;
  for (const auto& [r, rs] : cs.ranks) {
    if (!rs.seen || rs.finalized || rs.silent) continue;
    for (const InFlight& c : rs.in_flight) {
      if (now_ns - c.enqueued_ns < options_.threshold_ns) continue;
      if (oldest == nullptr || c.enqueued_ns < oldest->enqueued_ns) oldest = &c;
    }
  }
  if (oldest == nullptr) return false;
  HangView h;
  h.comm = key;
  h.op = oldest->p2p ? kP2pHangOp : oldest->op;
  h.seq = oldest->seq;
  h.enqueued_ns = oldest->enqueued_ns;
  // The verdict waits until every rank has told where it stands since the operation became old
  // enough: a report taken after that (listing it in flight or not), silence, or finalize.
  // Otherwise a rank that died holding a collective would first look like a fabric hang, and one
  // whose report was held up on the way would be named missing from where it stood before.
  const int64_t fresh_after = oldest->enqueued_ns + options_.threshold_ns;
  std::set<int> missing, arrived;  // among the reporting ranks (and, for p2p, their peers)
  for (const auto& [r, rs] : cs.ranks) {
    const bool gone = !rs.seen || rs.finalized || rs.silent;
    if (!gone && rs.as_of_ns() < fresh_after) return false;  // not known yet
    if (gone) {
      if (!oldest->p2p) missing.insert(r);  // for p2p, only a stuck peer's absence counts
      continue;
    }
    bool here = false;
    for (const InFlight& c : rs.in_flight) {
      if (oldest->p2p) {
        if (!c.p2p || now_ns - c.enqueued_ns < options_.threshold_ns) continue;
        here = true;
        if (PeerMissing(cs, r, c)) missing.insert(c.peer);
      } else if (!c.p2p && c.op == h.op && c.seq == h.seq) {
        here = true;
      }
    }
    if (here) {
      arrived.insert(r);
    } else if (!oldest->p2p) {
      missing.insert(r);
    }
  }
  // Ranks that never reported never reached a collective: counted all, named up to a bound.
  if (!oldest->p2p) {
    h.missing_count = cs.nranks - static_cast<int>(cs.ranks.size());
    AppendAbsentRanks(cs.ranks, cs.nranks, kMaxNamedRanks, &h.missing);
  }
  h.missing_count += static_cast<int>(missing.size());
  h.missing.insert(h.missing.end(), missing.begin(), missing.end());
  std::sort(h.missing.begin(), h.missing.end());
  for (int r : arrived) h.arrived += missing.count(r) ? 0 : 1;
  h.kind = h.missing.empty() ? HangKind::kNoProgress : HangKind::kMissingRanks;
  *out = std::move(h);
  return true;
}

std::vector<HangChange> HangDetector::Evaluate(int64_t now_ns) {
  std::vector<HangChange> changes = std::move(pending_);
  pending_.clear();
  for (auto& [key, cs] : comms_) {
    // Nothing can have changed while every reporting rank was heard from within silent_after_ns
    // and no operation is in flight for threshold_ns: a report's time (and the time a rank is
    // heard from, at least that) only grows, and an operation's enqueue time is fixed.
    const bool may_be_silent =
        cs.silent_ranks > 0 || now_ns - cs.oldest_report_ns >= options_.silent_after_ns;
    const bool may_hang = cs.hung || now_ns - cs.oldest_enqueued_ns >= options_.threshold_ns;
    if (!may_be_silent && !may_hang) continue;
    // A rank is silent when its reports stopped while the rest of the communicator carried on
    // reporting for at least `silent_after_ns` more: the job is alive and this rank is gone. Ranks
    // of a job that ends or is cancelled stop within seconds of each other (and normally send a
    // final report), so nobody is singled out then.
    int64_t newest = 0;
    cs.oldest_report_ns = INT64_MAX;
    cs.oldest_enqueued_ns = INT64_MAX;
    for (const auto& [r, rs] : cs.ranks) {
      if (rs.finalized) continue;
      newest = std::max(newest, rs.last_report_ns);
      if (rs.seen) cs.oldest_report_ns = std::min(cs.oldest_report_ns, rs.last_report_ns);
      for (const InFlight& c : rs.in_flight) {
        cs.oldest_enqueued_ns = std::min(cs.oldest_enqueued_ns, c.enqueued_ns);
      }
    }
    for (auto& [r, rs] : cs.ranks) {
      // Once flagged, a rank stays silent until it reports again.
      const bool before_restart = !rs.silent && rs.last_report_ns < listening_ns_;
      const int64_t heard =
          before_restart ? std::max(rs.last_report_ns, heard_from_ns_) : rs.last_report_ns;
      const bool stale = rs.seen && !rs.finalized && now_ns - heard >= options_.silent_after_ns;
      const bool silent = stale && (rs.silent || newest - heard >= options_.silent_after_ns);
      if (silent == rs.silent) continue;
      rs.silent = silent;
      cs.silent_ranks += silent ? 1 : -1;
      if (silent) rs.silent_since_ns = now_ns;
      HangChange change;
      change.start = silent;
      change.silent = true;
      change.rank = SilentView{key, r, rs.last_report_ns, rs.silent_since_ns};
      changes.push_back(std::move(change));
    }

    HangView found;
    bool hung = FindHang(key, cs, now_ns, &found);
    if (cs.hung && (!hung || found.op != cs.hang.op || found.seq != cs.hang.seq)) {
      changes.push_back(HangChange{false, false, cs.hang, {}});
      cs.hung = false;
    }
    if (!hung) continue;
    found.since_ns = cs.hung ? cs.hang.since_ns : now_ns;
    const bool started = !cs.hung;
    cs.hang = found;
    cs.hung = true;
    if (started) changes.push_back(HangChange{true, false, cs.hang, {}});
  }
  return changes;
}

std::vector<HangView> HangDetector::Hangs() const {
  std::vector<HangView> out;
  for (const auto& [key, cs] : comms_) {
    if (cs.hung) out.push_back(cs.hang);
  }
  return out;
}

std::vector<SilentView> HangDetector::Silent() const {
  std::vector<SilentView> out;
  for (const auto& [key, cs] : comms_) {
    for (const auto& [r, rs] : cs.ranks) {
      if (rs.silent) out.push_back(SilentView{key, r, rs.last_report_ns, rs.silent_since_ns});
    }
  }
  return out;
}

bool HangDetector::Hung(const CommKey& comm) const {
  const CommState* cs = comms_.Find(comm);
  return cs != nullptr && cs->hung;
}

bool HangDetector::Missing(const CommKey& comm, int rank) const {
  const CommState* cs = comms_.Find(comm);
  if (cs == nullptr || !cs->hung) return false;
  const auto& m = cs->hang.missing;
  return std::binary_search(m.begin(), m.end(), rank);
}

std::vector<HangDetector::InFlight> HangDetector::InFlightOf(const CommKey& comm, int rank) const {
  const CommState* cs = comms_.Find(comm);
  if (cs == nullptr) return {};
  auto found = cs->ranks.find(rank);
  if (found == cs->ranks.end()) return {};
  const RankState& rs = found->second;
  if (!rs.seen || rs.finalized || rs.silent) return {};
  return rs.in_flight;
}

bool HangDetector::AnySilent(const CommKey& comm) const {
  const CommState* cs = comms_.Find(comm);
  return cs != nullptr && cs->silent_ranks > 0;
}

int HangDetector::SilentRanks(const CommKey& comm) const {
  const CommState* cs = comms_.Find(comm);
  return cs != nullptr ? cs->silent_ranks : 0;
}

bool HangDetector::IsSilent(const CommKey& comm, int rank) const {
  const CommState* cs = comms_.Find(comm);
  if (cs == nullptr) return false;
  auto found = cs->ranks.find(rank);
  return found != cs->ranks.end() && found->second.silent;
}

}  // namespace ncclwatch::aggregator
