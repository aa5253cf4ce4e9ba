#include "aggregator/straggler.h"

#include <algorithm>

#include "aggregator/median.h"

namespace ncclwatch::aggregator {

RankScore StragglerDetector::Score(int rank, const RankWindow& w) const {
  RankScore s;
  s.rank = rank;
  s.observations = static_cast<int>(w.lateness.size());
  s.lateness_ns = Median(w.lateness);
  if (!w.last.empty()) {
    s.arrived_last_fraction =
        static_cast<double>(std::count(w.last.begin(), w.last.end(), true)) / w.last.size();
  }
  s.flagged = w.flagged;
  return s;
}

std::vector<FlagChange> StragglerDetector::Observe(const CompletedGroup& group) {
  std::vector<FlagChange> changes;
  const size_t n = group.duration_ns.size();
  if (n < 2) return changes;
  auto& windows = comms_[group.comm];
  if (windows.size() != n) windows.assign(n, RankWindow{});

  uint64_t max_d = *std::max_element(group.duration_ns.begin(), group.duration_ns.end());
  uint64_t min_d = *std::min_element(group.duration_ns.begin(), group.duration_ns.end());
  const size_t cap = static_cast<size_t>(options_.window);
  for (size_t r = 0; r < n; ++r) {
    RankWindow& w = windows[r];
    double lateness = static_cast<double>(max_d - group.duration_ns[r]);
    bool last = group.duration_ns[r] == min_d;
    if (w.lateness.size() < cap) {
      w.lateness.push_back(lateness);
      w.last.push_back(last);
    } else {
      w.lateness[w.next] = lateness;
      w.last[w.next] = last;
    }
    w.next = (w.next + 1) % cap;

    if (static_cast<int>(w.lateness.size()) < options_.min_groups) continue;
    double median = Median(w.lateness);
    bool flag = w.flagged ? median >= options_.threshold_ns * options_.clear_ratio
                          : median >= options_.threshold_ns;
    if (flag != w.flagged) {
      w.flagged = flag;
      changes.push_back(FlagChange{group.comm, Score(static_cast<int>(r), w)});
    }
  }
  return changes;
}

std::vector<RankScore> StragglerDetector::Scores(const CommKey& comm) const {
  std::vector<RankScore> out;
  auto it = comms_.find(comm);
  if (it == comms_.end()) return out;
  for (size_t r = 0; r < it->second.size(); ++r) {
    out.push_back(Score(static_cast<int>(r), it->second[r]));
  }
  return out;
}

}  // namespace ncclwatch::aggregator
