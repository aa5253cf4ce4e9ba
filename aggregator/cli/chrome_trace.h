// The Chrome trace-event JSON (https://ui.perfetto.dev, chrome://tracing) that `ncclwatch trace`
// writes for a GetTraceResponse. Pure function; thread-safe.
#ifndef NCCLWATCH_AGGREGATOR_CLI_CHROME_TRACE_H_
#define NCCLWATCH_AGGREGATOR_CLI_CHROME_TRACE_H_

#include <string>

#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::cli {

// {"displayTimeUnit":"ms","traceEvents":[...]} with one process (pid 1, named after the job and
// communicator) and, per rank in the order of `trace.ranks()`, one thread (tid = rank, named
// "rank R  node GPUn", sorted by rank) holding a complete ("X") event per sampled collective:
// name = the operation, ts = its start minus the earliest start of the whole trace and dur = its
// duration, both in microseconds with three decimals, args.seq = NCCL's seqNumber. Ends with a
// newline.
std::string ChromeTrace(const ncclwatch::v1::GetTraceResponse& trace);

}  // namespace ncclwatch::cli

#endif  // NCCLWATCH_AGGREGATOR_CLI_CHROME_TRACE_H_
