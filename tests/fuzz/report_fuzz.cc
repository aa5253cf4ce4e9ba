// Fuzz target: one plugin report as the agent and the aggregator receive it. Arbitrary bytes are
// decoded as a RankReport and validated (proto/validate.h); a report that passes goes through the
// aggregator's analysis (correlation, straggler, hang and degraded detectors, series export), as a
// hostile or broken writer's report would.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "aggregator/analysis/analyzer.h"
#include "aggregator/analysis/answers.h"
#include "proto/validate.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using ncclwatch::aggregator::Analyzer;
using ncclwatch::aggregator::AnalyzerOptions;

// One analyzer across inputs, so that reports meet earlier ones (a second rank of a communicator,
// a repeated sequence number); renewed now and then so that memory stays bounded.
Analyzer& SharedAnalyzer() {
  static std::unique_ptr<Analyzer> analyzer;
  static int uses = 0;
  if (analyzer == nullptr || ++uses % 4096 == 0) {
    AnalyzerOptions options;
    options.max_jobs = 16;
    options.max_comms_per_job = 16;
    options.max_series = 20'000;
    analyzer = std::make_unique<Analyzer>(options);
  }
  return *analyzer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ncclwatch::v1::RankReport report;
  if (!report.ParseFromArray(data, static_cast<int>(size))) return 0;
  const ncclwatch::ReportVerdict verdict = ncclwatch::ValidateReport(report);
  if (!verdict.ok) {
    FUZZ_CHECK(!verdict.reason.empty() && !verdict.detail.empty());
    return 0;
  }
  Analyzer& analyzer = SharedAnalyzer();
  // The receive time is derived from the input so that the detectors' clocks move both ways.
  const int64_t now_ns = 1'700'000'000'000'000'000 + static_cast<int64_t>(size) * 250'000'000;
  const std::vector<ncclwatch::SeriesPoint> points = analyzer.Ingest(report, now_ns).points;
  analyzer.Tick(now_ns + 1'000'000'000);
  for (const auto& p : points) FUZZ_CHECK(!p.name.empty());
  const std::string& job = report.identity().job_id();
  analyzer.answers().Stragglers(job);
  analyzer.answers().Hangs(job, now_ns);
  analyzer.answers().Degraded(job);
  analyzer.answers().Comms(job);
  return 0;
}
