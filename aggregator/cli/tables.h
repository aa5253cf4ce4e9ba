// The text `ncclwatch` prints for people: one pure function per answer of the Query API, each
// returning exactly the bytes the command writes to stdout (tables, then "Finding:" sentences),
// newlines included. No I/O, no state; thread-safe.
//
// Times are dated and zoned, in the process's time zone (TZ; `ncclwatch --utc` sets it to UTC):
// "2026-11-24 23:36:19 UTC". JSON carries RFC 3339 UTC instead (json.h).
#ifndef NCCLWATCH_AGGREGATOR_CLI_TABLES_H_
#define NCCLWATCH_AGGREGATOR_CLI_TABLES_H_

#include <cstdint>
#include <string>

#include "aggregator/findings/findings.h"
#include "ncclwatch/v1/query.pb.h"

namespace ncclwatch::cli {

// "YYYY-MM-DD HH:MM:SS ZONE" of a Unix time in nanoseconds, in local time; with `millis`,
// "YYYY-MM-DD HH:MM:SS.mmm ZONE".
std::string ClockText(uint64_t unix_ns, bool millis = false);

// "rank 3 (node node-a, GPU1)", plus ", pod ns/name, container c" when the agent found the rank's
// GPU in the kubelet's pod-resources answer (never outside Kubernetes). An empty node is
// "unknown", an empty pod namespace "-". The findings' wording (aggregator/findings), as every
// "Finding:" line below is: the CLI says what the server's events say.
using aggregator::RankText;

// `ncclwatch stragglers`: the root causes with their consequences, the slow nodes, then a table of
// the ranks
// flagged late in communicators without own times (older plugins) and one "Finding:" sentence
// per such rank; "No GPU is slow itself and no rank is flagged as a straggler." when neither.
// Root causes first (each GPU slow itself, with the late ranks it explains under it), then every
// late rank's row and finding.
std::string StragglersText(const ncclwatch::v1::ListStragglersResponse& response);

// `ncclwatch hangs`: the hung collectives (a point-to-point hang reads "Send/Recv", seq "-"), the
// silent ranks, then one "Finding:" sentence each; or "No hung collective and no silent rank.".
std::string HangsText(const ncclwatch::v1::ListHangsResponse& response);

// `ncclwatch degraded`: the degraded communicators, then a "Finding:" per suspect node (or one
// saying that no node is singled out yet); or "No degraded communicator.".
std::string DegradedText(const ncclwatch::v1::ListDegradedResponse& response);

// `ncclwatch jobs` and `ncclwatch comms`: one line per job / communicator.
std::string JobsText(const ncclwatch::v1::ListJobsResponse& response);
std::string CommsText(const ncclwatch::v1::ListCommsResponse& response);

// `ncclwatch query SELECTOR`: per series its name, labels and point count, then one line per
// point; "No stored point matches ..." when nothing matched in the last `since_s` seconds.
std::string QueryText(const ncclwatch::v1::QueryRangeResponse& response,
                      const std::string& selector, double since_s);

// `ncclwatch events`: "HH:MM:SS  <summary>\n".
std::string EventLine(const ncclwatch::v1::Event& event);
// `ncclwatch events` when nothing was stored in the last `since_s` seconds; with `follow`, says
// that it waits for new ones.
std::string NoEventsText(double since_s, bool follow);

// `ncclwatch trace`, after writing `path`: how many sampled collectives of how many ranks, and
// where to open the file.
std::string TraceWrittenText(const ncclwatch::v1::GetTraceResponse& response,
                             const std::string& job, const std::string& path);

}  // namespace ncclwatch::cli

#endif  // NCCLWATCH_AGGREGATOR_CLI_TABLES_H_
