// Prometheus series selectors (`name{label="v", other=~"re.*"}`), as /federate and the Query
// API's QueryRange take them. Regular expressions are RE2 and fully anchored, as in PromQL.
#ifndef NCCLWATCH_AGGREGATOR_QUERY_SELECTOR_H_
#define NCCLWATCH_AGGREGATOR_QUERY_SELECTOR_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/prom_text.h"
#include "common/series.h"
#include "re2/re2.h"

namespace ncclwatch::aggregator {

struct LabelMatcher {
  enum class Op { kEq, kNe, kRe, kNre };
  std::string name;  // "__name__" for the metric name
  Op op = Op::kEq;
  std::string value;
  std::shared_ptr<const RE2> regex;  // for kRe / kNre

  bool Matches(const std::string& label_value) const;
};

struct Selector {
  std::vector<LabelMatcher> matchers;
  bool Matches(const SeriesPoint& sample) const;
  // An absent label matches as "".
  bool Matches(const std::string& name, const LabelPairs& labels) const;
  // Whether some series called `name` could match (its __name__ matchers accept the name).
  bool MayMatchName(const std::string& name) const;
};

// Parses one selector. InvalidArgument carries a message fit for an HTTP 400 body.
absl::StatusOr<Selector> ParseSelector(std::string_view text);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_QUERY_SELECTOR_H_
