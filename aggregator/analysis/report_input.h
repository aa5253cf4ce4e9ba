// What the detectors read of a validated RankReport (aggregator/detect/types.h).
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_REPORT_INPUT_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_REPORT_INPUT_H_

#include "aggregator/detect/types.h"
#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch::aggregator {

// The report's rank, sizes, node, in-flight operations and interval statistics, into *out (its
// vectors' room is kept: an analyzer reuses one for every report). The string views point into
// `report`, which must outlive what reads them.
void ToRankInterval(const ncclwatch::v1::RankReport& report, RankInterval* out);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_REPORT_INPUT_H_
