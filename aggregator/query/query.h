// The aggregator's read path, without gRPC: what is flagged now (from the analyzer), the stored
// detection events page by page, stored series points over a time range, and a sampled trace of
// one communicator (from the batch log, clocks aligned). Every Query RPC but GetStats (ingest's)
// and Watch (the event bus) is answered here.
//
// Thread safety: every method may be called concurrently with each other and with ingest.
#ifndef NCCLWATCH_AGGREGATOR_QUERY_QUERY_H_
#define NCCLWATCH_AGGREGATOR_QUERY_QUERY_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "aggregator/analysis/analyzer.h"
#include "aggregator/store/store.h"
#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

class QueryEngine {
 public:
  // Both outlive the engine.
  QueryEngine(const Store& store, const Analyzer& analyzer) : store_(store), analyzer_(analyzer) {}

  // Findings now; an empty job id means every job.
  ncclwatch::v1::ListStragglersResponse ListStragglers(
      const ncclwatch::v1::ListStragglersRequest& request) const;
  ncclwatch::v1::ListHangsResponse ListHangs(const ncclwatch::v1::ListHangsRequest& request,
                                             int64_t now_ns) const;
  ncclwatch::v1::ListDegradedResponse ListDegraded(
      const ncclwatch::v1::ListDegradedRequest& request) const;
  ncclwatch::v1::ListJobsResponse ListJobs() const;
  ncclwatch::v1::ListCommsResponse ListComms(const ncclwatch::v1::ListCommsRequest& request) const;
  // Every exported series with its current value (/federate, remote-write).
  // Every exported series now; with `detection_only`, just the detectors' (live) families.
  std::vector<SeriesPoint> CurrentSeries(bool detection_only = false) const {
    return analyzer_.Series(detection_only);
  }

  // Stored detection events from `since_unix_ns`, oldest first, at most `limit` (default 1000,
  // at most 100,000) matching the job; next_page_token resumes after the last one returned.
  // InvalidArgument for a malformed page token.
  absl::StatusOr<ncclwatch::v1::ListEventsResponse> ListEvents(
      const ncclwatch::v1::ListEventsRequest& request) const;
  // Stored points of the series matching `request.selector()`, raw or one per step (the latest
  // within 5 minutes, as PromQL), paged by series. InvalidArgument for a bad selector, range or
  // page token, or too many steps; ResourceExhausted when the answer would be too large.
  absl::StatusOr<ncclwatch::v1::QueryRangeResponse> QueryRange(
      const ncclwatch::v1::QueryRangeRequest& request, int64_t now_ns) const;
  // The sampled collectives of one communicator (by name or 0x hash), per rank, from the batch
  // log, with each rank's GPU clock aligned on the lowest rank's (query/trace.h). NotFound when
  // no report of it lies in the window.
  absl::StatusOr<ncclwatch::v1::GetTraceResponse> GetTrace(
      const ncclwatch::v1::GetTraceRequest& request, int64_t now_ns) const;

 private:
  const Store& store_;
  const Analyzer& analyzer_;
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_QUERY_QUERY_H_
