// Prometheus federation: series selectors (`name{label="v", other=~"re.*"}`) and rendering of the
// matching series in text format 0.0.4 with timestamps, every family untyped -- the same shape
// Prometheus's own /federate produces. Regular expressions are RE2 and fully anchored, as in
// PromQL.
#ifndef NCCLWATCH_AGGREGATOR_FEDERATE_H_
#define NCCLWATCH_AGGREGATOR_FEDERATE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "aggregator/analyzer.h"
#include "common/metrics.h"
#include "proto/security.h"
#include "re2/re2.h"

namespace httplib {
class Server;
}  // namespace httplib

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
  bool Matches(const ExportedSample& sample) const;
  bool Matches(const std::string& name, const LabelPairs& labels) const;
};

// Parses one selector. InvalidArgument carries a message fit for an HTTP 400 body.
absl::StatusOr<Selector> ParseSelector(std::string_view text);

// The samples matching any selector, in exposition format, families and series sorted.
std::string RenderFederate(const std::vector<ExportedSample>& samples,
                           const std::vector<Selector>& selectors);

// The aggregator's HTTP endpoints: /federate (HTTP 400 with the parse error for a bad or missing
// selector, counted), /metrics (`metrics`) and /healthz.
// `federate_token` (optional, outlives the server): /federate then answers 401 without
// `Authorization: Bearer <token>`. /metrics and /healthz stay open (health, probes).
void InstallHttpRoutes(httplib::Server& http, MetricRegistry& metrics, Analyzer& analyzer,
                       TokenFile* federate_token = nullptr);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_FEDERATE_H_
