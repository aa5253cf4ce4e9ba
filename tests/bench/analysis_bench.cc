// The aggregator's analysis alone, at a large job's scale: what `scripts/bench --scale` measures
// for the whole process (gRPC, parsing, the store, the analysis) less everything but the
// analysis, so that a change to the detectors' state can be compared in a minute, A against B,
// without the noise of 2,048 pushes a second on the same 2 cores.
//
// The job is the scale benchmark's (tests/loadgen/job_reports.h: TP 8 x PP 8 x DP N, 8 GPUs a
// node, 1F1B, stride 8, one report per rank, communicator and second, a slow GPU optionally
// injected). Each simulated second's reports are built first (not timed), then fed in node
// order to one Analyzer made with the aggregator's default options (AnalyzerOptionsOf), as its
// analysis thread does, from batches parsed as its gRPC threads parse them (ArenaBatch; every
// node's batch of the second parsed before the first is analysed); then the analysis ticks four
// times (the aggregator's 250 ms) and, every --history-step-s, takes the detection series
// (Analyzer::Series) as the store's snapshot does. With --spread, node n's batch comes n/N s into
// the second and each tick after a quarter of them, as a running aggregator sees agents whose
// flushes drifted apart: state changes between any two ticks, which the tick's caches must bear.
// Timed with the thread's CPU clock, each part apart, over the steady window (after --warm-s).
//
// What it leaves out: the time spent parsing the wire, the store, the query answers. What it keeps:
// the reports' real content and order, every detector, and the cache misses of a 16,384-rank job's
// state, which is what the analysis at that scale spends its time on (docs/scale.md).
//
// Usage: analysis_bench [--ranks=16384] [--seconds=70] [--warm-s=40] [--slow-rank=N]
//        [--slow-at-s=S] [--rounds=R] [--spread]
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "aggregator/analysis/analyzer.h"
#include "aggregator/server/aggregator_flags.h"
#include "aggregator/server/arena_batch.h"
#include "common/config.h"
#include "ncclwatch/v1/ingest.pb.h"
#include "tests/loadgen/job_reports.h"

namespace ncclwatch::bench {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kT0 = 1'800'000'000 * kSecond;  // 2027, on the model's (unix ns) clock

struct Config {
  int64_t ranks = 16384;
  // The job's embedding and model-parallel communicators settle into their design lateness
  // (the first stage late to the embedding all-reduce) about 37 s in: the window starts after.
  double seconds = 70;
  double warm_s = 40;
  int64_t slow_rank = -1;
  double slow_at_s = 50;
  int64_t rounds = 1;
  int64_t seed = 1;
  bool spread = false;
};

int64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * kSecond + ts.tv_nsec;
}

struct Totals {
  int64_t ingest_ns = 0, tick_ns = 0, series_ns = 0;
  int64_t reports = 0;
  int64_t seconds = 0;
  double named_after_s = -1;  // the slow GPU's STRAGGLER, from when it turned slow; -1: never
  int64_t false_pages = 0;    // findings started after the warm-up about anything else
};

// One run of the job through a fresh analyzer; the steady window's CPU, split by part.
Totals Run(const Config& c) {
  loadgen::ScaleJob shape;  // the scale benchmark's: TP 8 x PP 8 x DP N
  shape.dp = static_cast<int>(c.ranks / 64);
  simjob::JobModelConfig m = loadgen::ScaleJobModel(
      shape, static_cast<uint64_t>(c.seed), kT0, kT0 + static_cast<int64_t>((c.seconds + 5) * 1e9));
  if (c.slow_rank >= 0) {
    m.slow.push_back(
        {static_cast<int>(c.slow_rank), 1.5, kT0 + static_cast<int64_t>(c.slow_at_s * 1e9)});
  }
  loadgen::JobReportsOptions o;
  o.job_id = "bench";
  loadgen::JobReports job(m, o);

  // The aggregator's defaults: its detection options and how often it stores the series.
  const aggregator::AggregatorFlags defaults;
  const int64_t history_step_ns = static_cast<int64_t>(defaults.history_step_s * 1e9);
  aggregator::Analyzer analyzer(aggregator::AnalyzerOptionsOf(defaults));
  std::vector<std::string> sources;
  for (int n = 0; n < job.nodes(); ++n) sources.push_back(loadgen::JobReports::NodeName(n));

  Totals t;
  // The findings as the aggregator would announce them; the slow GPU's pid is the loadgen's.
  const uint32_t slow_pid = static_cast<uint32_t>(100000 + c.slow_rank);
  const int64_t slow_ns = kT0 + static_cast<int64_t>(c.slow_at_s * 1e9);
  const auto judge = [&](const std::vector<ncclwatch::v1::Event>& events, int64_t now_ns) {
    for (const auto& e : events) {
      if (e.phase() != ncclwatch::v1::Event::START) continue;
      const bool named = c.slow_rank >= 0 && e.kind() == ncclwatch::v1::Event::STRAGGLER &&
                         e.root_cause().pid() == slow_pid;
      if (named && t.named_after_s < 0) {
        t.named_after_s = static_cast<double>(now_ns - slow_ns) / 1e9;
      } else if (!named && now_ns - kT0 > static_cast<int64_t>(c.warm_s * 1e9)) {
        ++t.false_pages;
        std::fprintf(stderr, "analysis_bench: finding after the warm-up: %s\n",
                     e.summary().c_str());
      }
    }
  };
  // Each node's batch as the aggregator holds it: its agent's bytes parsed onto an arena of its
  // own, all of an interval's batches before their analysis.
  std::vector<std::unique_ptr<aggregator::ArenaBatch>> batches(job.nodes());
  std::vector<ncclwatch::v1::RankReport> built;
  ncclwatch::v1::NodeBatchBytes wire;
  std::string bytes;
  int64_t last_snapshot_ns = 0;
  const int seconds = static_cast<int>(c.seconds);
  for (int k = 1; k <= seconds; ++k) {
    const int64_t end = kT0 + k * kSecond;
    for (int n = 0; n < job.nodes(); ++n) {
      built.clear();
      job.NodeReports(n, end, &built);
      wire.Clear();
      wire.set_agent_id(sources[n]);
      wire.set_batch_seq(static_cast<uint64_t>(k));
      wire.set_node(sources[n]);
      for (const auto& r : built) r.SerializeToString(wire.add_reports());
      wire.SerializeToString(&bytes);
      batches[n] = std::make_unique<aggregator::ArenaBatch>();
      if (!batches[n]->batch().ParseFromString(bytes)) {
        std::fprintf(stderr, "analysis_bench: a batch does not parse\n");
        std::exit(1);
      }
    }
    const bool steady = k > c.warm_s;
    // Nodes [from, to) at `end` (--spread: node n at its own moment n/N s into the second).
    const auto ingest = [&](int from, int to) {
      const int64_t start = ThreadCpuNs();
      for (int n = from; n < to; ++n) {
        const int64_t at = c.spread ? end + n * kSecond / job.nodes() : end;
        for (const auto& r : batches[n]->batch().reports()) {
          judge(analyzer.Ingest(r, at, sources[n]).events, at);
          if (steady) ++t.reports;
        }
      }
      if (steady) t.ingest_ns += ThreadCpuNs() - start;
    };
    const auto tick = [&](int64_t at) {
      const int64_t start = ThreadCpuNs();
      judge(analyzer.Tick(at), at);
      if (steady) t.tick_ns += ThreadCpuNs() - start;
    };
    if (c.spread) {
      // Each quarter's nodes, then the tick that ends it.
      for (int q = 0; q < 4; ++q) {
        ingest(q * job.nodes() / 4, (q + 1) * job.nodes() / 4);
        tick(end + (q + 1) * kSecond / 4 - 1);
      }
    } else {
      ingest(0, job.nodes());
      for (int q = 0; q < 4; ++q) tick(end + q * kSecond / 4);
    }
    if (end - last_snapshot_ns >= history_step_ns) {
      last_snapshot_ns = end;
      const int64_t start = ThreadCpuNs();
      const auto series = analyzer.Series(/*detection_only=*/true);
      if (steady) t.series_ns += ThreadCpuNs() - start;
      if (series.empty() && k > 1) std::fprintf(stderr, "analysis_bench: no detection series\n");
    }
    if (steady) ++t.seconds;
    if (k % 10 == 0) std::fprintf(stderr, "analysis_bench: %d of %d s\n", k, seconds);
  }
  return t;
}

int Main(int argc, char** argv) {
  Config c;
  ConfigTable table("analysis_bench",
                    "Times the aggregator's analysis alone (every detector, no gRPC, no store) "
                    "on the scale benchmark's job, in CPU microseconds per rank-second, split "
                    "into ingesting reports, the 250 ms ticks and the detection series.");
  table.AddInt("ranks", "", &c.ranks, "Ranks of the job, TP 8 x PP 8 x DP N (a multiple of 64).");
  table.AddDouble("seconds", "", &c.seconds, "Simulated seconds to run.");
  table.AddDouble("warm-s", "", &c.warm_s, "Seconds left out of the figures (the job's warm-up).");
  table.AddInt("slow-rank", "", &c.slow_rank, "A rank whose GPU turns 1.5x slow (-1: none).");
  table.AddDouble("slow-at-s", "", &c.slow_at_s, "When it turns slow, s after the start.");
  table.AddInt("rounds", "", &c.rounds, "Runs, each with a fresh analyzer; one row each.");
  table.AddInt("seed", "", &c.seed, "Seed of the job model's jitter.");
  table.AddBool("spread", "", &c.spread,
                "Each node's batch at its own moment of the second, the ticks in between (agents "
                "whose flushes drift apart, as in a running aggregator); else every batch at "
                "once, then the second's four ticks.");
  absl::StatusOr<std::vector<std::string>> parsed = table.Parse(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "analysis_bench: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  if (table.help_requested()) {
    std::printf("%s", table.HelpText().c_str());
    return 0;
  }
  if (c.ranks < 64 || c.ranks % 64 != 0 || c.seconds < 1 || c.warm_s < 0 || c.warm_s >= c.seconds ||
      c.rounds < 1) {
    std::fprintf(stderr,
                 "analysis_bench: need --ranks a multiple of 64, --seconds >= 1, 0 <= --warm-s "
                 "< --seconds and --rounds >= 1\n");
    return 2;
  }
  std::printf(
      "Aggregator analysis alone, CPU us per rank-second over the steady window (%.0f s after "
      "%.0f s of warm-up)\n",
      c.seconds - static_cast<double>(static_cast<int>(c.warm_s)), c.warm_s);
  std::printf("%6s %5s %9s %8s %8s %8s %8s %8s %5s\n", "ranks", "round", "reports/s", "ingest",
              "tick", "series", "total", "named_s", "fp");
  int failed = 0;
  for (int64_t round = 1; round <= c.rounds; ++round) {
    const Totals t = Run(c);
    const double rank_s = static_cast<double>(c.ranks) * static_cast<double>(t.seconds);
    const auto us = [&](int64_t ns) { return static_cast<double>(ns) / 1e3 / rank_s; };
    const std::string named = c.slow_rank < 0       ? "-"
                              : t.named_after_s < 0 ? "never"
                                                    : absl::StrFormat("%.2f", t.named_after_s);
    std::printf("%6lld %5lld %9.0f %8.2f %8.2f %8.2f %8.2f %8s %5lld\n",
                static_cast<long long>(c.ranks), static_cast<long long>(round),
                static_cast<double>(t.reports) / static_cast<double>(t.seconds), us(t.ingest_ns),
                us(t.tick_ns), us(t.series_ns), us(t.ingest_ns + t.tick_ns + t.series_ns),
                named.c_str(), static_cast<long long>(t.false_pages));
    std::fflush(stdout);
    // Figures of an analysis that missed the fault or paged on a healthy GPU measure nothing.
    if ((c.slow_rank >= 0 && t.named_after_s < 0) || t.false_pages > 0) failed = 1;
  }
  if (failed) std::fprintf(stderr, "analysis_bench: the slow GPU was missed or a false page\n");
  return failed;
}

}  // namespace
}  // namespace ncclwatch::bench

int main(int argc, char** argv) { return ncclwatch::bench::Main(argc, argv); }
