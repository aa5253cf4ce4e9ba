// A sampled trace of one communicator, read back from the batch log: per rank, the collectives it
// sampled (op, seq, GPU start and duration), with each rank's GPU clock moved onto the lowest
// rank's. The CLI turns it into a Chrome/Perfetto trace.
#ifndef NCCLWATCH_AGGREGATOR_QUERY_TRACE_H_
#define NCCLWATCH_AGGREGATOR_QUERY_TRACE_H_

#include <cstdint>
#include <map>

#include "absl/status/statusor.h"
#include "aggregator/store/store.h"
#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::aggregator {

// The trace of `request.comm()` (a name or 0x hash) of `request.job_id()` over
// [start_unix_ms, end_unix_ms] (end 0: `now_ns`), at most `max_ops` operations (default 200,000;
// the answer says when it was truncated). InvalidArgument for a missing job or communicator or an
// inverted range, NotFound when no report of it lies in the window.
absl::StatusOr<ncclwatch::v1::GetTraceResponse> ReadTrace(
    const Store& store, const ncclwatch::v1::GetTraceRequest& request, int64_t now_ns);

// Aligns the ranks' GPU clocks. A collective ends at nearly the same moment on every rank, so each
// rank's clock offset is the median difference between its end times and the lowest rank's, over
// the collectives both sampled; every start is shifted by it and the offset is recorded.
void AlignTraceClocks(std::map<int, ncclwatch::v1::TraceRank>& ranks);

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_QUERY_TRACE_H_
