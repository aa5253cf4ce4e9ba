// Sanity checks on a RankReport, shared by the agent (on receipt from a plugin) and the aggregator
// (on receipt from an agent). A report that fails is rejected whole and counted by reason.
#ifndef NCCLWATCH_PROTO_VALIDATE_H_
#define NCCLWATCH_PROTO_VALIDATE_H_

#include <cstdint>
#include <string>

#include "ncclwatch/v1/report.pb.h"

namespace ncclwatch {

// Limits on what one report may carry; bigger reports are rejected as "too_large".
inline constexpr int kMaxStatsPerReport = 16384;
inline constexpr size_t kMaxSamplesPerReport = 1 << 20;
inline constexpr int kMaxInFlightPerReport = 1 << 16;
inline constexpr int kMaxRanks = 1 << 20;
inline constexpr size_t kMaxLabelLength = 256;
// Execution times beyond this (about 31 years, in microseconds) are nonsense, and would overflow
// the integer nanoseconds the detectors work in.
inline constexpr double kMaxExecTimeUs = 1e15;
// Timestamps past 2096 (unix ns) and in-flight ages over 3 years are refused for the same reason:
// the detectors subtract them from their clock in signed 64-bit nanoseconds.
inline constexpr uint64_t kMaxUnixNs = 4'000'000'000'000'000'000;
inline constexpr uint64_t kMaxInFlightAgeNs = 100'000'000'000'000'000;

// The largest message each server takes: gRPC refuses a bigger one (RESOURCE_EXHAUSTED) before any
// of our code sees it. A report is far smaller in practice (a few KiB); the agent cuts batches at
// 4 MiB of reports, so a batch stays under 8 MiB (4 MiB plus one report).
inline constexpr int kMaxReportBytes = 4 << 20;  // one plugin report, at the agent
inline constexpr int kMaxBatchBytes = 64 << 20;  // one node batch or query, at the aggregator

struct ReportVerdict {
  bool ok = true;
  std::string reason;  // short metric label: "bad_rank", "too_large", ...
  std::string detail;  // human-readable explanation
};

ReportVerdict ValidateReport(const ncclwatch::v1::RankReport& report);

}  // namespace ncclwatch

#endif  // NCCLWATCH_PROTO_VALIDATE_H_
