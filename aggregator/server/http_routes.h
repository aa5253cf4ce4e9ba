// The aggregator's HTTP endpoints: /federate (Prometheus federation of the current series; HTTP 400
// with the parse error for a bad or missing selector, counted), /metrics (the aggregator's own
// health) and /healthz.
#ifndef NCCLWATCH_AGGREGATOR_SERVER_HTTP_ROUTES_H_
#define NCCLWATCH_AGGREGATOR_SERVER_HTTP_ROUTES_H_

#include <functional>
#include <string>

#include "aggregator/query/query.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/rpc/token.h"

namespace ncclwatch::aggregator {

// `metrics`, `query` and `federate_token` (optional) outlive the server. With a token, /federate
// answers 401 without `Authorization: Bearer <token>`; /metrics and /healthz stay open (health,
// probes).
// `not_ready` (may be null) says why the aggregator cannot take pushes now ("" when it can):
// /readyz answers 503 with it, 200 otherwise. `not_alive` (may be null) says why only a restart
// can help ("" while none is needed): /healthz, the liveness probe, answers 503 with it.
void InstallHttpRoutes(HttpServer& http, MetricRegistry& metrics, const QueryEngine& query,
                       TokenFile* federate_token = nullptr,
                       std::function<std::string()> not_ready = nullptr,
                       std::function<std::string()> not_alive = nullptr);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_SERVER_HTTP_ROUTES_H_
