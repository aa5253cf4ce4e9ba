#include "aggregator/server/http_routes.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "aggregator/query/federate.h"
#include "aggregator/query/selector.h"
#include "proto/exported_series.h"

namespace ncclwatch::aggregator {
namespace {

constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";

// GET /federate?match[]=SELECTOR[&match[]=...]: 401 without the token (when one is configured),
// 400 with the parse error for a missing or bad selector (counted), else the matching series.
void ServeFederate(const QueryEngine& query, const BearerGate& gate, Counter* bad_selectors,
                   const HttpRequest& req, HttpResponse& res) {
  if (!gate.Admits(req.Header("Authorization"))) {
    res.status = 401;
    res.headers.emplace_back("WWW-Authenticate", "Bearer");
    res.Set("a valid bearer token is required\n", "text/plain");
    return;
  }
  const size_t n = req.ParamCount("match[]");
  std::vector<Selector> selectors;
  std::string error = n == 0 ? "missing match[] parameter" : "";
  for (size_t i = 0; i < n && error.empty(); ++i) {
    auto sel = ParseSelector(req.Param("match[]", i));
    if (sel.ok()) {
      selectors.push_back(*std::move(sel));
    } else {
      error = std::string(sel.status().message());
    }
  }
  if (!error.empty()) {
    bad_selectors->Increment();
    res.status = 400;
    res.Set(error + "\n", "text/plain");
    return;
  }
  // Selectors that name only detection families (what alerting federates) are answered from the
  // detectors alone, without copying every rank's Inspector series (a million at 16,384 ranks)
  // under the analyzer's lock.
  const bool detection_only =
      std::none_of(std::begin(kExportedSeries), std::end(kExportedSeries), [&](const auto& f) {
        return !f.live && std::any_of(selectors.begin(), selectors.end(),
                                      [&](const Selector& s) { return s.MayMatchName(f.name); });
      });
  res.Set(RenderFederate(query.CurrentSeries(detection_only), selectors), kTextFormat);
}

}  // namespace

void InstallHttpRoutes(HttpServer& http, MetricRegistry& metrics, const QueryEngine& query,
                       TokenFile* federate_token, std::function<std::string()> not_ready,
                       std::function<std::string()> not_alive) {
  http.Get("/metrics",
           [&](const HttpRequest&, HttpResponse& res) { res.Set(metrics.Render(), kTextFormat); });
  // On the I/O thread: it answers even while every worker renders a slow /federate.
  // Alive unless only a restart can help (a full disk alone is no reason to restart).
  http.Probe("/healthz", [not_alive](const HttpRequest&, HttpResponse& res) {
    const std::string why = not_alive ? not_alive() : "";
    res.status = why.empty() ? 200 : 503;
    res.Set(why.empty() ? "ok\n" : why, "text/plain");
  });
  // Ready: pushes are being stored.
  http.Probe("/readyz", [not_ready](const HttpRequest&, HttpResponse& res) {
    const std::string problems = not_ready ? not_ready() : "";
    res.status = problems.empty() ? 200 : 503;
    res.Set(problems.empty() ? "ready\n" : problems, "text/plain");
  });
  Counter* bad_selectors = metrics.GetCounter("ncclwatch_aggregator_federate_bad_requests_total",
                                              "/federate requests refused with HTTP 400.");
  const BearerGate gate(
      federate_token,
      metrics.GetCounter("ncclwatch_aggregator_federate_unauthenticated_total",
                         "/federate requests refused with HTTP 401 for a missing or wrong token."));
  auto federate = [&query, bad_selectors, gate](const HttpRequest& req, HttpResponse& res) {
    ServeFederate(query, gate, bad_selectors, req, res);
  };
  http.Get("/federate", federate);
}

}  // namespace ncclwatch::aggregator
