// The median of a sample (the mean of the two middle values for an even count; 0 when empty).
// Used by the detectors on every collective, whose windows are small: O(n) with nth_element on a
// copy kept on the stack up to 64 values (no allocation on the hot path).
#ifndef NCCLWATCH_AGGREGATOR_DETECT_MEDIAN_H_
#define NCCLWATCH_AGGREGATOR_DETECT_MEDIAN_H_

#include <algorithm>
#include <span>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace ncclwatch::aggregator {

inline double Median(std::span<const double> values) {
  if (values.empty()) return 0;
  absl::InlinedVector<double, 64> v(values.begin(), values.end());
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + mid);
  return (lo + hi) / 2;
}

// A sliding window's median kept up to date as the window moves: `sorted` holds the window's
// values in ascending order; `evicted` (nullptr while the window grows) leaves it and `added`
// enters. Returns the new median, equal to Median() of the window, in O(n) moves instead of a
// selection over a copy on every value (the detectors do this for every rank of every joined
// collective).
inline double SlideMedian(std::vector<double>& sorted, const double* evicted, double added) {
  auto found =
      evicted == nullptr ? sorted.end() : std::lower_bound(sorted.begin(), sorted.end(), *evicted);
  if (found == sorted.end() || *found != *evicted) {
    sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), added), added);
  } else if (added >= *found) {
    // The values between the evicted one and the added one's place move down one: one pass
    // where an erase and an insert moved the tail twice.
    auto to = std::upper_bound(found, sorted.end(), added);
    std::move(found + 1, to, found);
    *(to - 1) = added;
  } else {
    auto to = std::upper_bound(sorted.begin(), found, added);
    std::move_backward(to, found, found + 1);
    *to = added;
  }
  const size_t mid = sorted.size() / 2;
  return sorted.size() % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_MEDIAN_H_
