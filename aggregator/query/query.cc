#include "aggregator/query/query.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "aggregator/analysis/answers.h"
#include "aggregator/findings/findings.h"
#include "aggregator/query/selector.h"
#include "aggregator/query/trace.h"

namespace ncclwatch::aggregator {
namespace {

constexpr int64_t kMaxQuerySteps = 11'000;        // as Prometheus's range query limit
constexpr size_t kMaxQueryPoints = 5'000'000;     // per QueryRange answer
constexpr int64_t kQueryLookbackMs = 5 * 60'000;  // PromQL's default lookback

}  // namespace

ncclwatch::v1::ListStragglersResponse QueryEngine::ListStragglers(
    const ncclwatch::v1::ListStragglersRequest& request) const {
  ncclwatch::v1::ListStragglersResponse out;
  for (auto& s : analyzer_.answers().Stragglers(request.job_id()))
    *out.add_stragglers() = std::move(s);
  for (auto& r : analyzer_.answers().RootCauses(request.job_id()))
    *out.add_root_causes() = std::move(r);
  for (auto& n : analyzer_.answers().SlowNodes(request.job_id()))
    *out.add_slow_nodes() = std::move(n);
  return out;
}

ncclwatch::v1::ListHangsResponse QueryEngine::ListHangs(
    const ncclwatch::v1::ListHangsRequest& request, int64_t now_ns) const {
  return analyzer_.answers().Hangs(request.job_id(), now_ns);
}

ncclwatch::v1::ListDegradedResponse QueryEngine::ListDegraded(
    const ncclwatch::v1::ListDegradedRequest& request) const {
  return analyzer_.answers().Degraded(request.job_id());
}

ncclwatch::v1::ListJobsResponse QueryEngine::ListJobs() const {
  ncclwatch::v1::ListJobsResponse out;
  for (auto& j : analyzer_.answers().Jobs()) *out.add_jobs() = std::move(j);
  return out;
}

ncclwatch::v1::ListCommsResponse QueryEngine::ListComms(
    const ncclwatch::v1::ListCommsRequest& request) const {
  ncclwatch::v1::ListCommsResponse out;
  for (auto& c : analyzer_.answers().Comms(request.job_id())) *out.add_comms() = std::move(c);
  return out;
}

absl::StatusOr<ncclwatch::v1::GetTraceResponse> QueryEngine::GetTrace(
    const ncclwatch::v1::GetTraceRequest& request, int64_t now_ns) const {
  return ReadTrace(store_, request, now_ns);
}

absl::StatusOr<ncclwatch::v1::QueryRangeResponse> QueryEngine::QueryRange(
    const ncclwatch::v1::QueryRangeRequest& request, int64_t now_ns) const {
  absl::StatusOr<Selector> selector = ParseSelector(request.selector());
  if (!selector.ok()) return selector.status();
  const auto end_ms =
      static_cast<int64_t>(request.end_unix_ms() == 0 ? now_ns / 1'000'000 : request.end_unix_ms());
  const auto start_ms = static_cast<int64_t>(request.start_unix_ms());
  if (start_ms > end_ms) {
    return absl::InvalidArgumentError("start_unix_ms is after end_unix_ms");
  }
  const int64_t step = request.step_ms();
  if (step > 0 && (end_ms - start_ms) / step > kMaxQuerySteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", kMaxQuerySteps, " steps: raise step_ms or narrow the range"));
  }
  const size_t max_series = request.max_series() == 0 ? 1000 : request.max_series();
  uint64_t after_id = 0;  // the page token: the id of the last series already returned
  if (!request.page_token().empty() && !absl::SimpleAtoi(request.page_token(), &after_id)) {
    return absl::InvalidArgumentError("malformed page_token");
  }
  ncclwatch::v1::QueryRangeResponse out;
  size_t points = 0;
  uint64_t last_id = 0;
  for (const StoredSeries& series : store_.Series()) {
    if (series.id <= after_id || !selector->Matches(series.name, series.labels)) continue;
    if (static_cast<size_t>(out.series_size()) >= max_series) {
      out.set_truncated(true);
      out.set_next_page_token(absl::StrCat(last_id));
      break;
    }
    // With a step, the value at t is the latest point in (t - lookback, t], as in PromQL.
    const int64_t read_from = step > 0 ? start_ms - kQueryLookbackMs + 1 : start_ms;
    absl::StatusOr<std::vector<Point>> raw = store_.ReadPoints(series.id, read_from, end_ms);
    if (!raw.ok()) return raw.status();
    ncclwatch::v1::TimeSeries ts;
    if (step == 0) {
      for (const Point& p : *raw) {
        auto* tp = ts.add_points();
        tp->set_time_ms(p.time_ms);
        tp->set_value(p.value);
      }
    } else {
      size_t i = 0;
      for (int64_t t = start_ms; t <= end_ms; t += step) {
        while (i < raw->size() && (*raw)[i].time_ms <= t) ++i;
        if (i > 0 && (*raw)[i - 1].time_ms > t - kQueryLookbackMs) {
          auto* tp = ts.add_points();
          tp->set_time_ms(t);
          tp->set_value((*raw)[i - 1].value);
        }
      }
    }
    if (ts.points_size() == 0) continue;
    points += ts.points_size();
    if (points > kMaxQueryPoints) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the answer would exceed ", kMaxQueryPoints,
                       " points: narrow the selector or the range, or raise step_ms"));
    }
    last_id = series.id;
    ts.set_name(series.name);
    for (const auto& [k, v] : series.labels) {
      auto* label = ts.add_labels();
      label->set_name(k);
      label->set_value(v);
    }
    *out.add_series() = std::move(ts);
  }
  return out;
}

absl::StatusOr<ncclwatch::v1::ListEventsResponse> QueryEngine::ListEvents(
    const ncclwatch::v1::ListEventsRequest& request) const {
  const size_t limit = request.limit() == 0 ? 1000 : std::min<size_t>(request.limit(), 100000);
  ncclwatch::v1::ListEventsResponse out;
  // Filtering by job happens after the read, so read in pages until `limit` matches or the end.
  // Events of one report share a timestamp: a page resumes at the previous page's last timestamp
  // and skips the events of that timestamp already consumed (the store keeps them in write order).
  constexpr size_t kPage = 4096;
  int64_t since = static_cast<int64_t>(request.since_unix_ns());
  size_t skip = 0;  // events at time `since` consumed by earlier pages (or answers)
  if (!request.page_token().empty()) {
    // "<time_ns>.<events at that time already returned>"
    const size_t dot = request.page_token().find('.');
    uint64_t t = 0;
    uint64_t n = 0;
    if (dot == std::string::npos || !absl::SimpleAtoi(request.page_token().substr(0, dot), &t) ||
        !absl::SimpleAtoi(request.page_token().substr(dot + 1), &n)) {
      return absl::InvalidArgumentError("malformed page_token");
    }
    since = static_cast<int64_t>(t);
    skip = n;
  }
  for (;;) {
    auto page = store_.ListEvents(since, skip + kPage);
    if (!page.ok()) return page.status();
    const size_t page_size = page->size();
    int64_t current = -1;  // the timestamp being walked and how many events of it were seen
    size_t seen_at_current = 0;
    size_t seen_at_since = 0;
    int64_t last = since;
    size_t seen_at_last = 0;
    for (auto& e : *page) {
      const auto t = static_cast<int64_t>(e.time_unix_ns());
      if (t != current) {
        current = t;
        seen_at_current = 0;
      }
      ++seen_at_current;
      last = t;
      seen_at_last = seen_at_current;
      if (t == since) {
        seen_at_since = seen_at_current;
        if (seen_at_current <= skip) continue;
      }
      if (!request.job_id().empty() && EventJobId(e) != request.job_id()) continue;
      *out.add_events() = std::move(e);
      if (static_cast<size_t>(out.events_size()) >= limit) {
        out.set_next_page_token(absl::StrCat(t, ".", seen_at_current));
        return out;
      }
    }
    if (page_size < skip + kPage) return out;  // the end of the log
    if (last == since) {
      skip = seen_at_since;  // the whole page had one timestamp
    } else {
      skip = seen_at_last;
      since = last;
    }
  }
}

}  // namespace ncclwatch::aggregator
