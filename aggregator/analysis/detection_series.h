// The ncclwatch_* detection series (straggler, lateness, hang, missing and silent ranks, degraded
// communicators, slow nodes, network suspects), computed from the detectors' current state.
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_DETECTION_SERIES_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_DETECTION_SERIES_H_

#include <cstdint>
#include <vector>

#include "aggregator/analysis/registry.h"
#include "aggregator/detect/detectors.h"
#include "common/series.h"

namespace ncclwatch::aggregator {

// Appends the value of every detection series now to `out`. Every value is stamped `now_ns`: the
// analyzer passes its clock (the latest Ingest or Tick), at which alone a value can change, so a
// new value always comes with a new timestamp (Prometheus drops a changed value that repeats a
// timestamp).
void AppendDetectionSeries(const CommRegistry& registry, const Detectors& detectors, int64_t now_ns,
                           std::vector<SeriesPoint>* out);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_DETECTION_SERIES_H_
