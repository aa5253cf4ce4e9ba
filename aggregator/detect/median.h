// The median of a sample (the mean of the two middle values for an even count; 0 when empty).
// Used by the detectors, whose windows are small: O(n) with nth_element on a copy.
#ifndef NCCLWATCH_AGGREGATOR_DETECT_MEDIAN_H_
#define NCCLWATCH_AGGREGATOR_DETECT_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace ncclwatch::aggregator {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = v[mid];
  if (v.size() % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + mid);
  return (lo + hi) / 2;
}

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_MEDIAN_H_
