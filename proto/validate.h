// Sanity checks on a RankReport, shared by the agent (on receipt from a plugin) and the aggregator
// (on receipt from an agent). A report that fails is rejected whole and counted by reason.
#ifndef NCCLWATCH_PROTO_VALIDATE_H_
#define NCCLWATCH_PROTO_VALIDATE_H_

#include <string>

#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch {

// Limits on what one report may carry; bigger reports are rejected as "too_large".
inline constexpr int kMaxStatsPerReport = 16384;
inline constexpr size_t kMaxSamplesPerReport = 1 << 20;
inline constexpr int kMaxInFlightPerReport = 1 << 16;
inline constexpr int kMaxRanks = 1 << 20;
inline constexpr size_t kMaxLabelLength = 256;

struct ReportVerdict {
  bool ok = true;
  std::string reason;  // short metric label: "bad_rank", "too_large", ...
  std::string detail;  // human-readable explanation
};

ReportVerdict ValidateReport(const ncclwatch::v1::RankReport& report);

}  // namespace ncclwatch

#endif  // NCCLWATCH_PROTO_VALIDATE_H_
