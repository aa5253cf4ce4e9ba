// One value of one exported series at one time: what the analyzer exports on /federate and
// remote-write, and what the store keeps as a point.
#ifndef NCCLWATCH_COMMON_SERIES_H_
#define NCCLWATCH_COMMON_SERIES_H_

#include <cstdint>
#include <string>

#include "common/prom_text.h"

namespace ncclwatch {

struct SeriesPoint {
  std::string name;   // the family, e.g. ncclwatch_straggler
  LabelPairs labels;  // in the exporter's order (not necessarily sorted)
  double value = 0;
  int64_t time_ms = 0;  // unix milliseconds
};

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_SERIES_H_
