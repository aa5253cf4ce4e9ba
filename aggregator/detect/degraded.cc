#include "aggregator/detect/degraded.h"

#include <algorithm>
#include <cmath>

#include "aggregator/detect/median.h"
#include "common/op_math.h"

namespace ncclwatch::aggregator {

double DegradedDetector::Baseline::Median() const {
  return aggregator::Median(absl::InlinedVector<double, 64>(values.begin(), values.end()));
}

bool DegradedDetector::CommState::degraded() const {
  return std::any_of(keys.begin(), keys.end(), [](const auto& kv) { return kv.second.degraded; });
}

bool DegradedDetector::CommState::TrendingLow() const {
  return std::any_of(keys.begin(), keys.end(),
                     [](const auto& kv) { return kv.second.low_streak > 0; });
}

std::set<std::string> DegradedDetector::Nodes(const CommState& cs) const {
  std::set<std::string> nodes;
  for (const auto& [rank, node] : cs.node_of_rank) nodes.insert(node);
  return nodes;
}

DegradedView DegradedDetector::View(const CommKey& key, const CommState& cs, const std::string& op,
                                    const std::string& size, const KeyState& ks) const {
  DegradedView v;
  v.comm = key;
  v.hybrid = cs.hybrid;
  v.op = op;
  v.message_size = size;
  v.bus_gbs = ks.latest_gbs;
  auto b = baselines_.find(BaselineKey{cs.hybrid, op, size, cs.nranks});
  if (b != baselines_.end()) v.baseline_gbs = b->second.Median();
  v.nodes = Nodes(cs);
  return v;
}

void DegradedDetector::Observe(const CommKey& comm, const RankInterval& report) {
  CommState& cs = comms_[comm];
  // Re-created with another size under the same hash: its windows and baseline key are another's.
  if (cs.nranks != 0 && cs.nranks != report.nranks) cs.keys.clear();
  cs.hybrid = report.n_nodes > 1;
  cs.nranks = report.nranks;
  // Nearly always the node it had: compared, not rebuilt, on every report.
  std::string& node = cs.node_of_rank[report.rank];
  if (node != report.node) node.assign(report.node);
}

void DegradedDetector::JudgeWindow(const CommState& cs,
                                   const std::pair<std::string, std::string>& op_size,
                                   KeyState& ks) {
  const double gbs = ks.window_best;
  Baseline& baseline = baselines_[BaselineKey{cs.hybrid, op_size.first, op_size.second, cs.nranks}];
  ks.latest_gbs = gbs;
  const bool judged = static_cast<int>(baseline.values.size()) >= options_.min_baseline;
  const double base = judged ? baseline.Median() : 0;
  const bool low = judged && gbs < (1 - options_.fraction) * base;
  const bool ok = !judged || gbs >= (1 - options_.fraction / 2) * base;
  ks.low_streak = low ? ks.low_streak + 1 : 0;
  ks.ok_streak = ok ? ks.ok_streak + 1 : 0;
  if (!low && !ks.degraded) {
    for (double v : ks.window_values) {
      // The window in which the wire slowed: its best is healthy, but its low collectives must
      // not teach the baseline the slow speed.
      if (judged && v < (1 - options_.fraction) * base) continue;
      baseline.values.push_back(v);
      if (static_cast<int>(baseline.values.size()) > options_.baseline_window) {
        baseline.values.pop_front();
      }
    }
  }
  if (!ks.degraded && ks.low_streak >= options_.intervals) {
    ks.degraded = true;
  } else if (ks.degraded && ks.ok_streak >= options_.intervals) {
    ks.degraded = false;
  }
}

void DegradedDetector::CloseWindow(const CommState& cs,
                                   const std::pair<std::string, std::string>& op_size,
                                   KeyState& ks) {
  if (!ks.window_judged) JudgeWindow(cs, op_size, ks);
  ks.window_best = 0;
  ks.window_values.clear();
  ks.window_judged = false;
}

std::vector<DegradedChange> DegradedDetector::ObserveCollective(const CommKey& comm, int nranks,
                                                                std::string_view op, uint64_t bytes,
                                                                uint64_t fastest_ns,
                                                                int64_t ran_at_ns) {
  std::vector<DegradedChange> changes;
  // Small messages are latency-bound: their bus bandwidth says nothing about the wire.
  if (bytes < options_.min_message_bytes || fastest_ns == 0) return changes;
  const double gbs = ComputeBandwidth(op, nranks, bytes, fastest_ns).bus_gbs;
  if (!(gbs > 0)) return changes;
  CommState& cs = comms_[comm];
  if (cs.nranks == 0) cs.nranks = nranks;
  const bool was_degraded = cs.degraded();
  const std::pair<std::string, std::string> op_size{std::string(op), MessageSizeBucket(bytes)};
  // The communicator's other keys whose traffic stopped: a window left open is judged once it is
  // two windows old, and a key quiet for ten no longer counts as trending low (which would veto
  // naming a network suspect on its nodes for as long as the job runs).
  for (auto& [other_key, other] : cs.keys) {
    if (other_key == op_size) continue;
    if (other.window_best > 0 && ran_at_ns - other.window_start_ns >= 2 * options_.window_ns) {
      CloseWindow(cs, other_key, other);
    }
    if (other.low_streak > 0 && ran_at_ns - other.last_ns >= 10 * options_.window_ns) {
      other.low_streak = 0;
    }
  }
  KeyState& ks = cs.keys[op_size];
  ks.last_ns = ran_at_ns;
  if (ks.window_best > 0 && ran_at_ns - ks.window_start_ns >= options_.window_ns) {
    CloseWindow(cs, op_size, ks);
  }
  if (ks.window_best == 0) ks.window_start_ns = ran_at_ns;
  ks.window_best = std::max(ks.window_best, gbs);
  if (static_cast<int>(ks.window_values.size()) < options_.baseline_window) {
    ks.window_values.push_back(gbs);
  }
  // Enough collectives of the window all low already: no need to wait for it to close.
  if (!ks.window_judged &&
      static_cast<int>(ks.window_values.size()) >= options_.early_collectives) {
    auto b = baselines_.find(BaselineKey{cs.hybrid, op_size.first, op_size.second, cs.nranks});
    if (b != baselines_.end() &&
        static_cast<int>(b->second.values.size()) >= options_.min_baseline &&
        ks.window_best < (1 - options_.fraction) * b->second.Median()) {
      JudgeWindow(cs, op_size, ks);
      ks.window_judged = true;
    }
  }

  const bool now_degraded = cs.degraded();
  const bool trending = cs.TrendingLow();
  const bool trend_changed = trending != cs.trending_low;
  cs.trending_low = trending;
  // An NVLink-only communicator going bad vetoes blaming the network on its node.
  if (!cs.hybrid && trend_changed && now_degraded == was_degraded) {
    UpdateSuspects(comm.job_id, &changes);
  }
  if (now_degraded != was_degraded) {
    // Described by its worst key relative to the baseline.
    changes.push_back(DegradedChange{now_degraded, false, Worst(comm, cs, now_degraded), {}});
    UpdateSuspects(comm.job_id, &changes);
  }
  return changes;
}

std::map<std::string, int> DegradedDetector::ComputeSuspects(const std::string& job_id) const {
  std::set<std::string> common, healthy_hybrid, all_hybrid, bad_nvlink;
  std::map<std::string, int> through;
  bool any = false;
  for (const auto& [key, cs] : comms_) {
    if (key.job_id != job_id) continue;
    std::set<std::string> nodes = Nodes(cs);
    if (!cs.hybrid) {
      if (cs.degraded() || cs.trending_low) bad_nvlink.insert(nodes.begin(), nodes.end());
      continue;
    }
    all_hybrid.insert(nodes.begin(), nodes.end());
    if (!cs.degraded()) {
      healthy_hybrid.insert(nodes.begin(), nodes.end());
      continue;
    }
    for (const auto& n : nodes) ++through[n];
    if (!any) {
      common = nodes;
      any = true;
    } else {
      std::set<std::string> both;
      std::set_intersection(common.begin(), common.end(), nodes.begin(), nodes.end(),
                            std::inserter(both, both.begin()));
      common = std::move(both);
    }
  }
  std::map<std::string, int> out;
  if (!any) return out;
  // Only the network evidence narrows the set: nodes of every degraded hybrid communicator and of
  // no healthy one. If that leaves every hybrid node, nothing is singled out.
  std::set<std::string> candidates;
  for (const auto& n : common) {
    if (!healthy_hybrid.count(n)) candidates.insert(n);
  }
  if (candidates.size() >= all_hybrid.size()) return out;
  // A node whose NVLink-only communicators are degrading too has a problem beyond its network.
  for (const auto& n : candidates) {
    if (!bad_nvlink.count(n)) out[n] = through[n];
  }
  return out;
}

void DegradedDetector::UpdateSuspects(const std::string& job_id,
                                      std::vector<DegradedChange>* changes) {
  std::map<std::string, int> now = ComputeSuspects(job_id);
  std::map<std::string, int>& before = suspects_[job_id];
  for (const auto& [node, n] : before) {
    if (!now.count(node)) changes->push_back({false, true, {}, SuspectView{job_id, node, n}});
  }
  for (const auto& [node, n] : now) {
    if (!before.count(node)) changes->push_back({true, true, {}, SuspectView{job_id, node, n}});
  }
  before = std::move(now);
  if (before.empty()) suspects_.erase(job_id);
}

void DegradedDetector::Forget(const CommKey& comm) {
  comms_.erase(comm);
  std::vector<DegradedChange> ignored;
  UpdateSuspects(comm.job_id, &ignored);
}

DegradedView DegradedDetector::Worst(const CommKey& key, const CommState& cs,
                                     bool degraded_only) const {
  DegradedView worst;
  double worst_ratio = 2;
  for (const auto& [op_size, ks] : cs.keys) {
    if (degraded_only && !ks.degraded) continue;
    DegradedView v = View(key, cs, op_size.first, op_size.second, ks);
    double ratio = v.baseline_gbs > 0 ? v.bus_gbs / v.baseline_gbs : 1;
    if (ratio < worst_ratio) {
      worst_ratio = ratio;
      worst = std::move(v);
    }
  }
  worst.comm = key;
  return worst;
}

std::vector<DegradedView> DegradedDetector::Degraded() const {
  std::vector<DegradedView> out;
  for (const auto& [key, cs] : comms_) {
    if (cs.degraded()) out.push_back(Worst(key, cs, true));
  }
  return out;
}

std::vector<SuspectView> DegradedDetector::Suspects() const {
  std::vector<SuspectView> out;
  for (const auto& [job, nodes] : suspects_) {
    for (const auto& [node, n] : nodes) out.push_back(SuspectView{job, node, n});
  }
  return out;
}

bool DegradedDetector::IsDegraded(const CommKey& comm) const {
  const CommState* cs = comms_.Find(comm);
  return cs != nullptr && cs->degraded();
}

bool DegradedDetector::IsHybrid(const CommKey& comm) const {
  const CommState* cs = comms_.Find(comm);
  return cs != nullptr && cs->hybrid;
}

}  // namespace ncclwatch::aggregator
