#include "aggregator/detect/straggler.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "aggregator/detect/median.h"

namespace ncclwatch::aggregator {
namespace {

// Floor of the MAD in the z-score, so that identical latenesses do not divide by zero.
constexpr double kMinMadNs = 1'000;

}  // namespace

void StragglerDetector::Lateness(const CompletedGroup& group, LatenessBasis* basis,
                                 std::vector<double>* lateness) const {
  const size_t n = group.duration_ns.size();
  std::vector<double>& out = *lateness;
  out.resize(n);
  *basis = LatenessBasis::kKernelDurations;
  if (group.sync_wait_ns.size() == n &&
      std::all_of(group.sync_wait_ns.begin(), group.sync_wait_ns.end(),
                  [](int64_t w) { return w > 0; })) {
    const int64_t max_wait =
        *std::max_element(group.sync_wait_ns.begin(), group.sync_wait_ns.end());
    for (size_t r = 0; r < n; ++r) out[r] = static_cast<double>(max_wait - group.sync_wait_ns[r]);
    *basis = LatenessBasis::kSyncWait;
    return;
  }
  if (group.gpu_start_ns.size() == n) {
    uint64_t min_end = UINT64_MAX, max_end = 0, min_start = UINT64_MAX;
    for (size_t r = 0; r < n; ++r) {
      const uint64_t end = group.gpu_start_ns[r] + group.duration_ns[r];
      min_end = std::min(min_end, end);
      max_end = std::max(max_end, end);
      min_start = std::min(min_start, group.gpu_start_ns[r]);
    }
    if (min_start > 0 && static_cast<double>(max_end - min_end) <= options_.align_tolerance_ns) {
      for (size_t r = 0; r < n; ++r) {
        out[r] = static_cast<double>(group.gpu_start_ns[r] - min_start);
      }
      *basis = LatenessBasis::kAlignedClocks;
      return;
    }
  }
  const uint64_t max_d = *std::max_element(group.duration_ns.begin(), group.duration_ns.end());
  for (size_t r = 0; r < n; ++r) out[r] = static_cast<double>(max_d - group.duration_ns[r]);
}

StragglerDetector::PeerStats StragglerDetector::Peers(const ClassWindows& c,
                                                      std::vector<double>* scratch) const {
  std::vector<double>& medians = *scratch;
  medians.clear();
  for (const RankWindow& w : c.ranks) {
    if (static_cast<int>(w.lateness.size()) >= options_.min_groups) medians.push_back(w.median);
  }
  PeerStats p;
  if (medians.empty()) return p;
  // Lower quartile: robust to up to three quarters of the ranks being late together.
  auto q = medians.begin() + (medians.size() - 1) / 4;
  std::nth_element(medians.begin(), q, medians.end());
  p.baseline = *q;
  p.median = Median(medians);
  for (double& m : medians) m = std::abs(m - p.median);
  p.mad = Median(medians);
  return p;
}

RankScore StragglerDetector::Score(int rank, const ClassWindows& c, const PeerStats& peers,
                                   bool flagged) const {
  const RankWindow& w = c.ranks[rank];
  RankScore s;
  s.rank = rank;
  s.op = c.op;
  s.observations = static_cast<int>(w.lateness.size());
  s.lateness_ns = w.median;
  s.peer_baseline_ns = peers.baseline;
  s.excess_ns = w.median - peers.baseline;
  s.peer_z = (w.median - peers.median) / (1.4826 * std::max(peers.mad, kMinMadNs));
  // Ratios of tiny latenesses are noise: compare with at least 10 us.
  const double floor_ns = 10'000;
  s.history_ratio = (w.median + floor_ns) / (std::max(w.history, 0.0) + floor_ns);
  if (!w.last.empty()) {
    s.arrived_last_fraction =
        static_cast<double>(std::count(w.last.begin(), w.last.end(), true)) / w.last.size();
  }
  s.basis = c.basis;
  s.clocks_aligned = c.basis == LatenessBasis::kAlignedClocks;
  s.flagged = flagged;
  return s;
}

std::vector<FlagChange> StragglerDetector::Observe(const CompletedGroup& group, CachedSlot* slot,
                                                   bool* class_flags_changed) {
  std::vector<FlagChange> changes;
  const size_t n = group.duration_ns.size();
  if (n < 2) return changes;
  const bool exchange = !group.members.empty();
  const size_t nranks = exchange ? static_cast<size_t>(group.nranks) : n;
  if (exchange && (group.members.size() != n ||
                   std::any_of(group.members.begin(), group.members.end(),
                               [&](int r) { return r < 0 || static_cast<size_t>(r) >= nranks; }))) {
    return changes;
  }
  const bool cached = slot != nullptr && slot->generation == generation_ && slot->comm != nullptr;
  CommWindows& comm = cached ? *static_cast<CommWindows*>(slot->comm) : comms_[group.comm];
  if (slot != nullptr) *slot = CachedSlot{&comm, nullptr, generation_};
  if (comm.flagged_in.size() != nranks) comm = CommWindows{{}, std::vector<uint8_t>(nranks, 0)};
  auto cls = std::find_if(comm.classes.begin(), comm.classes.end(),
                          [&](const ClassWindows& k) { return k.op == group.op; });
  if (cls == comm.classes.end()) {
    comm.classes.push_back(ClassWindows{group.op, std::vector<RankWindow>(nranks), {}});
    cls = comm.classes.end() - 1;
  }
  ClassWindows& c = *cls;
  // Warm-up: as many groups as move every rank `warmup_groups` times.
  if (++c.seen <= options_.warmup_groups * GroupsPerMove(exchange, static_cast<int64_t>(nranks))) {
    return changes;
  }

  Lateness(group, &c.basis, &lateness_);
  const std::vector<double>& lateness = lateness_;
  const double max_lateness = *std::max_element(lateness.begin(), lateness.end());
  const size_t cap = static_cast<size_t>(options_.window);
  for (size_t i = 0; i < n; ++i) {
    const size_t r = group.RankAt(i);
    RankWindow& w = c.ranks[r];
    const bool last = lateness[i] == max_lateness;
    double evicted = 0;
    const bool full = w.lateness.size() >= cap;
    if (!full) {
      w.lateness.push_back(lateness[i]);
      w.last.push_back(last);
    } else {
      evicted = w.lateness[w.next];
      w.lateness[w.next] = lateness[i];
      w.last[w.next] = last;
    }
    w.next = (w.next + 1) % cap;
    w.median = SlideMedian(w.sorted, full ? &evicted : nullptr, lateness[i]);
    // The own history learns only while the rank is not flagged, so a fault does not become the
    // rank's new normal.
    if (w.history < 0) {
      w.history = lateness[i];
    } else if (!w.flagged) {
      w.history += options_.history_alpha * (lateness[i] - w.history);
    }
  }

  if (!exchange || c.exchanges_since_peers < 0 ||
      ++c.exchanges_since_peers >= static_cast<int>(nranks / 2)) {
    c.peers = Peers(c, &medians_);
    c.exchanges_since_peers = 0;
  }
  const PeerStats& peers = c.peers;
  for (size_t i = 0; i < n; ++i) {
    const size_t r = group.RankAt(i);
    RankWindow& w = c.ranks[r];
    if (static_cast<int>(w.lateness.size()) < options_.min_groups) continue;
    auto judge = [&] {
      const double excess = w.median - peers.baseline;
      return w.flagged ? excess >= options_.threshold_ns * options_.clear_ratio
                       : excess >= options_.threshold_ns;
    };
    bool flag = judge();
    if (flag != w.flagged && exchange && c.exchanges_since_peers > 0) {
      c.peers = Peers(c, &medians_);  // a flag changes on fresh statistics only
      c.exchanges_since_peers = 0;
      flag = judge();
    }
    if (flag == w.flagged) continue;
    w.flagged = flag;
    c.flagged += flag ? 1 : -1;
    if (class_flags_changed != nullptr) *class_flags_changed = true;
    // The rank's flag in the communicator changes with its first flagged class and its last.
    const bool was = comm.flagged_in[r] > 0;
    comm.flagged_in[r] += flag ? 1 : -1;
    const bool is = comm.flagged_in[r] > 0;
    if (was != is) {
      changes.push_back(FlagChange{group.comm, Score(static_cast<int>(r), c, peers, is)});
    }
  }
  return changes;
}

std::vector<RankScore> StragglerDetector::Worst(const CommWindows& comm, Ranks which,
                                                const ClassFilter& skip) const {
  const bool notable_only = which != Ranks::kAll;
  const bool flagged_only = which == Ranks::kFlagged;
  std::vector<RankScore> out;
  std::vector<std::optional<PeerStats>> peers(comm.classes.size());  // where a rank needs them
  std::vector<double> medians;                                       // Peers' scratch
  std::vector<bool> counted(comm.classes.size(), true);
  for (size_t k = 0; k < comm.classes.size(); ++k) counted[k] = !skip || !skip(comm.classes[k].op);
  for (size_t r = 0; r < comm.flagged_in.size(); ++r) {
    bool flagged = comm.flagged_in[r] > 0;
    if (flagged_only && !flagged) continue;
    if (flagged && skip) {
      flagged = false;
      for (size_t k = 0; k < comm.classes.size(); ++k) {
        flagged = flagged || (counted[k] && comm.classes[k].ranks[r].flagged);
      }
    }
    if (flagged_only && !flagged) continue;
    std::optional<RankScore> worst;
    for (size_t k = 0; k < comm.classes.size(); ++k) {
      const ClassWindows& c = comm.classes[k];
      if (!counted[k]) continue;
      const RankWindow& w = c.ranks[r];
      if (flagged ? !w.flagged : notable_only && w.median < options_.threshold_ns) continue;
      // A collective class's statistics are refreshed with each of its collectives: as of now.
      if (!peers[k]) peers[k] = c.exchanges_since_peers == 0 ? c.peers : Peers(c, &medians);
      RankScore s = Score(static_cast<int>(r), c, *peers[k], flagged);
      if (!worst || s.excess_ns > worst->excess_ns) worst = std::move(s);
    }
    if (worst) {
      out.push_back(std::move(*worst));
    } else if (!notable_only) {
      RankScore none;  // no collective of the communicator completed with it yet
      none.rank = static_cast<int>(r);
      out.push_back(std::move(none));
    }
  }
  return out;
}

std::vector<RankScore> StragglerDetector::Scores(const CommKey& comm) const {
  auto it = comms_.find(comm);
  return it == comms_.end() ? std::vector<RankScore>{} : Worst(it->second, Ranks::kAll);
}

std::vector<RankScore> StragglerDetector::Notable(const CommKey& comm,
                                                  const ClassFilter& skip) const {
  auto it = comms_.find(comm);
  return it == comms_.end() ? std::vector<RankScore>{} : Worst(it->second, Ranks::kNotable, skip);
}

std::vector<RankScore> StragglerDetector::Flagged(const CommKey& comm,
                                                  const ClassFilter& skip) const {
  auto it = comms_.find(comm);
  return it == comms_.end() ? std::vector<RankScore>{} : Worst(it->second, Ranks::kFlagged, skip);
}

bool StragglerDetector::FlaggedBesides(const CommKey& comm, std::string_view op) const {
  auto it = comms_.find(comm);
  if (it == comms_.end()) return false;
  return std::any_of(it->second.classes.begin(), it->second.classes.end(),
                     [&](const ClassWindows& c) { return c.flagged > 0 && c.op != op; });
}

std::optional<double> StragglerDetector::LatenessIn(const CommKey& comm, const std::string& op,
                                                    int rank) const {
  auto it = comms_.find(comm);
  if (it == comms_.end() || rank < 0) return std::nullopt;
  for (const ClassWindows& c : it->second.classes) {
    if (c.op != op || static_cast<size_t>(rank) >= c.ranks.size()) continue;
    const RankWindow& w = c.ranks[rank];
    if (static_cast<int>(w.lateness.size()) < options_.min_groups) return std::nullopt;
    return w.median;
  }
  return std::nullopt;
}

}  // namespace ncclwatch::aggregator
