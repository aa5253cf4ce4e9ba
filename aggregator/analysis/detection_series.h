// The ncclwatch_* detection series (straggler, lateness, hang, missing and silent ranks, degraded
// communicators, slow nodes, network suspects), computed from the detectors' current state.
#ifndef NCCLWATCH_AGGREGATOR_ANALYSIS_DETECTION_SERIES_H_
#define NCCLWATCH_AGGREGATOR_ANALYSIS_DETECTION_SERIES_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "aggregator/analysis/registry.h"
#include "aggregator/detect/detectors.h"
#include "aggregator/rootcause/hang_origin.h"
#include "aggregator/rootcause/verdicts.h"
#include "common/series.h"

namespace ncclwatch::aggregator {

// Appends the value of every detection series now to `out`. Every value is stamped `now_ns`: the
// analyzer passes its clock (the latest Ingest or Tick), at which alone a value can change, so a
// new value always comes with a new timestamp (Prometheus drops a changed value that repeats a
// timestamp).
//
// ncclwatch_straggler and ncclwatch_node_straggler page: for a communicator with own times they
// come from the root-cause findings (`verdicts`: 1 for a reported GPU's rank in the communicator
// it was reported in, and for a node reported slow) and from the pages of lateness with no origin
// found (`unexplained`; ncclwatch_origin_not_found is 1 for their ranks, so that the alert can say
// so), else from the lateness flags. Likewise
// ncclwatch_hang, ncclwatch_hang_age_seconds and ncclwatch_rank_missing are set for the origins
// of hangs (`hangs`) only, not for the operations stuck behind them.
//
// Per communicator (ncclwatch_hang, ncclwatch_hang_age_seconds, ncclwatch_comm_degraded) every
// series is there, 0 when clear. Per rank and per node (ncclwatch_straggler,
// ncclwatch_rank_lateness_seconds, ncclwatch_node_straggler, ncclwatch_rank_missing,
// ncclwatch_rank_silent) only the ones set are: a 16,384-rank job would otherwise export some
// 400,000 zeros (docs/scale.md). Alerts select `== 1` and resolve when the series goes stale;
// a rank's lateness is there while it is flagged or at least the straggler threshold late (the
// consequences of a slow GPU stay visible).
// The communicator ranks and nodes paged with no origin found (rootcause/unexplained.h).
struct UnexplainedView {
  std::set<std::pair<CommKey, int>> ranks;
  std::set<std::pair<CommKey, std::string>> nodes;
};

void AppendDetectionSeries(const CommRegistry& registry, const Detectors& detectors,
                           const RootCauseVerdicts& verdicts, const HangOrigins& hangs,
                           const UnexplainedView& unexplained, int64_t now_ns,
                           std::vector<SeriesPoint>* out);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_ANALYSIS_DETECTION_SERIES_H_
