// Ranks a communicator claims but that never reported, named without allocating per claimed rank.
//
// Every per-rank structure of the detectors is keyed by the ranks that really reported (a sparse
// map), so one report claiming nranks = 2^20 costs one entry, not a million (docs/security.md).
// Findings about ranks that never reported (a hang's missing ranks, a coverage gap) name at most
// kMaxNamedRanks of them and count the rest.
#ifndef NCCLWATCH_AGGREGATOR_DETECT_RANK_SET_H_
#define NCCLWATCH_AGGREGATOR_DETECT_RANK_SET_H_

#include <algorithm>
#include <cstddef>
#include <map>
#include <vector>

namespace ncclwatch::aggregator {

inline constexpr size_t kMaxNamedRanks = 256;

// Appends to `out` the lowest ranks of [0, nranks) that are not keys of `present`, at most
// `limit` of them; O(limit + present.size()) whatever nranks is.
// `present`: a map ordered by rank (std::map, absl::btree_map).
template <typename RankMap>
void AppendAbsentRanks(const RankMap& present, int nranks, size_t limit, std::vector<int>* out) {
  int next = 0;  // the lowest rank not yet considered
  auto it = present.begin();
  size_t added = 0;
  while (next < nranks && added < limit) {
    while (it != present.end() && it->first < next) ++it;
    if (it != present.end() && it->first == next) {
      ++next;
      continue;
    }
    const int stop = it == present.end() ? nranks : std::min(it->first, nranks);
    while (next < stop && added < limit) {  // ranks [next, stop) are absent
      out->push_back(next++);
      ++added;
    }
  }
}

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_RANK_SET_H_
