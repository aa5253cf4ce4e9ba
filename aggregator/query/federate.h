// Prometheus federation: the exported series matching any of a request's selectors, in text
// format 0.0.4 with timestamps, every family untyped -- the same shape Prometheus's own /federate
// produces.
#ifndef NCCLWATCH_AGGREGATOR_QUERY_FEDERATE_H_
#define NCCLWATCH_AGGREGATOR_QUERY_FEDERATE_H_

#include <string>
#include <vector>

#include "aggregator/query/selector.h"
#include "common/series.h"

namespace ncclwatch::aggregator {

// The samples matching any selector, with the catalogue's help texts (proto/exported_series.h):
// families sorted by name, each family's series in the order of `samples`.
std::string RenderFederate(const std::vector<SeriesPoint>& samples,
                           const std::vector<Selector>& selectors);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_QUERY_FEDERATE_H_
